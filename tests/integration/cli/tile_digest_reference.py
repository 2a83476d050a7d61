"""An independent implementation of metaload's tile digests (util/hash/tile_digest.h), from
their definition in docs/integrity.md, with other libraries: xxhash (PyPI) for the fast kind's
XXH3, hashlib's SHA-256 and the openssl command's AES-128-CTR for the strong kind. The tests
compare what the C++ core records and proves with what this computes."""
import hashlib
import struct
import subprocess

import xxhash

DOMAIN = b"metaload tile digest v1\0"  # the C++ tag with its terminating NUL, as hashed there
LANES = {"fast": 4, "strong": 1024}
COLUMN_SPLITS = {"fast": 64, "strong": 8}
MAX_TILE_BYTES = {"fast": 4096, "strong": 16384}


def tile_bytes(kind, shape, element_bytes):
    """The tile size TileGridFor gives: g elements of the last dimension (1 for a column or scalar)."""
    if len(shape) < 2:
        return element_bytes
    columns, g = shape[-1], 1
    while columns % (2 * g) == 0 and 2 * g * COLUMN_SPLITS[kind] <= columns and \
            2 * g * element_bytes <= MAX_TILE_BYTES[kind]:
        g *= 2
    return g * element_bytes


def _aes_ctr_stream(key_iv, n):
    return subprocess.run(["openssl", "enc", "-aes-128-ctr", "-nosalt", "-K", key_iv[:16].hex(), "-iv",
                           key_iv[16:32].hex()], input=bytes(n), capture_output=True, check=True).stdout


def term(kind, index, tile):
    if kind == "fast":
        h = xxhash.xxh3_64_intdigest(tile, seed=index)
        return [(h >> (16 * lane)) & 0xFFFF for lane in range(4)]
    md = hashlib.sha256(DOMAIN + struct.pack("<QQ", index, len(tile)) + tile).digest()
    stream = _aes_ctr_stream(md, 2 * LANES["strong"])
    return list(struct.unpack(f"<{LANES['strong']}H", stream))


def digest(kind, data, tile):
    """The lanes of a tensor whose stored bytes are `data`, cut in tiles of `tile` bytes."""
    lanes = [0] * LANES[kind]
    for k in range(len(data) // tile):
        for lane, v in enumerate(term(kind, k, data[k * tile:(k + 1) * tile])):
            lanes[lane] = (lanes[lane] + v) & 0xFFFF
    return lanes


def for_message(kind, lanes):
    """As the core writes it in messages (LanesForMessage)."""
    raw = struct.pack(f"<{len(lanes)}H", *lanes)
    if kind == "fast":
        return f"0x{struct.unpack('<Q', raw)[0]:016x}"
    return "sha256:" + hashlib.sha256(raw).hexdigest()[:16]


if __name__ == "__main__":  # the values tile_digest_test.cc pins
    data = bytes(i % 256 for i in range(4 * 256))
    for kind in ("fast", "strong"):
        t = tile_bytes(kind, [4, 256], 1)
        print(kind, t, for_message(kind, digest(kind, data, t)))
