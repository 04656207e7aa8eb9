"""The floor of figure 2: a bare kafka-python consumer reading and decoding the daemon's topics.

It is made by the daemon's own consumer factory (the same settings: group membership, range
assignment, ``max_poll_records``, ``read_committed``, ...), in a group of its own, and does
nothing with a record but ``orjson.loads`` its value (and, after each poll, the daemon's
workaround of a kafka-python rebalance that never ends). Exits once it has read ``--expect``
records. Run as its own process, like the daemon, so both include an interpreter's start.

With ``--client confluent-kafka`` it is a bare confluent-kafka (librdkafka) consumer instead,
with the same settings where librdkafka has them (``read_committed``, earliest, no auto
commit) and batches of 500 (``consume``), for row 2c.

    python benchmarks/bare_consumer.py --bootstrap-servers HOST:PORT --group G \\
        --topic IMPRESSIONS --topic EVENTS --expect N [--client confluent-kafka]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streameval.config import load_settings  # noqa: E402
from streameval.kafka.clients import make_consumer  # noqa: E402
from streameval.kafka.compat import keep_join_awaited  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", action="append", required=True)
    parser.add_argument("--expect", type=int, required=True)
    parser.add_argument("--client", choices=("kafka-python", "confluent-kafka"), default="kafka-python")
    args = parser.parse_args()
    if args.client == "confluent-kafka":
        print(confluent(args))
        return
    settings = load_settings(None, {}, {"bootstrap_servers": args.bootstrap_servers, "group_id": args.group})
    consumer = make_consumer(settings)
    consumer.subscribe(args.topic)
    seen = 0
    while seen < args.expect:
        for messages in consumer.poll(timeout_ms=200).values():
            for message in messages:
                try:
                    orjson.loads(message.value)
                except orjson.JSONDecodeError:
                    pass
            seen += len(messages)
        # kafka-python 3.0.12 can drop a join that finished between two polls and rejoin for
        # ever (README, Guarantees): the daemon's workaround, so the floor cannot hang either
        keep_join_awaited(consumer)
    consumer.close()
    print(seen)


def confluent(args: argparse.Namespace) -> int:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap_servers,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe(args.topic)
    seen = 0
    while seen < args.expect:
        messages = consumer.consume(num_messages=500, timeout=0.2)
        for message in messages:
            if message.error() is not None:
                continue
            try:
                orjson.loads(message.value())
            except orjson.JSONDecodeError:
                pass
            seen += 1
    consumer.close()
    return seen


if __name__ == "__main__":
    main()
