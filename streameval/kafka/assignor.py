"""The group's partition assignor: whole partition numbers, sticky, cooperative.

A query's impression and events meet in one partition number of every input topic, and its
state lives in that partition of the changelog: partition p of every input topic must go to one
member. kafka-python's cooperative-sticky assignor places topic-partitions one by one (p of the
impressions could go to one member and p of the clicks to another), and its range assignor is
eager: every rebalance takes every partition from every member, which here means reading all
their state back from the changelog. This assignor moves partition numbers (all topics at once),
keeps each member's numbers where it can, and uses the incremental protocol (KIP-429): a member
keeps processing what it keeps; a number that moves is first given up by its owner (which
checkpoints it) and assigned to its new owner in the follow-up rebalance that the giving-up
starts, so no number ever has two owners.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from kafka import TopicPartition
from kafka.coordinator.assignors.abstract import AbstractPartitionAssignor, RebalanceProtocol
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

NAME = "streameval-cooperative"
_VERSION = 1  # the subscription version that carries the member's owned partitions (KIP-429)


def plan(
    partitions: int, members: list[str], owned: dict[str, set[int]]
) -> tuple[dict[str, set[int]], dict[str, set[int]]]:
    """Where every partition number goes: (final owner's numbers, numbers assigned this round).

    ``members`` in a stable order (the tie-break); ``owned``: the numbers each member holds now.
    Balanced (counts differ by at most one), each member keeps as many of its own numbers as its
    share allows, and a number claimed by two members is taken from both. This round's
    assignment leaves out every number still held by another member: that member gives it up
    first, and the follow-up rebalance assigns it.
    """
    claims: dict[int, list[str]] = defaultdict(list)
    for member in members:
        for p in owned.get(member, ()):
            if 0 <= p < partitions:
                claims[p].append(member)
    holder = {p: ms[0] for p, ms in claims.items() if len(ms) == 1}
    kept = {m: sorted(p for p, h in holder.items() if h == m) for m in members}
    # the members holding most get the larger shares, so fewer numbers move
    by_holding = sorted(members, key=lambda m: (-len(kept[m]), members.index(m)))
    base, extra = divmod(partitions, len(members)) if members else (0, 0)
    share = {m: base + (1 if i < extra else 0) for i, m in enumerate(by_holding)}
    final = {m: set(kept[m][: share[m]]) for m in members}
    taken = set().union(*final.values()) if final else set()
    free = iter(p for p in range(partitions) if p not in taken)
    for m in sorted(members, key=lambda m: (len(final[m]), members.index(m))):
        while len(final[m]) < share[m]:
            final[m].add(next(free))
    # assigned now: what nobody else claims (a member claims each number at most once)
    now = {m: {p for p in numbers if claims.get(p, [m]) == [m]} for m, numbers in final.items()}
    return final, now


def stage_owner(members: list[str], owned: dict[str, set[tuple[str, int]]]) -> str | None:
    """The member that runs the repartition stage: the first (in member order) that holds any
    of its partitions, else the first member."""
    holders = [m for m in members if owned.get(m)]
    return holders[0] if holders else (members[0] if members else None)


class CooperativeCopartitioned(AbstractPartitionAssignor):
    """kafka-python's assignor interface around :func:`plan`. ``owned`` reports the member's
    current assignment (set once the consumer exists); it is sent with every JoinGroup.

    The partitions of the ``together`` topics (those the repartition stage reads) all go to one
    member (:func:`stage_owner`, sticky): each repartition partition then has one writer, which
    writes in event-time order, and a member that takes the stage over resumes from its
    committed offsets, so the order holds across failover."""

    name = NAME
    version = _VERSION

    def __init__(self, together: Iterable[str] = ()) -> None:
        self.owned: Callable[[], Iterable[TopicPartition]] = lambda: ()
        self.together = frozenset(together)

    def supported_protocols(self) -> list[RebalanceProtocol]:
        return [RebalanceProtocol.COOPERATIVE]

    def metadata(self, topics: Iterable[str]) -> Any:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in self.owned():
            by_topic[tp.topic].append(tp.partition)
        return ConsumerProtocolSubscription(
            version=self.version,
            topics=sorted(topics),
            user_data=b"",
            owned_partitions=[
                ConsumerProtocolSubscription.TopicPartition(topic=t, partitions=sorted(ps))
                for t, ps in sorted(by_topic.items())
            ],
        )

    def assign(self, cluster: Any, members: list[Any]) -> dict[str, Any]:
        # static members first, then by id: the same order on every leader
        ordered = sorted(
            members, key=lambda m: (m.group_instance_id is None, m.group_instance_id or "", m.member_id)
        )
        subscriptions: dict[tuple[str, ...], list[Any]] = defaultdict(list)
        for m in ordered:
            subscriptions[tuple(sorted(m.metadata.topics))].append(m)
        assignment = {}
        taken: set[str] = set()
        # every streameval instance of a group subscribes to the same topics; should members
        # differ, each set of members sharing a subscription divides its topics among itself
        # (the largest set first; a topic already divided is not divided again)
        for topics, group in sorted(subscriptions.items(), key=lambda kv: -len(kv[1])):
            present = {t: set(cluster.partitions_for_topic(t) or ()) for t in topics if t not in taken}
            taken.update(present)
            owned = {
                m.member_id: {
                    p
                    for tp in (getattr(m.metadata, "owned_partitions", None) or ())
                    if tp.topic in present and tp.topic not in self.together
                    for p in tp.partitions
                }
                for m in group
            }
            joined = {t: ps for t, ps in present.items() if t not in self.together}
            staged = {t: ps for t, ps in present.items() if t in self.together}
            # topics with different partition counts cannot be co-partitioned; the consumer loop
            # stops with a message saying so when it sees its assignment
            count = max((len(ps) for ps in joined.values()), default=0)
            _, now = plan(count, [m.member_id for m in group], owned)
            stage = self._stage(group, staged)
            for m in group:
                by_topic = [(t, sorted(now[m.member_id] & ps)) for t, ps in sorted(joined.items())]
                by_topic += [(t, sorted(stage.get((m.member_id, t), ()))) for t in sorted(staged)]
                assignment[m.member_id] = ConsumerProtocolAssignment(
                    self.version, [(t, ps) for t, ps in by_topic if ps], b""
                )
        return assignment

    def _stage(self, group: list[Any], staged: dict[str, set[int]]) -> dict[tuple[str, str], set[int]]:
        """(member, topic) -> the stage's partitions assigned this round: all to its owner, but
        those another member still holds (it gives them up first; the follow-up rebalance
        assigns them)."""
        held = {
            m.member_id: {
                (tp.topic, p)
                for tp in (getattr(m.metadata, "owned_partitions", None) or ())
                if tp.topic in staged
                for p in tp.partitions
            }
            for m in group
        }
        owner = stage_owner([m.member_id for m in group], held)
        if owner is None:
            return {}
        elsewhere = set().union(*(h for m, h in held.items() if m != owner)) if held else set()
        return {(owner, t): {p for p in ps if (t, p) not in elsewhere} for t, ps in staged.items()}

    def on_assignment(self, assignment: Any, generation: int) -> None:
        pass
