"""The dead-letter copy of a rejected record: its key and value unchanged when they fit, with
headers saying why and where it came from. No I/O.

A record that fits its input topic may not fit the dead-letter topic (a lower
``max.message.bytes``, or the producer's ``max_request_size`` once headers are added), and a
record may have neither key nor value (legal for the Java client, refused by kafka-python).
Neither may stop the daemon, so the copy is always sendable:

- the headers are ``reason``, ``detail`` (cut to 500 bytes), ``topic``, ``partition``, ``offset``;
- a value (then the detail, then the key) that would not fit is cut so the record fits, and the header
  ``truncated`` gives the original sizes and the limit, e.g. ``key 3 value 1048450 bytes, cut to
  fit 1048576``;
- a record with no key and no value is sent with an empty value and the header ``null_value``.
"""

from __future__ import annotations

#: Room for the record batch and record framing around key, value and headers.
FRAMING_BYTES = 128
#: Per header: the varint lengths around its name and value.
HEADER_FRAMING_BYTES = 10
DETAIL_MAX_BYTES = 500
Headers = list[tuple[str, bytes]]


def record_size(key: bytes | None, value: bytes | None, headers: Headers) -> int:
    """Bytes the record takes in a batch, framing included, with room to spare: a batch of
    records holds at most the sum of theirs."""
    return (
        FRAMING_BYTES
        + len(key or b"")
        + len(value or b"")
        + sum(len(name) + len(data) + HEADER_FRAMING_BYTES for name, data in headers)
    )


def dead_letter_record(
    key: bytes | None,
    value: bytes | None,
    reason: str,
    detail: str,
    topic: str,
    partition: int,
    offset: int,
    limit: int,
) -> tuple[bytes | None, bytes | None, Headers]:
    """(key, value, headers) of the dead-letter copy, at most ``limit`` bytes as Kafka counts
    them (with some room to spare)."""
    headers: Headers = [
        ("reason", reason.encode()),
        ("detail", detail.encode("utf-8", "replace")[:DETAIL_MAX_BYTES]),
        ("topic", topic.encode()),
        ("partition", str(partition).encode()),
        ("offset", str(offset).encode()),
    ]
    if key is None and value is None:
        headers.append(("null_value", b"true"))
        value = b""
    excess = record_size(key, value, headers) - limit
    if excess > 0:
        note = f"key {len(key or b'')} value {len(value or b'')} bytes, cut to fit {limit}".encode()
        headers.append(("truncated", note))
        excess += len("truncated") + len(note) + HEADER_FRAMING_BYTES
        if value:
            cut = min(len(value), excess)
            value = value[: len(value) - cut]
            excess -= cut
        if excess > 0:  # then the detail (headers[1]), then the key
            text = headers[1][1]
            cut = min(len(text), excess)
            headers[1] = ("detail", text[: len(text) - cut])
            excess -= cut
        if excess > 0 and key:
            key = key[: max(0, len(key) - excess)]
    return key, value, headers
