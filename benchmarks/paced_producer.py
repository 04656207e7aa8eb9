"""Figure 6's traffic: records from ``streameval simulate --out`` files, produced at a steady rate.

Reads the files, orders the records by event time, and sends them (keyed by query_id, so a
query's records share a partition) at exactly ``--rate`` records per second, in slices of 10 ms.
Each record's Kafka timestamp is its send time, which figure 6 measures freshness from.
Generating traffic in advance keeps the producer's CPU share small: on 2 cores it shares the
machine with the broker and the daemon under test.

    python benchmarks/paced_producer.py --bootstrap-servers HOST:PORT --impressions-topic T \\
        --events-topic T --rate 5000 --count 300000 DIR
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import orjson
from kafka import KafkaProducer

SLICE_S = 0.01


def load(directory: Path, count: int) -> list[tuple[bool, bytes, bytes]]:
    records: list[tuple[float, bool, bytes, bytes]] = []
    for path in sorted(directory.glob("*.jsonl")):
        is_impression = path.name == "impressions.jsonl"
        for line in path.open("rb"):
            try:
                obj = orjson.loads(line)
                ts, key = float(obj["ts"]), str(obj["query_id"]).encode()
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                continue  # the few bad records the simulator adds: not needed here
            records.append((ts, is_impression, key, line.rstrip(b"\n")))
    records.sort(key=lambda r: (r[0], not r[1]))
    return [(is_imp, key, value) for _, is_imp, key, value in records[:count]]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--impressions-topic", required=True)
    parser.add_argument("--events-topic", required=True)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("directory", type=Path)
    args = parser.parse_args()
    records = load(args.directory, args.count)
    producer = KafkaProducer(bootstrap_servers=args.bootstrap_servers, linger_ms=5)
    per_slice = args.rate * SLICE_S
    start = time.monotonic()
    sent = 0
    while sent < len(records):
        due = min(len(records), int((time.monotonic() - start) / SLICE_S * per_slice) + 1)
        for is_imp, key, value in records[sent:due]:
            producer.send(args.impressions_topic if is_imp else args.events_topic, key=key, value=value)
        sent = max(sent, due)
        time.sleep(max(0.0, start + sent / args.rate - time.monotonic()))
    producer.flush()
    producer.close()
    print(sent)


if __name__ == "__main__":
    main()
