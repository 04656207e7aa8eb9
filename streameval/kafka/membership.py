"""The group's side of the loop: the member's state, and what a rebalance leaves to do."""

from __future__ import annotations

import enum
from typing import Any

from kafka import ConsumerRebalanceListener

from streameval.errors import InputError
from streameval.kafka.assignor import NAME


class Membership(enum.Enum):
    JOINING = "joining"  # subscribed; no assignment taken yet
    MEMBER = "member"  # an assignment taken (perhaps an empty one)
    CLOSING = "closing"  # the final checkpoint is being, or has been, taken


class Rebalanced(enum.IntEnum):
    """What a rebalance left for the loop to do after the poll; a later one never lowers it."""

    NOTHING = 0
    REASSIGNED = 1  # partitions given up or added: follow the assignment
    LOST = 2  # the membership expired: nothing can be committed, rewind everything


class Rebalance(ConsumerRebalanceListener):
    """Tells the loop (a :class:`~streameval.kafka.loop.ConsumerLoop`) what a rebalance did.
    Called inside ``poll()`` (and ``close()``), on the client's I/O thread while the main thread
    waits for that call, so the state is never changed under it."""

    def __init__(self, loop: Any) -> None:
        self.loop = loop

    def on_partitions_revoked(self, revoked: Any) -> None:
        # Cooperative (KIP-429): this runs before the member rejoins for the follow-up rebalance
        # that hands these partitions to their next owner -- the one moment a checkpoint of them
        # is sure to commit (or be fenced) before that owner reads the committed offsets.
        self.loop.give_up(set(revoked))

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.loop.note(Rebalanced.REASSIGNED)
        # eager: the whole assignment of a new generation; what it hands back may be kept
        numbers = {tp.partition for tp in assigned if tp.topic in self.loop.topics}
        self.loop.kept.assigned(numbers, self.loop.consumer.eager_generation())

    def on_partitions_lost(self, lost: Any) -> None:
        self.loop.note(Rebalanced.LOST)


def mixed_group(group_id: str) -> InputError:
    """The error that stops the daemon when members of its group assign partitions another way."""
    return InputError(
        f"consumer group {group_id} has members that assign partitions another "
        f"way (the {NAME} assignor is not among theirs): an older streameval, or another "
        "application using this group_id. Stop them, then start this version; no rolling "
        "upgrade across this change (README, Guarantees)"
    )
