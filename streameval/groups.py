"""The label controls of one instance: which group labels a query's values are counted under.

``labels_allow`` (globs per label), ``labels_max_values`` (a cap per label) and ``max_groups``
(a cap on groups) fold values into ``__other__`` (README, Your logs: Labels under control).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from streameval.config import Settings

OTHER_GROUP = "__other__"


class GroupCap:
    """The label controls of one instance, shared by its pipelines (the daemon's partitions).

    Per label: a value that matches none of its ``labels_allow`` globs, or that comes after the
    label's first ``labels_max_values`` values, is ``__other__``. Then the first ``max_groups``
    groups keep their labels; later ones fold into ``__other__`` whole. The globs give every
    instance the same series; the two caps are first come, first kept, per instance.
    """

    def __init__(
        self,
        max_groups: int,
        n_labels: int,
        allow: Sequence[tuple[str, ...] | None] = (),
        max_values: Sequence[int | None] = (),
    ) -> None:
        self.max_groups = max_groups
        #: each admitted group's labels, to itself: every query of a group holds the one tuple
        self.known: dict[tuple[str, ...], tuple[str, ...]] = {}
        self.other = (OTHER_GROUP,) * n_labels
        self.allow = list(allow) or [None] * n_labels
        self.max_values = list(max_values) or [None] * n_labels
        self.controlled = any(a is not None for a in [*self.allow, *self.max_values])
        #: per label, the values kept (for labels_max_values)
        self.values: list[set[str]] = [set() for _ in range(n_labels)]
        #: raw labels -> the labels they fold to, for labels that fold (bounded: cleared when full)
        self._folded: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._matches: list[dict[str, bool]] = [{} for _ in range(n_labels)]

    @classmethod
    def of(cls, settings: Settings) -> GroupCap:
        return cls(
            settings.max_groups,
            len(settings.group_by),
            [settings.labels_allow.get(name) for name in settings.group_by],
            [settings.labels_max_values.get(name) for name in settings.group_by],
        )

    def admit(self, labels: tuple[str, ...]) -> tuple[str, ...]:
        """Count ``labels`` as admitted (a restored group the previous owner admitted)."""
        for i, value in enumerate(labels):
            if value != OTHER_GROUP and self.max_values[i] is not None:
                self.values[i].add(value)
        return self.known.setdefault(labels, labels)

    def map(self, labels: tuple[str, ...]) -> tuple[str, ...] | None:
        """The labels to use, or None when they are folded into ``other``."""
        known = self.known.get(labels)
        if known is not None:
            return known
        if self.controlled:
            labels = self.fold_labels(labels)
            known = self.known.get(labels)
            if known is not None:
                return known
        if len(self.known) < self.max_groups:
            self.known[labels] = labels
            return labels
        return None

    def fold_labels(self, labels: tuple[str, ...]) -> tuple[str, ...]:
        """``labels`` with each value that its label's controls fold replaced by ``__other__``."""
        folded = self._folded.get(labels)
        if folded is not None:
            return folded
        out = list(self.fold_labels_stateless(labels))
        for i, value in enumerate(out):
            cap = self.max_values[i]
            if cap is not None and value != OTHER_GROUP and value not in self.values[i]:
                if len(self.values[i]) < cap:
                    self.values[i].add(value)
                else:
                    out[i] = OTHER_GROUP
        folded = tuple(out)
        if len(self._folded) >= FOLD_CACHE_SIZE:
            self._folded.clear()
        self._folded[labels] = folded
        return folded

    def _allowed(self, i: int, value: str, patterns: tuple[str, ...]) -> bool:
        cache = self._matches[i]
        allowed = cache.get(value)
        if allowed is None:
            if len(cache) >= FOLD_CACHE_SIZE:
                cache.clear()
            allowed = cache[value] = any(fnmatchcase(value, p) for p in patterns)
        return allowed

    def would_fold(self, groups: Iterable[tuple[str, ...]]) -> bool:
        """Whether admitting these groups (in any order) might fold some by a cap, whose result
        then depends on the order (``replay``'s shards check this)."""
        distinct = set(groups)
        if self.controlled:
            distinct = {self.fold_labels_stateless(g) for g in distinct}
            for i, cap in enumerate(self.max_values):
                if cap is not None and len({g[i] for g in distinct} - {OTHER_GROUP}) > cap:
                    return True
        return len(distinct) > self.max_groups

    def fold_labels_stateless(self, labels: tuple[str, ...]) -> tuple[str, ...]:
        """``labels`` folded by the globs alone (which do not depend on what came before)."""
        return tuple(
            OTHER_GROUP if p is not None and not self._allowed(i, v, p) else v
            for i, (v, p) in enumerate(zip(labels, self.allow, strict=True))
        )


#: entries of GroupCap's caches of folded labels before they are cleared (exploding labels)
FOLD_CACHE_SIZE = 10_000
