"""What the Quix job (``bench.quix_job``) must emit, by brute force: the check that the peer
computes what the comparison assumes.

Quix Streams 3.28 sliding windows (``SlidingWindow.process_window``), per key: a window is
``[end - duration, end]``, both bounds inclusive; the key's stream time ``L`` is the largest
event time seen for that key (FiBA's is per partition). A record at ``t`` after which ``L' =
max(L, t)``: dropped (nothing emitted) when ``t <= L' - grace - 1 - duration``; otherwise
``.current()`` emits, in ascending order of end, the *left* window ``[t' - duration, t']`` of
every distinct event time ``t'`` of the key with ``t <= t' <= t + duration`` (its own and every
later one it falls in) and ``t' > L' - grace - 1`` (not yet expired), each aggregated over all
the key's events seen so far inside it. So an in-order record emits one window (its own), as
the worker's ``emit=event`` with ``window_end=event_time`` does, but a late record emits one
more for each later event time within ``duration`` of it, where the worker emits one record
(the late event's own window) per event. Events with equal times share one window.

O(n^2) per key: for small inputs only.
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
