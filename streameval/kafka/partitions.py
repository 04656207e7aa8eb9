"""What one instance owns for one partition number, and the phase it is in.

Partition p of the impressions topic and partition p of every events topic feed one pipeline
through one aligner; its state lives in partition p of the changelog. The phases, and the only
ways between them::

    AWAITING_OFFSETS --offsets_known--> RESTORING --restored--> ACTIVE
           \\--offsets_known, kept state taken back---------------->ACTIVE
           \\________________________________\\__________________\\--revoke--> GIVING_UP

- AWAITING_OFFSETS: assigned; its inputs are paused while their committed offsets are fetched
  (with ``read_committed`` the broker answers only once no transaction holding offsets for them
  is open).
- (AWAITING_OFFSETS straight to ACTIVE: the state it held when an eager rebalance took it,
  kept because that rebalance handed it back; see :mod:`streameval.kafka.kept`.)
- RESTORING: its state is read back from the changelog up to the end it has at that moment.
- ACTIVE: the inputs sought to the committed offsets -- exactly what the restored state covers
  -- and resumed; records flow and checkpoints commit it.
- GIVING_UP: revoked in a rebalance; its last checkpoint is being committed before its state is
  dropped (a failure leaves it here until the loop rewinds).

A rewind (lost partitions, a failed checkpoint) drops every partition's state; the assignment
then starts each at AWAITING_OFFSETS again. Either way a partition always resumes from a
committed checkpoint.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from streameval import state
from streameval.kafka.align import Aligner
from streameval.kafka.kept import Held
from streameval.pipeline import Pipeline


class Phase(enum.Enum):
    AWAITING_OFFSETS = "awaiting offsets"
    RESTORING = "restoring"
    ACTIVE = "active"
    GIVING_UP = "giving up"


@dataclass
class PartitionState:
    """Everything owned for one partition number. ``pipeline`` is set from ACTIVE on."""

    aligner: Aligner
    phase: Phase = Phase.AWAITING_OFFSETS
    pipeline: Pipeline | None = None
    next_offsets: dict[str, int] = field(default_factory=dict)  # topic -> first unprocessed
    #: topic -> first offset not fetched yet (the fetch position, tracked here: asking the client
    #: for it costs a scan and may call the group coordinator in the middle of a rebalance)
    fetched: dict[str, int] = field(default_factory=dict)
    committed: dict[str, int] = field(default_factory=dict)  # topic -> covered by the checkpoint
    #: the state given up in the eager rebalance that handed it back (README, Guarantees)
    kept: Held | None = None

    def _move(self, expected: tuple[Phase, ...], to: Phase) -> None:
        if self.phase not in expected:
            raise RuntimeError(f"a partition cannot go from {self.phase.value} to {to.value}")
        self.phase = to

    def offsets_known(self, committed: dict[str, int | None]) -> None:
        """The committed offsets of its inputs (None: none committed): restore next, or, if
        its kept state covers exactly these, take that back (ACTIVE at once)."""
        self._move((Phase.AWAITING_OFFSETS,), Phase.RESTORING)
        keeps, kept, self.kept = self.keeps(committed), self.kept, None
        for topic, offset in committed.items():
            if offset is not None:
                self.committed[topic] = self.next_offsets[topic] = offset
        if keeps and kept is not None:
            self.restored(kept.pipeline)

    def keeps(self, committed: dict[str, int | None]) -> bool:
        """Whether its kept state covers exactly these committed offsets (no restore needed)."""
        known = {topic: offset for topic, offset in committed.items() if offset is not None}
        return self.kept is not None and self.kept.committed == known

    def restored(self, pipeline: Pipeline) -> None:
        """Its state read back: records may flow."""
        self._move((Phase.RESTORING,), Phase.ACTIVE)
        self.pipeline = pipeline

    def revoke(self) -> None:
        """Given up in a rebalance: the last checkpoint of it follows, then it is dropped."""
        self._move((Phase.AWAITING_OFFSETS, Phase.RESTORING, Phase.ACTIVE, Phase.GIVING_UP), Phase.GIVING_UP)

    @property
    def active(self) -> bool:
        return self.phase is Phase.ACTIVE

    def changed(self) -> bool:
        """Anything for the next checkpoint: offsets moved, or state changed."""
        return bool(self.moved_offsets()) or (
            self.pipeline is not None and bool(state.pending(self.pipeline))
        )

    def moved_offsets(self) -> dict[str, int]:
        """The inputs' offsets processed past what the last checkpoint covers."""
        return {t: o for t, o in self.next_offsets.items() if self.committed.get(t) != o}
