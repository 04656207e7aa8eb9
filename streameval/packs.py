"""Packs: the queries and dedup keys of a partition's state, many to a changelog record. No I/O.

Most of what a checkpoint writes is per query (an open query, or the tombstone of a settled
one) and per event (its dedup key). Written one record per key, a checkpoint sends about 1.3
changelog records per input record, and every record costs the producer and the encoder as much
as a whole list of them. So these two kinds go into *packs*: each checkpoint writes the query
and dedup-key entries that changed since the last one into records ``p:<n>`` (``n`` counts up
per partition, from the totals), a few thousand entries each, and a pack is deleted (a null
value) once none of its entries is still the newest value of a key that is still held:

- a newer pack wrote the key again (an event changed the query; it settled), or
- the key was forgotten (a tombstone or a dedup key whose time the watermark passed).

A forgotten key writes nothing. Its entry may stay in a pack that is still live for other
entries, so a restore drops what the watermark has passed, exactly as the join would have: a
dedup key whose time is below the watermark, a tombstone past its retention, and an open query
past its settling time, which is then a tombstone, or nothing when that too is past (the join
settles every query the watermark passes, so no checkpoint holds such a query open; an entry
that says so was written before it settled, by a pack the settling's own pack outlived).

The orphans (``o:<query_id>``), windows, minutes, detectors and totals keep their keys.
"""

from __future__ import annotations

from typing import Any

import orjson

#: a pack's value stays under this many bytes when it can (a producer's default max_request_size
#: is 1 MiB); a larger one is split in two
PACK_BYTES = 512 * 1024
#: the entries a pack takes at most
PACK_ENTRIES = 2_000
#: the share of PACK_BYTES a pack is cut to, from the size of the entries of its kind so far: an
#: entry's size varies (its list, its grades), and a pack over PACK_BYTES is encoded again in halves
PACK_FILL = 0.8
PREFIX = b"p:"

Entry = tuple[bytes, bytes | None]
StateKey = tuple[Any, ...]


class Packs:
    """Which pack holds the newest entry of each query and dedup key, and how many entries of
    each pack are still the newest; the number of the next pack."""

    __slots__ = ("where", "live", "next", "legacy", "sizes")

    def __init__(self, first: int = 0) -> None:
        self.where: dict[StateKey, int] = {}
        self.live: dict[int, int] = {}
        self.next = first
        #: records of an older layout (a key per query or dedup key): deleted by the next
        #: checkpoint, which writes every key they held into packs
        self.legacy: list[bytes] = []
        #: bytes per entry of each kind in the last pack of it: how many entries the next takes
        self.sizes: dict[str, float] = {}

    def held(self, key: StateKey, pack: int) -> None:
        """``key``'s newest entry is in ``pack`` (a restore, reading the packs in order)."""
        old = self.where.get(key)
        if old is not None:
            self.live[old] -= 1
        self.where[key] = pack
        self.live[pack] = self.live.get(pack, 0) + 1

    def empty(self) -> list[int]:
        """The packs none of whose entries is the newest any more (after a restore)."""
        return [n for n, count in self.live.items() if count == 0]

    def write(
        self, changed: list[StateKey], entry: Any, version: int, empty: list[int] | None = None
    ) -> list[Entry]:
        """The changelog records of a checkpoint's changed queries and dedup keys: new packs of
        the keys still held (``entry(key)``: its kind, ``"q"``, ``"t"`` or ``"s"``, and its
        JSON-ready entry, or None when the key is no longer held), nulls for the packs left with
        nothing newest and for the records of an older layout. A pack holds entries of one kind."""
        out: list[Entry] = [(name, None) for name in self.legacy]
        self.legacy = []
        dropped = list(empty or ())
        where, live = self.where, self.live
        keys: dict[str, list[StateKey]] = {"q": [], "t": [], "s": []}
        values: dict[str, list[Any]] = {"q": [], "t": [], "s": []}
        for key in changed:
            old = where.pop(key, None)
            if old is not None:
                count = live[old] - 1
                if count:
                    live[old] = count
                else:
                    del live[old]
                    dropped.append(old)
            held = entry(key)
            if held is not None:
                keys[held[0]].append(key)
                values[held[0]].append(held[1])
        for kind, table in values.items():
            start = 0
            while start < len(table):
                end = start + self._room(kind)
                out += self._packs(kind, keys[kind][start:end], table[start:end], version)
                start = end
        for n in dict.fromkeys(dropped):
            live.pop(n, None)
            out.append((PREFIX + str(n).encode(), None))
        return out

    def _room(self, kind: str) -> int:
        """The entries the next pack of this kind takes: PACK_ENTRIES, or as many as fill
        PACK_FILL of PACK_BYTES at the size of the last pack's entries. A pack that turns out too
        large costs an encoding of it and one of each half (measured: query entries of 20-item
        lists, ~320 bytes, filled 2,000-entry packs past PACK_BYTES, so each was encoded twice)."""
        size = self.sizes.get(kind)
        if size is None:
            return PACK_ENTRIES
        return max(1, min(PACK_ENTRIES, int(PACK_BYTES * PACK_FILL / size)))

    def _packs(self, kind: str, keys: list[StateKey], values: list[Any], version: int) -> list[Entry]:
        raw = orjson.dumps({"v": version, kind: values})
        self.sizes[kind] = len(raw) / len(values)
        if len(raw) > PACK_BYTES and len(values) > 1:
            half = len(values) // 2
            return self._packs(kind, keys[:half], values[:half], version) + self._packs(
                kind, keys[half:], values[half:], version
            )
        n = self.next
        self.next += 1
        self.live[n] = len(keys)
        where = self.where
        for key in keys:
            where[key] = n
        return [(PREFIX + str(n).encode(), raw)]


def number(key: bytes) -> int | None:
    """The number of pack record ``key``, None when it is not a pack's."""
    if not key.startswith(PREFIX):
        return None
    return int(key[len(PREFIX) :])
