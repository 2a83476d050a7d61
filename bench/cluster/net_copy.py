"""Copies a checkpoint folder from the one emulated host that sees it to the local disks of the
others, over the emulated network: what a user of a peer loader must do first when only one
host can reach the checkpoint (bench/cluster/regimes.py charges its time to those loaders).

    net_copy.py send SRC_DIR DEST_DIR PORT RECEIVERS   (on the host that sees SRC_DIR)
    net_copy.py receive HOST PORT DEST_DIR              (on every other host)

The sender reads every file of SRC_DIR once, writes it to its own DEST_DIR (its local disk)
and sends it to every receiver (TCP, 4 MiB pieces), then waits for each receiver's
acknowledgement that the last byte is written. It prints one JSON line: {"seconds" (from the
last receiver's connection to the last acknowledgement), "bytes" (per host), "receivers"}.
"""
import json
import pathlib
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor

PIECE_BYTES = 4 << 20


def send(src, dest, port, receivers):
    src, dest = pathlib.Path(src), pathlib.Path(dest)
    files = sorted(p for p in src.iterdir() if p.is_file())
    with socket.create_server(("0.0.0.0", port), backlog=receivers) as server:
        print("listening", flush=True)
        conns = [server.accept()[0] for _ in range(receivers)]
    started = time.monotonic()
    total = 0
    dest.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(len(conns)) as pool:  # to every receiver at once, like parallel scp
        def to_all(data):
            for done in [pool.submit(c.sendall, data) for c in conns]:
                done.result()

        for path in files:
            size = path.stat().st_size
            to_all((json.dumps({"name": path.name, "size": size}) + "\n").encode())
            with open(path, "rb") as f, open(dest / path.name, "wb") as out:
                while piece := f.read(PIECE_BYTES):
                    out.write(piece)
                    to_all(piece)
            total += size
        to_all(b'{"end": true}\n')
    for c in conns:
        if c.makefile("rb").readline() != b"done\n":
            raise SystemExit("net_copy: a receiver did not acknowledge")
        c.close()
    print(json.dumps({"seconds": time.monotonic() - started, "bytes": total, "files": len(files),
                      "receivers": receivers}), flush=True)


def receive(host, port, dest):
    dest = pathlib.Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            conn = socket.create_connection((host, port))
            break
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    stream = conn.makefile("rb")
    while True:
        header = json.loads(stream.readline())
        if header.get("end"):
            break
        name, left = header["name"], header["size"]
        if "/" in name or name.startswith("."):
            raise SystemExit(f"net_copy: refusing file name {name!r}")
        with open(dest / name, "wb") as out:
            while left:
                piece = stream.read(min(left, PIECE_BYTES))
                if not piece:
                    raise SystemExit(f"net_copy: {name} ended early")
                out.write(piece)
                left -= len(piece)
    conn.sendall(b"done\n")
    conn.close()


def main(argv):
    if len(argv) == 5 and argv[0] == "send":
        send(argv[1], argv[2], int(argv[3]), int(argv[4]))
    elif len(argv) == 4 and argv[0] == "receive":
        receive(argv[1], int(argv[2]), argv[3])
    else:
        raise SystemExit(__doc__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
