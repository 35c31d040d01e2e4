"""What the Quix job (``bench.quix_job``) must emit, by brute force: the check that the peer
computes what the comparison assumes.

Quix Streams 3.28 sliding windows per key: a window is ``[end - duration, end]``, both bounds
inclusive, the key's stream time the largest event time of that key; a record is dropped when
it is older than the grace allows, else ``.current()`` emits, in ascending order of end, the
window of every distinct event time of the key it falls in. ``expected_outputs`` recomputes
that by brute force for the benchmark's check. The rules in full: docs/bench-methods.md.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from typing import Any


def expected_outputs(
    records: Iterable[tuple[bytes, bytes]],
    duration: int,
    grace: int,
    prefill: list[tuple[int, float]],
) -> dict[bytes, list[dict[str, Any]]]:
    """Per key, the windows the job emits for ``records`` (``(key, JSON value)`` in the order
    the job reads them, which per key is their order in the topic), every key's history
    starting with the ``prefill`` events: dicts of ``count``, ``sum``, ``max``, ``mean``,
    ``start``, ``end``."""
    history: dict[bytes, list[tuple[int, float]]] = defaultdict(lambda: list(prefill))
    latest: dict[bytes, int] = {}
    out: dict[bytes, list[dict[str, Any]]] = defaultdict(list)
    for key, raw in records:
        event = json.loads(raw)
        t, value = event["ts"], event["value"]
        seen = history[key]
        now = max(t, latest.get(key, max((s for s, _ in seen), default=t)))
        latest[key] = now
        if t <= now - grace - 1 - duration:
            continue
        seen.append((t, value))
        for end in sorted({s for s, _ in seen if t <= s <= t + duration and s > now - grace - 1}):
            inside = [v for s, v in seen if end - duration <= s <= end]
            out[key].append(
                {
                    "count": len(inside),
                    "sum": sum(inside),
                    "max": max(inside),
                    "mean": sum(inside) / len(inside),
                    "start": max(0, end - duration),
                    "end": end,
                }
            )
    return out
