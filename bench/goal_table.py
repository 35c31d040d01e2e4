"""Issue 29's goals judged on one ``bench.goals`` run: per goal the figure, the ratio, met or not.

``goal_rows(parts)`` reads the run's parts (``{"part": "pipeline" | "peers" | "latency" |
"scale_out" | "memory", ...}``, as ``bench.goals`` records them) and gives one row per goal:
``[goal, measured, ratio, verdict]``, the verdict ``met``, ``not met``, ``not judged: why``
(a part left out, JVMs not warmed on 10^6 events, an output check that failed) or ``-`` for a
figure without a goal (scale-out). Ratios against the floor are given per wall second and per
CPU second (the machine may be shared).
"""

from __future__ import annotations

from typing import Any

from bench.latency import GOAL_LOAD, GOAL_MS, goal_row
from bench.memory_per_entry import GOAL_BYTES

FLOOR_GOALS = {"batch": 0.5, "event": 0.25}
FLAT_SHARE = 0.8
"""``emit=batch``'s slowest k at least this share of its fastest (flat within 20 %)."""
FLAT_RANGE = (100, 100_000)
FLINK_GOAL = 5.0
KAFKA_STREAMS_GOAL = 100.0
KAFKA_STREAMS_K = 100
WARMED = 1_000_000
BOUNDS = {"batch": "batch-floor", "event": "emit-floor"}
HEADER = ["goal (issue 29)", "measured", "ratio", "verdict"]


def by_part(parts: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {p["part"]: p for p in parts}


def verdict(met: bool) -> str:
    return "met" if met else "not met"


def span(values: list[float], spec: str, suffix: str = "") -> str:
    low, high = min(values), max(values)
    text = format(low, spec) + suffix
    return (
        text if format(low, spec) == format(high, spec) else f"{text}-{format(high, spec)}{suffix}"
    )


def floor_rows(pipeline: dict[str, Any] | None) -> list[list[str]]:
    """Each emit mode against the floor at every k, and ``emit=batch``'s flatness."""
    names = [f"`emit={m}` >= {g}x the bare consumer at every k" for m, g in FLOOR_GOALS.items()]
    flat = (
        f"`emit=batch` flat within 20 % from k = 10^2 to 10^5 (slowest k >= {FLAT_SHARE}x fastest)"
    )
    rows = pipeline["rows"] if pipeline else []
    floor = next((r for r in rows if r["scenario"] == "floor"), None)
    if floor is None:
        return [[n, "-", "-", "not judged: no pipeline part"] for n in [*names, flat]]
    out = []
    per_cpu = {id(r): 1e6 / r["cpu_us_per_event"] for r in rows}
    for name, (mode, goal) in zip(names, FLOOR_GOALS.items(), strict=True):
        cells = [r for r in rows if r["scenario"] == mode]
        walls = [r["events_per_s"] / floor["events_per_s"] for r in cells]
        cpus = [per_cpu[id(r)] / per_cpu[id(floor)] for r in cells]
        bound = next((r for r in rows if r["scenario"] == BOUNDS[mode]), None)
        measured = (
            f"{span([r['events_per_s'] for r in cells], ',.0f')} events/s at k = "
            f"{span([r['occupancy'] for r in cells], ',')}; floor {floor['events_per_s']:,.0f}"
        )
        if bound:
            measured += f"; `{BOUNDS[mode]}` {bound['events_per_s'] / floor['events_per_s']:.2f}x"
        ratio = f"{span(walls, '.2f', 'x')} (per CPU s {span(cpus, '.2f', 'x')})"
        out.append([name, measured, ratio, verdict(min(walls) >= goal)])
    batch = [r for r in rows if r["scenario"] == "batch"]
    ks = [r["occupancy"] for r in batch]
    share = min(r["events_per_s"] for r in batch) / max(r["events_per_s"] for r in batch)
    covered = min(ks) <= FLAT_RANGE[0] and max(ks) >= FLAT_RANGE[1]
    out.append(
        [
            flat,
            f"slowest k at {share:.0%} of the fastest (k = {span(ks, ',')})",
            f"{share:.2f}x",
            verdict(share >= FLAT_SHARE) if covered else f"not judged: k = {span(ks, ',')} only",
        ]
    )
    return out


def peer_rows(peers: dict[str, Any] | None) -> list[list[str]]:
    """``emit=event`` against Flink (every k) and Kafka Streams (cache on, k = 100), warmed."""
    flink = f"`emit=event` >= {FLINK_GOAL:.0f}x Flink SQL's OVER window into Kafka, warmed"
    streams = (
        f"`emit=event` >= {KAFKA_STREAMS_GOAL:.0f}x Kafka Streams' `SlidingWindows` "
        f"at k = {KAFKA_STREAMS_K} (cache on)"
    )
    rows = peers["rows"] if peers else []
    cells = {(r["scenario"], r["occupancy"]): r for r in rows}
    every_k = sorted({r["occupancy"] for r in rows})
    out = []
    for name, peer, goal, ks in (
        (flink, "flink", FLINK_GOAL, every_k),
        (streams, "kafka-streams-cache", KAFKA_STREAMS_GOAL, [KAFKA_STREAMS_K]),
    ):
        pairs = [(cells.get(("event", k)), cells.get((peer, k))) for k in ks]
        pairs = [(mine, theirs) for mine, theirs in pairs if mine and theirs]
        off_k = ""
        if not pairs and every_k and ks != every_k:  # the peer at other k only: shown, unjudged
            pairs = [(cells.get(("event", k)), cells.get((peer, k))) for k in every_k]
            pairs = [(mine, theirs) for mine, theirs in pairs if mine and theirs]
            off_k = f"not judged: k = {span(every_k, ',')} only"
        if not pairs:
            out.append([name, "-", "-", f"not judged: no {peer} run"])
            continue
        ratios = [m["events_per_s"] / t["events_per_s"] for m, t in pairs]
        cpu = [t["cpu_us_per_event"] / m["cpu_us_per_event"] for m, t in pairs]
        measured = "; ".join(
            f"k = {t['occupancy']}: {m['events_per_s']:,.0f} against {t['events_per_s']:,.0f} "
            "events/s"
            for m, t in pairs
        )
        warmup = min(t.get("warmup", {}).get("events", 0) for _, t in pairs)
        wrong = [t for _, t in pairs if t.get("check", {}).get("mismatches")]
        judged = verdict(min(ratios) >= goal)
        if off_k:
            judged = off_k
        elif wrong:
            judged = f"not judged: {peer}'s output WRONG"
        elif warmup < WARMED:
            judged = f"not judged: warmed on {warmup:,} < 10^6 events ({judged} here)"
        ratio = f"{span(ratios, ',.1f', 'x')} (per CPU s {span(cpu, ',.1f', 'x')})"
        out.append([name, measured, ratio, judged])
    return out


def latency_rows(latency: dict[str, Any] | None) -> list[list[str]]:
    name = (
        f"p99 event-to-aggregate latency <= {GOAL_MS:.0f} ms at {GOAL_LOAD:.0%} of the "
        "maximum rate (`emit=event`)"
    )
    row = goal_row(latency["rows"]) if latency else None
    if row is None:
        return [[name, "-", "-", "not judged: no latency run at that load"]]
    e = row["per_event"]
    measured = (
        f"p50 / p99 / p99.9 {e['p50']:.0f} / {e['p99']:.0f} / {e['p999']:.0f} ms at "
        f"{row['target_rate']:,.0f} events/s (n = {e['n']:,})"
    )
    return [[name, measured, f"{e['p99'] / GOAL_MS:.2f}x the bound", verdict(e["p99"] <= GOAL_MS)]]


def memory_rows(memory: dict[str, Any] | None) -> list[list[str]]:
    name = f"memory per retained entry (count, sum, max) <= {GOAL_BYTES} bytes"
    rows = memory["rows"] if memory else []
    if not rows:
        return [[name, "-", "-", "not judged: no memory part"]]
    most = max(r["bytes_per_entry"] for r in rows)
    measured = "; ".join(
        f"{r['bytes_per_entry']:.0f} B at {r['entries'] // r['keys']:,} per key ({r['kernel']})"
        for r in rows
    )
    return [[name, measured, f"{most / GOAL_BYTES:.2f}x the bound", verdict(most <= GOAL_BYTES)]]


def scale_rows(scale: dict[str, Any] | None) -> list[list[str]]:
    name = "scale-out: two workers on four partitions against one (no goal: the ratio)"
    if not scale:
        return [[name, "-", "-", "not judged: no scale-out part"]]
    ratios = scale["document"]["ratio_two_over_one"]
    measured = "; ".join(
        f"`{emit}`: " + ", ".join(f"{kind} {value:.2f}x" for kind, value in figures.items())
        for emit, figures in ratios.items()
    )
    steady = [f["steady"] for f in ratios.values() if "steady" in f]
    return [[name, measured, span(steady, ".2f", "x") if steady else "-", "-"]]


def goal_rows(parts: list[dict[str, Any]]) -> list[list[str]]:
    """The goal table's rows (see the module doc)."""
    found = by_part(parts)
    return [
        *floor_rows(found.get("pipeline")),
        *peer_rows(found.get("peers")),
        *latency_rows(found.get("latency")),
        *memory_rows(found.get("memory")),
        *scale_rows(found.get("scale_out")),
        [
            "nothing lost, nothing doubled, exactly-once unchanged",
            "not in this run: `make chaos` and the crash and exactly-once tests",
            "-",
            "-",
        ],
    ]
