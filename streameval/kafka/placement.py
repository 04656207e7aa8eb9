"""Where the default partitioner puts a query: murmur2 of its id, as Java's and kafka-python's
producers place keyed records. A record in another partition than its query's was placed
another way (librdkafka's default partitioner is CRC32) or keyed by something else: its
impression and events may not meet (README, `streameval run`: misrouted records)."""

from __future__ import annotations

from kafka.partitioner.default import murmur2

#: query ids whose partition is remembered (events mostly follow their impression) before the
#: memory is cleared
CACHE_SIZE = 100_000


class Placement:
    """The partition murmur2 gives each query id, for a topic of ``partitions`` partitions."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self._cache: dict[str, int] = {}

    def partition_of(self, query_id: str) -> int:
        partition = self._cache.get(query_id)
        if partition is None:
            if len(self._cache) >= CACHE_SIZE:
                self._cache.clear()
            # Utils.toPositive(Utils.murmur2(key)) % numPartitions, as the Java client computes it
            partition = (murmur2(query_id.encode()) & 0x7FFFFFFF) % self.partitions
            self._cache[query_id] = partition
        return partition
