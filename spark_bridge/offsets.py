"""Offset specifications and offset ranges of the data source, as in Spark's Kafka source.

A specification (``startingOffsets`` / ``endingOffsets``) is ``"earliest"``, ``"latest"``, or
JSON per partition: ``{"topic": {"0": 23, "1": -2}}`` where ``-2`` means earliest and ``-1``
latest. A partition the JSON does not name takes ``default`` (earliest for a start, latest for an
end). "Latest" is the Fetch high watermark (``spark_bridge.kafka``).

Resolved offsets are ``{partition: offset}``; the streaming offsets Spark checkpoints are
``{"<topic>": {"<partition>": offset}}`` (``to_checkpoint`` / ``from_checkpoint``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

EARLIEST = "earliest"
LATEST = "latest"
_SPECIAL = {-2: EARLIEST, -1: LATEST}


class OffsetSpecError(ValueError):
    """An offsets option that is neither earliest, latest nor valid per-partition JSON."""


def resolve_offsets(
    spec: str,
    topic: str,
    partitions: Sequence[int],
    earliest: Mapping[int, int],
    latest: Mapping[int, int],
    default: str,
) -> dict[int, int]:
    """``{partition: offset}`` of the ``spec`` for every partition in ``partitions``.

    Explicit offsets are clamped into ``[earliest, latest]`` of their partition.
    """
    text = spec.strip()
    if text in (EARLIEST, LATEST):
        chosen = {p: text for p in partitions}
    else:
        chosen = {p: default for p in partitions}
        for partition, offset in _per_partition(text, topic).items():
            if partition not in chosen:
                raise OffsetSpecError(f"{topic} has no partition {partition} (in {spec!r})")
            chosen[partition] = _SPECIAL.get(offset, offset)  # type: ignore[assignment]
    out = {}
    for p, choice in chosen.items():
        if choice == EARLIEST:
            out[p] = earliest[p]
        elif choice == LATEST:
            out[p] = latest[p]
        else:
            out[p] = min(max(int(choice), earliest[p]), latest[p])
    return out


def _per_partition(text: str, topic: str) -> dict[int, int]:
    try:
        obj = json.loads(text)
    except ValueError:
        raise OffsetSpecError(
            f"offsets must be earliest, latest or JSON like {{{topic!r}: {{'0': 5}}}}: {text!r}"
        ) from None
    if not isinstance(obj, dict) or set(obj) != {topic} or not isinstance(obj[topic], dict):
        raise OffsetSpecError(f'offsets JSON must be {{"{topic}": {{"<partition>": offset}}}}')
    out = {}
    for partition, offset in obj[topic].items():
        if type(offset) is not int or offset < -2:
            raise OffsetSpecError(f"offset of partition {partition} must be an int >= -2")
        out[int(partition)] = offset
    return out


def to_checkpoint(topic: str, offsets: Mapping[int, int]) -> dict[str, dict[str, int]]:
    """The JSON-able streaming offset of ``{partition: offset}``."""
    return {topic: {str(p): int(o) for p, o in sorted(offsets.items())}}


def from_checkpoint(topic: str, offset: Mapping[str, Mapping[str, int]]) -> dict[int, int]:
    """Inverse of ``to_checkpoint``."""
    return {int(p): int(o) for p, o in offset[topic].items()}


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark input partition: records ``start <= offset < end`` of one Kafka partition."""

    partition: int
    start: int
    end: int


def offset_ranges(
    start: Mapping[int, int], end: Mapping[int, int], max_records: int
) -> list[OffsetRange]:
    """The non-empty ranges from ``start`` to ``end`` of each partition, each at most
    ``max_records`` offsets long (a large partition is split), by partition then offset.

    A partition missing from ``start`` (new since the start was taken) starts at 0.
    """
    if max_records < 1:
        raise ValueError("max_records must be >= 1")
    ranges = []
    for partition in sorted(end):
        lo, hi = start.get(partition, 0), end[partition]
        for s in range(lo, hi, max_records):
            ranges.append(OffsetRange(partition, s, min(s + max_records, hi)))
    return ranges


def limit_offsets(
    start: Mapping[int, int], end: Mapping[int, int], max_rows: int
) -> dict[int, int]:
    """``end`` lowered so that at most ``max_rows`` offsets lie between ``start`` and it in
    total, shared among partitions in proportion to their backlog (as Spark's
    ``maxOffsetsPerTrigger``); what rounding leaves over goes one offset each to partitions
    whose share rounded to zero, so some partition always advances while any has a backlog."""
    backlog = {p: end[p] - start.get(p, 0) for p in end}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(end)
    shares = {p: size * max_rows // total for p, size in backlog.items()}
    spare = max_rows - sum(shares.values())
    for p in sorted(backlog):
        if spare == 0:
            break
        if backlog[p] and shares[p] == 0:
            shares[p] = 1
            spare -= 1
    return {p: start.get(p, 0) + shares[p] for p in end}
