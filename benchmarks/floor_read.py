"""The floor of figure 1: read JSONL files line by line and orjson-decode every line.

Run as its own process, like ``streameval replay``, so both include an interpreter's start.

    python benchmarks/floor_read.py FILE [FILE ...]
"""

from __future__ import annotations

import sys

import orjson


def main() -> None:
    n = 0
    for path in sys.argv[1:]:
        with open(path, "rb") as handle:
            for line in handle:
                try:
                    orjson.loads(line)
                except orjson.JSONDecodeError:
                    pass
                n += 1
    print(n)


if __name__ == "__main__":
    main()
