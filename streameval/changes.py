"""Which state keys changed since the last checkpoint: the one recorder a pipeline's join and
windows share. A pipeline that is never checkpointed (``replay``, ``demo``, tests) has one that
records nothing, so the code that changes state always reports it the same way."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

#: a state key: ("q", query_id), ("o", query_id), ("s", dedup key) or ("w", window, bucket)
StateKey = tuple[Any, ...]


class Changes:
    """Records changed keys; :meth:`take` hands them out for a checkpoint and starts again."""

    __slots__ = ("keys", "add", "update")

    def __init__(self) -> None:
        self.keys: set[StateKey] = set()
        self.add: Callable[[StateKey], None] = self.keys.add
        self.update: Callable[[Iterable[StateKey]], None] = self.keys.update

    def __len__(self) -> int:
        return len(self.keys)

    def take(self) -> list[StateKey]:
        out = list(self.keys)
        self.keys.clear()
        return out


def _ignore(_: Any) -> None:
    return None


class Unrecorded(Changes):
    """Records nothing."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__()
        self.add = _ignore
        self.update = _ignore
