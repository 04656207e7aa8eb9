"""Row 2p of figure 2: the daemon's pipeline alone on the backlog, its records fed from memory.

Reads every record of the two topics into memory first (not timed), then, per partition, does
what the daemon's loop does with them but nothing of Kafka: decodes them in batches of a poll's
size (``Pipeline.decode_values``, the native core where installed), merges the two topics in
event-time order (the loop's ``Aligner``) and hands each record to ``Pipeline.handle`` (the join,
scoring, sums and windows, recording the changed state keys as the daemon does), with the
daemon's collector settings (the young generations collected after each poll's worth). No
start-up, no fetching, no checkpoints, no HTTP. Prints the seconds that took: the least a run of the
daemon can take on this backlog with this pipeline, whatever its Kafka client.

    python benchmarks/pipeline_alone.py --bootstrap-servers HOST:PORT \\
        --impressions-topic IMPRESSIONS --events-topic EVENTS --expect N
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from itertools import islice
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streameval.collector import FullCollections  # noqa: E402
from streameval.config import load_settings  # noqa: E402
from streameval.kafka.align import Aligner, Entry  # noqa: E402
from streameval.pipeline import Pipeline  # noqa: E402

#: records of one topic-partition decoded in one call, as the daemon's polls hand them over
BATCH = 2_000


def read_all(bootstrap: str, topics: list[str], expect: int) -> dict[TopicPartition, list[tuple[int, bytes]]]:
    """(offset, value) of every record of ``topics``, per partition, in offset order."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed"
    )
    try:
        partitions = [TopicPartition(t, p) for t in topics for p in sorted(consumer.partitions_for_topic(t))]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        records: dict[TopicPartition, list[tuple[int, bytes]]] = defaultdict(list)
        seen, deadline = 0, time.monotonic() + 300
        while seen < expect:
            if time.monotonic() > deadline:
                raise SystemExit(f"read {seen:,} of {expect:,} records in 300 s")
            for tp, messages in consumer.poll(timeout_ms=500).items():
                records[tp].extend((m.offset, m.value) for m in messages)
                seen += len(messages)
        return records
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--impressions-topic", required=True)
    parser.add_argument("--events-topic", required=True)
    parser.add_argument("--expect", type=int, required=True)
    args = parser.parse_args()
    topics = [args.impressions_topic, args.events_topic]
    records = read_all(args.bootstrap_servers, topics, args.expect)
    settings = load_settings(
        None,
        {},
        {
            "bootstrap_servers": args.bootstrap_servers,
            "impressions_topic": args.impressions_topic,
            "events_topics": [args.events_topic],
        },
    )
    collections = FullCollections(young_after_rounds=True)  # the daemon's collector settings
    elapsed = 0.0
    for partition in sorted({tp.partition for tp in records}):
        started = time.perf_counter()
        pipeline = Pipeline(settings)
        pipeline.record_changes()  # as the daemon's pipelines, once restored
        aligner = Aligner(topics, time.time)
        for topic in topics:
            held = records.get(TopicPartition(topic, partition), [])
            for at in range(0, len(held), BATCH):
                batch = held[at : at + BATCH]
                decoded = pipeline.decode_values(topic, [value for _, value in batch])
                aligner.extend(
                    topic, [Entry(topic, o, r, None) for (o, _), r in zip(batch, decoded, strict=True)]
                )
        handle, entries = pipeline.handle, aligner.take(lambda topic: True)
        while chunk := list(islice(entries, BATCH)):  # a round's worth, then the loop's collection
            for entry in chunk:
                handle(entry.topic, entry.record)
            collections.tick()
        elapsed += time.perf_counter() - started
    collections.end()
    print(f"{elapsed:.4f}")


if __name__ == "__main__":
    main()
