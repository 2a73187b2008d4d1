"""Responses whose `records` fields are ranges of segment files, sent with `sendfile`.

The body is encoded by kio as usual, with a unique 16-byte placeholder in place of each
partition's records; `pieces` cuts the encoded frame at the placeholders and puts the file
ranges (with their real length prefixes) in their place, so the fetched batches go from the
page cache to the socket without entering Python (Kafka's zero-copy `transferTo`).
"""

from __future__ import annotations

import os
import struct
from typing import Any

from sparklog.records.file_records import FileRecords, FileSlice
from sparklog.records.varint import encode_unsigned_varint

_PLACEHOLDER_BYTES = 16
_INT32 = struct.Struct(">i")


class FileResponse:
    """A response body plus the file-backed records its placeholders stand for."""

    __slots__ = ("body", "records")

    def __init__(self, body: Any, records: dict[bytes, FileRecords]) -> None:
        self.body = body
        self.records = records

    def close(self) -> None:
        for records in self.records.values():
            records.close()


def placeholder(index: int) -> bytes:
    """A placeholder no other field of the response can contain by chance."""
    return os.urandom(_PLACEHOLDER_BYTES - 4) + index.to_bytes(4, "big")


def pieces(
    frame: bytes, records: dict[bytes, FileRecords], flexible: bool
) -> list[bytes | FileSlice]:
    """The size-prefixed `frame` with each placeholder replaced by its records."""
    out: list[bytes | FileSlice] = []
    prefix_bytes = 1 if flexible else 4  # compact (uvarint n + 1) or int32 length of 16
    at = 0
    for position, key in sorted((frame.index(key), key) for key in records):
        size = len(records[key])
        out.append(frame[at : position - prefix_bytes])
        out.append(encode_unsigned_varint(size + 1) if flexible else _INT32.pack(size))
        out.extend(p for p in records[key] if len(p))
        at = position + _PLACEHOLDER_BYTES
    out.append(frame[at:])
    first = out[0]
    assert isinstance(first, bytes)
    out[0] = _INT32.pack(sum(len(p) for p in out) - 4) + first[4:]
    return out
