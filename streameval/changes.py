"""Which state keys changed since the last checkpoint: the one recorder a pipeline's join and
windows share. A pipeline that is never checkpointed (``replay``, ``demo``, tests) has one that
records nothing, so the code that changes state always reports it the same way."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

#: a state key: ("q", query_id), ("o", query_id), ("w", window, bucket) or ("m", minute)
StateKey = tuple[Any, ...]


class Changes:
    """Records changed keys, and the event dedup keys remembered since the last checkpoint with
    the time each is forgotten at (a dedup key changes once: a forgotten one needs no entry,
    its pack goes when the watermark passes the latest time in it, :mod:`streameval.packs`);
    :meth:`take` and :meth:`take_seen` hand them out for a checkpoint and start again."""

    __slots__ = ("keys", "add", "seen", "add_seen")

    def __init__(self) -> None:
        #: a dict for its order: a checkpoint reads the changed state in the order it first
        #: changed, about the order it was made in and so its order in memory (in a set's order,
        #: its hash's, the first checkpoint of a backlog took ~1.5x as long to encode its queries)
        self.keys: dict[StateKey, None] = {}
        self.add: Callable[[StateKey], object] = self.keys.setdefault
        self.seen: list[tuple[Any, float]] = []
        self.add_seen: Callable[[tuple[Any, float]], None] = self.seen.append

    def update(self, keys: Iterable[StateKey]) -> None:
        self.keys.update(dict.fromkeys(keys))

    def __len__(self) -> int:
        return len(self.keys) + len(self.seen)

    def take(self) -> list[StateKey]:
        out = list(self.keys)
        self.keys.clear()
        return out

    def take_seen(self) -> list[tuple[Any, float]]:
        out = self.seen[:]
        self.seen.clear()
        return out


def _ignore(_: Any) -> None:
    return None


class Unrecorded(Changes):
    """Records nothing."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__()
        self.add = _ignore
        self.add_seen = _ignore

    def update(self, keys: Iterable[StateKey]) -> None:
        return None
