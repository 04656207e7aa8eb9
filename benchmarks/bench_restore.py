"""Restoring a partition's state: 100k open queries (20-item lists) from a changelog topic.

Builds the state with the real pipeline, writes its changelog entries into a fresh compacted
topic in one transaction (as checkpoints do), then measures (1) the floor: a bare
read_committed consumer reading every entry, (2) the daemon's Restorer reading and decoding them
to the end, and (3) turning them into a pipeline (``state.restore``); with the garbage collector
set as the daemon sets it (``streameval/collector.py``). Also reports the changelog
bytes per open query. Needs a broker (deploy/kafka/local.sh start).
"""

from __future__ import annotations

import argparse
import random
import time
import uuid

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from streameval import state
from streameval.collector import FullCollections
from streameval.config import load_settings
from streameval.kafka.changelog import Restorer
from streameval.kafka.topics import CHANGELOG_CONFIGS
from streameval.pipeline import Pipeline
from streameval.records import Engagement, Impression


def build(settings, n: int) -> Pipeline:
    rng = random.Random(7)
    pipeline = Pipeline(settings)
    t0 = 1_767_225_600.0
    for q in range(n):
        items = tuple(f"item{rng.randrange(5000)}" for _ in range(20))
        pipeline.process(Impression(f"q{q}", t0 + q * 0.001, items, (f"m{q % 3}", "home")))
        pipeline.process(Engagement(f"q{q}", items[rng.randrange(20)], "click", t0 + q * 0.001, None))
    return pipeline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queries", type=int, default=100_000)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    args = parser.parse_args()
    # for the whole process: the daemon's full collections; its young generations after each round
    # of its loop are not modelled (no rounds here), they run every 700 allocations
    FullCollections()
    group = f"benchrestore{uuid.uuid4().hex[:8]}"
    settings = load_settings(None, {}, {"bootstrap_servers": args.bootstrap, "group_id": group})
    topic = settings.changelog_topic

    started = time.perf_counter()
    pipeline = build(settings, args.queries)
    entries = state.all_entries(pipeline)
    size = sum(len(k) + len(v or b"") for k, v in entries)
    print(
        f"state: {len(pipeline.joiner.open):,} open queries, {len(entries):,} changelog entries, "
        f"{size / 1e6:.1f} MB ({size / max(1, len(pipeline.joiner.open)):.0f} B per open query); "
        f"built in {time.perf_counter() - started:.1f} s"
    )
    admin = KafkaAdminClient(bootstrap_servers=args.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs=CHANGELOG_CONFIGS)], wait_for_metadata=True)
    producer = KafkaProducer(
        bootstrap_servers=args.bootstrap, transactional_id=f"{group}-writer", linger_ms=20, batch_size=512_000
    )
    producer.init_transactions()
    producer.begin_transaction()
    for key, value in entries:
        producer.send(topic, key=key, value=value, partition=0)
    producer.commit_transaction()
    producer.close()

    tp = TopicPartition(topic, 0)
    start = time.perf_counter()
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=None,
        isolation_level="read_committed",
        max_partition_fetch_bytes=8 * 1024 * 1024,
    )
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    seen = 0
    while seen < len(entries):
        seen += sum(len(b) for b in consumer.poll(timeout_ms=500, max_records=20_000).values())
    floor = time.perf_counter() - start
    consumer.close()
    print(f"floor  bare read_committed consumer      {floor:6.2f} s  1.00x")

    start = time.perf_counter()
    restorer = Restorer(settings)
    restorer.start([0])
    done: dict = {}
    while not done:
        done = restorer.step(timeout_ms=200)
    read = time.perf_counter() - start
    values, records, _ = done[0]
    restorer.close()
    print(f"Restorer: read + decode {records:,} records   {read:6.2f} s  {read / floor:5.2f}x floor")

    start = time.perf_counter()
    restored = state.restore(settings, values)
    build_s = time.perf_counter() - start
    print(
        f"state.restore: {len(restored.joiner.open):,} open queries  {build_s:6.2f} s; "
        f"total restore {read + build_s:.2f} s for {args.queries:,} open queries"
    )
    admin.delete_topics([topic])
    admin.close()


if __name__ == "__main__":
    main()
