"""moto's S3 server (`python -m moto.server`) with one change: a ranged GET costs its range.

moto 5.2.6 answers a ranged GET by copying the whole object out of its buffer (`FakeKey.value`)
under the object's lock and slicing the copy, so every range costs as much as the object and the
ranges of one object never overlap in time: a reader that asks for 8 MiB parts of a 500 MB
object makes the server copy 500 MB per part. A real store (S3, MinIO, Ceph RGW) reads the range.
Here, within a GetObject that carries a Range header, the object's value is a view that reads
only the bytes sliced from it (still under the object's lock); everything else — signatures,
ETags, If-Match, errors, multipart — is moto's own code, unchanged.

    python tests/integration/s3_server_main.py -H 127.0.0.1 -p PORT    (moto.server's arguments)
"""
import sys
import threading

from moto import server
from moto.s3 import models, responses

_in_ranged_get = threading.local()


class _RangeView:
    """An object's bytes as moto's range code uses them: len() and [a:b] read from its buffer."""

    def __init__(self, key):
        self.key, self.size = key, key.size

    def __len__(self):
        return self.size

    def __getitem__(self, item):
        if not isinstance(item, slice):
            raise TypeError("an object's view is sliced, not indexed")
        start, stop, step = item.indices(self.size)
        if step != 1:
            raise TypeError("an object's view is sliced contiguously")
        with self.key.lock:
            self.key._value_buffer.seek(start)
            return self.key._value_buffer.read(max(0, stop - start))


_value = models.FakeKey.value


def _ranged_value(key):
    if getattr(_in_ranged_get, "on", False):
        return _RangeView(key)
    return _value.fget(key)


models.FakeKey.value = property(_ranged_value, _value.fset)

_key_response_get = responses.S3Response._key_response_get


def _get(self, query, key_name):
    _in_ranged_get.on = bool(self.headers.get("range")) and not query.get("partNumber")
    try:
        return _key_response_get(self, query, key_name)
    finally:
        _in_ranged_get.on = False


responses.S3Response._key_response_get = _get

_handle_range_header = responses.S3Response._handle_range_header


def _range(self, request, headers, content):
    status, headers, body = _handle_range_header(self, request, headers, content)
    if isinstance(body, _RangeView):  # a Range moto answers whole (several ranges, unparsable)
        body = body[:]
    return status, headers, body


responses.S3Response._handle_range_header = _range

if __name__ == "__main__":
    server.main(sys.argv[1:])
