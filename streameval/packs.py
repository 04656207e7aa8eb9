"""Packs: the queries and dedup keys of a partition's state, many to a changelog record. No I/O.

Most of what a checkpoint writes is per query (an open query, or the tombstone of a settled
one) and per event (its dedup key). Written one record per key, a checkpoint sends about 1.3
changelog records per input record, and every record costs the producer and the encoder as much
as a whole list of them. So these two kinds go into *packs*: each checkpoint writes the query
entries that changed and the dedup keys remembered since the last one into records ``p:<n>``
(``n`` counts up per partition, from the totals), a few thousand entries each, one kind to a
pack, and deletes a pack (a null value) once nothing in it is still held:

- a query pack once none of its entries is the newest value of a query still held: a newer
  pack wrote the query again (an event changed it; it settled), or it was forgotten (its
  tombstone's time passed);
- a dedup-key pack once the watermark passed the latest time in it. A dedup key is written
  once, when it is first remembered, and its time does not change: what a forgotten key leaves
  is an entry the restore drops, so a pack needs no account of its keys one by one (a key
  remembered again after it was forgotten has a newer entry, in a later pack).

A forgotten key writes nothing. Its entry may stay in a pack that is still live for other
entries, so a restore drops what the watermark has passed, exactly as the join would have: a
dedup key whose time is below the watermark, a tombstone past its retention, and an open query
past its settling time, which is then a tombstone, or nothing when that too is past (the join
settles every query the watermark passes, so no checkpoint holds such a query open; an entry
that says so was written before it settled, by a pack the settling's own pack outlived).

The orphans (``o:<query_id>``), windows, minutes, detectors and totals keep their keys.
"""

from __future__ import annotations

import math
from collections.abc import Callable
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
#: the query entries of the changed keys: the keys still held of each kind and their entries
Entries = Callable[[list[StateKey]], tuple[dict[str, list[StateKey]], dict[str, list[Any]]]]


def by_kind(
    changed: list[StateKey], entry: Callable[[StateKey], tuple[str, Any] | None]
) -> tuple[dict[str, list[StateKey]], dict[str, list[Any]]]:
    """:data:`Entries` from ``entry(key)``: a key's kind, ``"q"`` or ``"t"``, and its JSON-ready
    entry, or None when its query is no longer held."""
    keys: dict[str, list[StateKey]] = {"q": [], "t": []}
    values: dict[str, list[Any]] = {"q": [], "t": []}
    for key in changed:
        held = entry(key)
        if held is not None:
            keys[held[0]].append(key)
            values[held[0]].append(held[1])
    return keys, values


class Packs:
    """Which pack holds the newest entry of each query, and how many entries of each query pack
    are still the newest; the latest time in each dedup-key pack; the number of the next pack."""

    __slots__ = ("where", "live", "until", "next", "legacy", "sizes")

    def __init__(self, first: int = 0) -> None:
        self.where: dict[StateKey, int] = {}
        self.live: dict[int, int] = {}
        #: dedup-key pack -> the latest time of its keys still remembered
        self.until: dict[int, float] = {}
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

    def remembered(self, pack: int, until: float) -> None:
        """``pack`` holds a dedup key remembered until ``until`` (a restore)."""
        if until > self.until.get(pack, -math.inf):
            self.until[pack] = until

    def empty(self) -> list[int]:
        """The packs none of whose entries is the newest any more (after a restore)."""
        return [n for n, count in self.live.items() if count == 0]

    def write(
        self,
        changed: list[StateKey],
        entries: Entries,
        version: int,
        empty: list[int] | None = None,
        seen: list[Any] | None = None,
        watermark: float = -math.inf,
    ) -> list[Entry]:
        """The changelog records of a checkpoint: new packs of the changed queries still held
        (``entries(changed)``: the keys still held of each kind, ``"q"`` or ``"t"``, and their
        entries, JSON-ready or each its JSON text; see :func:`by_kind`) and of the dedup keys
        remembered since the last checkpoint (``seen``: their ``[key, until]`` entries); nulls
        for the packs left with nothing newest, the dedup-key packs the watermark has passed and
        the records of an older layout. A pack holds entries of one kind."""
        out: list[Entry] = [(name, None) for name in self.legacy]
        self.legacy = []
        dropped = list(empty or ())
        where, live, until = self.where, self.live, self.until
        passed = [n for n, latest in until.items() if latest < watermark]
        for n in passed:
            del until[n]
        dropped += passed
        for key in changed:
            old = where.pop(key, None)
            if old is not None:
                count = live[old] - 1
                if count:
                    live[old] = count
                else:
                    del live[old]
                    dropped.append(old)
        keys, values = entries(changed) if changed else ({}, {})
        values["s"] = seen or []
        for kind, table in values.items():
            start = 0
            while start < len(table):
                end = start + self._room(kind)
                out += self._packs(kind, keys.get(kind), table[start:end], start, version)
                start = end
        for n in dict.fromkeys(dropped):
            if live.get(n):
                continue  # a pack of both kinds (none is written so): its queries still held
            live.pop(n, None)
            if n not in until:  # else its dedup keys are
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

    def _packs(
        self, kind: str, keys: list[StateKey] | None, values: list[Any], start: int, version: int
    ) -> list[Entry]:
        """One pack of ``values`` (``keys[start:]`` their queries; None for dedup keys), or
        more when it is too large."""
        if type(values[0]) is bytes:  # the entries' JSON texts (the native core's)
            raw = b'{"v":%d,"%s":[%s]}' % (version, kind.encode(), b",".join(values))
        else:
            raw = orjson.dumps({"v": version, kind: values})
        self.sizes[kind] = len(raw) / len(values)
        if len(raw) > PACK_BYTES and len(values) > 1:
            half = len(values) // 2
            return self._packs(kind, keys, values[:half], start, version) + self._packs(
                kind, keys, values[half:], start + half, version
            )
        n = self.next
        self.next += 1
        if keys is None:
            self.until[n] = max(value[1] for value in values)
        else:
            self.live[n] = len(values)
            where = self.where
            for key in keys[start : start + len(values)]:
                where[key] = n
        return [(PREFIX + str(n).encode(), raw)]


def number(key: bytes) -> int | None:
    """The number of pack record ``key``, None when it is not a pack's."""
    if not key.startswith(PREFIX):
        return None
    return int(key[len(PREFIX) :])
