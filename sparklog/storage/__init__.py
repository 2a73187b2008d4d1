"""The partition log: segments, indexes, epoch cache, producer state, recovery, retention, compaction."""
