"""A bursty, out-of-order, time-stamped event stream.

In the spirit of §7.4 of *Out-of-Order Sliding-Window Aggregation with Efficient Bulk
Evictions and Insertions*: events per second of simulated time with a daily cycle, drift,
bursts and outages, each arriving late by a heavy-tailed delay (a few hours or more than a day
late), returned in arrival order; one seed fixes the stream. ``window_statistics`` replays it
against a time-based window and records, per arrival, the window size ``n``, the entries ``m``
it evicts and the out-of-order distance ``d``. Details: docs/bench-methods.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sortedcontainers import SortedList

DAY_MS = 86_400_000


@dataclass(frozen=True)
class BurstySpec:
    """Shape of the generated stream (rates are events per second of simulated time)."""

    days: float
    mean_rate: float
    seed: int
    daily_amplitude: float = 0.8  # rate swings between (1 - a) and (1 + a) times the mean
    drift_amplitude: float = 0.4  # slower swing over drift_days
    drift_days: float = 5.0
    bursts_per_day: float = 4.0
    burst_minutes: float = 10.0  # mean burst length
    burst_factor: tuple[float, float] = (3.0, 10.0)
    outages_per_day: float = 2.0  # silent periods: no events at all (sources down)
    outage_minutes: float = 20.0  # mean outage length
    late_fraction: float = 0.3  # share of events with a heavy-tailed delay
    late_scale_ms: float = 1_000.0  # Pareto scale: the smallest heavy-tailed delay
    late_shape: float = 0.8  # Pareto shape < 1: infinite mean, a truly heavy tail
    jitter_ms: int = 50  # delay of the on-time events, uniform in [0, jitter_ms)


def bursty_stream(spec: BurstySpec) -> tuple[list[int], list[int]]:
    """Event timestamps (ms) and values (1..100), both in arrival order."""
    rng = np.random.default_rng(spec.seed)
    seconds = np.arange(int(spec.days * 86_400), dtype=np.float64)
    day_phase = 2 * np.pi * seconds / 86_400
    rate = spec.mean_rate * (1 + spec.daily_amplitude * np.sin(day_phase - np.pi / 2))
    rate *= 1 + spec.drift_amplitude * np.sin(2 * np.pi * seconds / (spec.drift_days * 86_400))
    for _ in range(rng.poisson(spec.bursts_per_day * spec.days)):
        start = rng.uniform(0, seconds.size)
        length = rng.exponential(spec.burst_minutes * 60)
        low, high = int(start), min(seconds.size, int(start + length) + 1)
        rate[low:high] *= rng.uniform(*spec.burst_factor)
    for _ in range(rng.poisson(spec.outages_per_day * spec.days)):
        start = rng.uniform(0, seconds.size)
        low = int(start)
        rate[low : low + int(rng.exponential(spec.outage_minutes * 60)) + 1] = 0.0
    counts = rng.poisson(np.maximum(rate, 0.0))
    event_ms = np.repeat(seconds.astype(np.int64) * 1000, counts)
    event_ms += rng.integers(0, 1000, event_ms.size)
    event_ms.sort()
    delay = rng.integers(0, spec.jitter_ms, event_ms.size).astype(np.float64)
    late = rng.random(event_ms.size) < spec.late_fraction
    delay[late] = spec.late_scale_ms * (1 + rng.pareto(spec.late_shape, int(late.sum())))
    arrival = event_ms + delay.astype(np.int64)
    order = np.argsort(arrival, kind="stable")
    values = rng.integers(1, 101, event_ms.size)
    return event_ms[order].tolist(), values[order].tolist()


@dataclass(frozen=True)
class WindowStatistics:
    """Per accepted arrival: window size after it, entries it evicted, its distance d."""

    sizes: list[int]
    evicted: list[int]
    distances: list[int]
    dropped: int  # arrivals already outside the window (older than stream time - width)


def window_statistics(times: list[int], width_ms: int = DAY_MS) -> WindowStatistics:
    """Replay ``times`` against a window of the latest ``width_ms`` of stream time.

    Stream time is the largest timestamp seen; the window holds the distinct timestamps
    ``t`` with ``stream_time - width_ms < t <= stream_time``. An arrival at or below the lower
    bound is dropped.
    """
    window: SortedList = SortedList()
    sizes, evicted, distances = [], [], []
    dropped = 0
    now = None
    for t in times:
        if now is not None and t <= now - width_ms:
            dropped += 1
            continue
        distances.append(len(window) - window.bisect_right(t))
        if t not in window:
            window.add(t)
        now = t if now is None else max(now, t)
        cut = window.bisect_right(now - width_ms)
        del window[:cut]
        evicted.append(cut)
        sizes.append(len(window))
    return WindowStatistics(sizes, evicted, distances, dropped)
