"""State kept across an eager rebalance: taken back, not restored, when the partition comes back.

With an eager protocol (confluent-kafka on a broker without KIP-848: README, Guarantees) every
rebalance revokes every partition, and the member takes the checkpoint of what it gives up
before it rejoins. A partition that the next generation hands back to the same member was owned
by no one else in between, so the state the member held after that checkpoint is exactly what
the changelog would give back. It is taken back when all of these hold:

- the checkpoint taken when it was given up committed (a failed one rewinds, and this is
  forgotten);
- the assignment that hands it back is the next generation's, for the same member id (a member
  that missed a generation, or joined again with a new id, may have had it taken over
  meanwhile);
- the committed offsets of its inputs, read as for a restore, are still those that checkpoint
  committed (:meth:`~streameval.kafka.partitions.PartitionState.offsets_known`).

Otherwise the partition is restored from the changelog, as every other newly assigned one.
"""

from __future__ import annotations

from dataclasses import dataclass

from streameval.pipeline import Pipeline

#: a member of a group generation: its member id and the generation id
Generation = tuple[str, int]


@dataclass(frozen=True)
class Held:
    """A partition's state as it was given up: the pipeline and the offsets its checkpoint covers."""

    pipeline: Pipeline
    committed: dict[str, int]


class Kept:
    """The states given up in one generation, waiting for the next generation's assignment."""

    def __init__(self) -> None:
        self._held: dict[int, Held] = {}
        self._given_up_in: Generation | None = None
        #: handed back by the next generation: the loop takes these for its new partitions
        self._back: dict[int, Held] = {}

    def __len__(self) -> int:
        return len(self._held) + len(self._back)

    def hold(self, given_up: dict[int, Held], generation: Generation | None) -> None:
        """States given up, after their checkpoint committed, in ``generation`` (None: the
        client cannot say, or its protocol is not eager: nothing is kept)."""
        if generation is None:
            return
        if generation != self._given_up_in:
            self._held = {}
        self._given_up_in = generation
        self._held.update(given_up)

    def assigned(self, partitions: set[int], generation: Generation | None) -> None:
        """A generation's assignment: keep what it hands back if it is the next generation for
        the same member, forget the rest."""
        held, self._held = self._held, {}
        before, self._given_up_in = self._given_up_in, None
        follows = (
            generation is not None
            and before is not None
            and generation[0] == before[0]
            and generation[1] == before[1] + 1
        )
        self._back = {p: h for p, h in held.items() if p in partitions} if follows else {}

    def take(self, p: int) -> Held | None:
        """The state handed back for partition ``p``, once."""
        return self._back.pop(p, None)

    def clear(self) -> None:
        """Forget everything (a rewind: every partition starts again from its checkpoint)."""
        self._held, self._back, self._given_up_in = {}, {}, None
