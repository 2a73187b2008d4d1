"""Zero-copy reads: ranges of segment files that the network layer hands to `sendfile`
(Kafka's `FileRecords.slice` and `transferTo`), so fetched batches never pass through Python.

A `FileSlice` holds its own duplicate of the segment's descriptor: the range stays readable
even if retention deletes or a roll closes the segment before the response is sent.
"""

from __future__ import annotations

import os
from collections.abc import Iterator


class FileSlice:
    """`size` bytes of a file from `position`, sent later with `sendfile`."""

    __slots__ = ("file", "position", "size")

    def __init__(self, fd: int, position: int, size: int) -> None:
        self.file = os.fdopen(os.dup(fd), "rb", buffering=0)  # closed with this object
        self.position = position
        self.size = size

    def __len__(self) -> int:
        return self.size

    def tobytes(self) -> bytes:
        return os.pread(self.file.fileno(), self.size, self.position)

    def close(self) -> None:
        self.file.close()


class FileRecords:
    """One partition's fetched batches: bytes and file slices, in log order."""

    __slots__ = ("pieces", "_size")

    def __init__(self, pieces: tuple[bytes | FileSlice, ...]) -> None:
        self.pieces = pieces
        self._size = sum(len(p) for p in pieces)

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __iter__(self) -> Iterator[bytes | FileSlice]:
        return iter(self.pieces)

    def tobytes(self) -> bytes:
        return b"".join(p if isinstance(p, bytes) else p.tobytes() for p in self.pieces)

    __bytes__ = tobytes  # bytes(read.records) whatever a read returned

    def close(self) -> None:
        for p in self.pieces:
            if isinstance(p, FileSlice):
                p.close()


#: Smaller reads are copied: a sendfile call costs more than copying a few pages.
ZERO_COPY_MIN_BYTES = 64 * 1024
