"""The cleaner's key -> latest offset map, bounded by memory (Kafka's `SkimpyOffsetMap`).

Kafka stores a 16-byte MD5 of each key in a fixed hash table sized by
`log.cleaner.dedupe.buffer.size` and accepts the (tiny) collision risk. Here the map is a dict
keyed by the key bytes themselves, so it is exact; its budget counts what an entry costs in
CPython (the key bytes plus `ENTRY_OVERHEAD_BYTES` for the dict slot, the bytes object and the
offset int). Like Kafka's, the map is only filled to `load_factor` of its budget
(`log.cleaner.io.buffer.load.factor`); the cleaner then cleans only as far as the map reached.

Invariants: `used_bytes <= capacity_bytes * load_factor`; `latest_offset` never decreases
until `clear()`.
Thread-safety: none; one cleaner owns one map.
"""

from __future__ import annotations

__all__ = ["ENTRY_OVERHEAD_BYTES", "OffsetMap"]

# CPython cost of one entry beyond the key's bytes: ~33 bytes of bytes-object header, ~40 of
# dict entry and index at 2/3 load, ~32 for an int offset above the small-int cache.
ENTRY_OVERHEAD_BYTES = 104


class OffsetMap:
    """Key bytes -> the largest offset seen for that key, with a memory budget."""

    __slots__ = ("_entries", "capacity_bytes", "latest_offset", "load_factor", "used_bytes")

    def __init__(self, capacity_bytes: int, load_factor: float = 0.9) -> None:
        if capacity_bytes <= 0 or not 0 < load_factor <= 1:
            raise ValueError(
                f"offset map needs a positive budget and a load factor in (0, 1], got "
                f"{capacity_bytes} bytes at {load_factor}"
            )
        self.capacity_bytes = capacity_bytes
        self.load_factor = load_factor
        self._entries: dict[bytes, int] = {}
        self.used_bytes = 0
        self.latest_offset = -1

    @property
    def size(self) -> int:
        """Number of keys held."""
        return len(self._entries)

    @property
    def utilization(self) -> float:
        """Fraction of the budget in use (Kafka's `utilization`, reported in cleaner stats)."""
        return self.used_bytes / self.capacity_bytes

    def put(self, key: bytes, offset: int) -> bool:
        """Map `key` to `offset`; False (and no change) if a new key would exceed the budget.

        Replacing the offset of a key already held costs nothing, so it always succeeds.
        """
        if key in self._entries:
            self._entries[key] = offset
            return True
        cost = len(key) + ENTRY_OVERHEAD_BYTES
        if self.used_bytes + cost > self.capacity_bytes * self.load_factor:
            return False
        self._entries[key] = offset
        self.used_bytes += cost
        return True

    def get(self, key: bytes) -> int:
        """The offset stored for `key`, or -1 when absent (Kafka's convention)."""
        return self._entries.get(key, -1)

    def update_latest_offset(self, offset: int) -> None:
        """Record that every offset up to `offset` has been read into the map."""
        self.latest_offset = max(self.latest_offset, offset)

    def clear(self) -> None:
        """Forget every key and the latest offset (start of a cleaning round)."""
        self._entries.clear()
        self.used_bytes = 0
        self.latest_offset = -1

    def __repr__(self) -> str:
        return (
            f"OffsetMap(keys={self.size}, used={self.used_bytes}/{self.capacity_bytes}, "
            f"latest_offset={self.latest_offset})"
        )
