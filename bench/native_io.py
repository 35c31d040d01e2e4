"""The native record I/O against the Python one, in one run: ``python -m bench.native_io``.

Parsing: ``EventParser.parse_many`` (native: one call into ``stores._native`` per chunk;
Python: orjson and the inline checks) over aiokafka ``ConsumerRecord``s of the worker's
typical input, ``{"ts": <epoch ms>, "value": <float or int>}``, and of an object value
(``{"ts": ..., "value": {"value": ..., "arg": ...}}``, argmax's input). Encoding: the
aggregate records of the default settings (five windows; count, sum, max, mean, pop_stddev)
from real ``KeyWindows.lowered_windows``, by ``AggregateEncoder.encode`` per record (chunk
size 1) and ``encode_many`` per chunk. Each at chunk sizes ``--chunks`` (1, 64, 1024), in
records per wall second and per CPU second of the measuring thread (the machine is shared),
the median of ``--repetitions`` runs over ``--records`` records. Prints the command, the
machine, its load before and after, a table with the native/Python ratio per CPU second,
and writes ``bench/results/native_io.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from aiokafka import ConsumerRecord

import stores
from agents.events import EventParser
from agents.records import AggregateEncoder, aggregate_encoder
from app.settings import Settings
from bench.run_frame import announce, offline_command, write_offline_results
from bench.timing import median_rates, wall_and_cpu_s
from stores.key_windows import KeyWindows, WindowConfig

RESULTS = Path(__file__).resolve().parent / "results" / "native_io.json"
BASE = 1_700_000_000_000


def _record(offset: int, value: bytes) -> ConsumerRecord:
    return ConsumerRecord(
        "input", 0, offset, BASE + offset, 0, f"sensor-{offset % 100}".encode(), value,
        None, 0, len(value), [],
    )  # fmt: skip


def input_records(shape: str, n: int) -> list[ConsumerRecord]:
    """n input records of ``shape``: ``number`` (a float, every third an int) or ``object``."""
    values = []
    for i in range(n):
        number: float = i if i % 3 == 0 else i * 0.37 + 0.001
        value: Any = number if shape == "number" else {"value": number, "arg": f"a{i % 7}"}
        values.append(json.dumps({"ts": BASE + i, "value": value}).encode())
    return [_record(i, v) for i, v in enumerate(values)]


def encode_arguments(n: int) -> tuple[tuple[str, ...], bool, list[tuple[Any, ...]]]:
    """The aggregations, ``lowered_is_aggregates`` and n ``encode`` argument tuples of the
    default settings, taken from a ``KeyWindows`` fed n events over 100 keys."""
    config = WindowConfig.from_settings(Settings())
    windows = KeyWindows(config, emit="event")
    items = []
    for i in range(n):
        key, ts = f"sensor-{i % 100}", BASE + 10 * i
        windows.apply_one(key, ts, i * 0.37 + 0.001)
        lowered = windows.lowered_windows(key, ts)
        items.append((key, ts, windows.stream_time, lowered, 0, i))
    return config.aggregations, config.lowered_is_aggregates, items


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every (operation, record, chunk size, path) figure of the run."""
    rows: list[dict[str, Any]] = []
    settings = Settings()
    parsers = {"native": EventParser(settings), "Python": EventParser(settings, native=False)}
    names, whole, items = encode_arguments(args.records)
    encoders = {"native": aggregate_encoder(names, whole), "Python": AggregateEncoder(names, whole)}
    for shape in ("number", "object"):
        records = input_records(shape, args.records)
        for size in args.chunks:
            chunks = _chunks(records, size)
            for path, parser in parsers.items():
                parse_many = parser.parse_many

                def run(parse_many: Any = parse_many, chunks: list = chunks) -> None:
                    for chunk in chunks:
                        parse_many(chunk)

                samples = [wall_and_cpu_s(run) for _ in range(args.repetitions)]
                row = {"operation": "parse_many", "record": shape, "chunk": size, "path": path}
                rows.append({**row, **median_rates(samples, len(records))})
    for size in args.chunks:
        chunks = _chunks(items, size)
        for path, encoder in encoders.items():

            def run_encode(encoder: Any = encoder, chunks: list = chunks, size: int = size) -> None:
                if size == 1:
                    encode = encoder.encode
                    for chunk in chunks:
                        encode(*chunk[0])
                else:
                    encode_many = encoder.encode_many
                    for chunk in chunks:
                        encode_many(chunk)

            samples = [wall_and_cpu_s(run_encode) for _ in range(args.repetitions)]
            operation = "encode" if size == 1 else "encode_many"
            row = {"operation": operation, "record": "aggregate", "chunk": size, "path": path}
            rows.append({**row, **median_rates(samples, len(items))})
        print(f"  encode, chunk {size}: done", file=sys.stderr)
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{'operation':<13}{'record':<11}{'chunk':>6}  {'path':<8}{'per wall s':>14}"
        f"{'per CPU s':>14}{'x Python':>10}"
    ]
    for row in rows:
        python = next(
            r["per_cpu_s"]
            for r in rows
            if r["path"] == "Python"
            and (r["operation"], r["record"], r["chunk"])
            == (row["operation"], row["record"], row["chunk"])
        )
        lines.append(
            f"{row['operation']:<13}{row['record']:<11}{row['chunk']:>6}  {row['path']:<8}"
            f"{row['per_wall_s'] / 1e6:>13.2f}M{row['per_cpu_s'] / 1e6:>13.2f}M"
            f"{row['per_cpu_s'] / python:>9.1f}x"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.native_io", description=__doc__)
    parser.add_argument("--records", type=int, default=1 << 16, help="records per run")
    parser.add_argument(
        "--chunks", type=lambda v: [int(c) for c in v.split(",")], default=[1, 64, 1024],
        help="chunk sizes (records per call)",
    )  # fmt: skip
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if stores.native() is None:
        parser.exit(2, f"bench.native_io: no native core loaded (build {stores.build()})\n")
    run = announce(offline_command("bench.native_io", argv))
    print(f"build: {stores.build()}")
    rows = measure(args)
    print(_table(rows))
    write_offline_results(args.out, run, args, rows)


if __name__ == "__main__":
    main()
