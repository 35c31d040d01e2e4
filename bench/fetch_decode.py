"""Decoding a Fetch response's input records per codec: ``python -m bench.fetch_decode``.

A response of ``--records`` records of the worker's typical input (``{"ts": ..., "value":
...}``, keyed), in record batches of ``--batch`` records as aiokafka's producer builds them,
uncompressed and with each of Kafka's codecs, decoded by the worker's native path
(``FetchedRecords.decode``: compressed batches from their plain rewrite,
``stores/native/src/compressed_batches.rs``) and by aiokafka's consumer (``PartitionRecords``,
a ``ConsumerRecord`` per record: the path compressed input took before), each then read as
the worker reads a chunk (its offsets and timestamps). Records per wall second and per CPU
second of the measuring thread, the median of ``--repetitions``; prints the command, the
machine and the load, and writes ``bench/results/fetch_decode.json``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition
from aiokafka.consumer.fetcher import READ_UNCOMMITTED, PartitionRecords
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.record.memory_records import MemoryRecords

import stores
from bench.run_frame import announce, offline_command, write_offline_results
from bench.timing import median_rates, wall_and_cpu_s

RESULTS = Path(__file__).resolve().parent / "results" / "fetch_decode.json"
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
"""Kafka's codec ids."""


def response(records: int, per_batch: int, codec: int) -> bytes:
    """The record bytes of a Fetch response: ``records`` input records from offset 0."""
    data = bytearray()
    for base in range(0, records, per_batch):
        builder = BatchBuilder(1 << 22, codec, is_transactional=False)
        for i in range(base, min(base + per_batch, records)):
            value = f'{{"ts": {1_700_000_000_000 + i * 7}, "value": {i % 977 / 8}}}'
            builder.append(timestamp=None, key=f"key-{i % 100}".encode(), value=value.encode())
        batch = bytearray(builder._build())
        batch[:8] = base.to_bytes(8, "big")
        data += batch
    return bytes(data)


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every (codec, path) figure of the run."""
    native: Any = stores.native()
    tp = TopicPartition("input", 0)
    rows = []
    for name, codec in CODECS.items():
        data = response(args.records, args.batch, codec)

        def native_path(data: bytes = data) -> None:
            got = native.FetchedRecords.decode(data, "input", 0, 0, None, True)
            got.offsets(), got.timestamps()

        def aiokafka_path(data: bytes = data) -> None:
            records = list(
                PartitionRecords(tp, MemoryRecords(data), [], 0, None, None, True, READ_UNCOMMITTED)
            )
            [r.offset for r in records], [r.timestamp for r in records]

        for path, run in (("native", native_path), ("aiokafka", aiokafka_path)):
            samples = [wall_and_cpu_s(run) for _ in range(args.repetitions)]
            row = {"codec": name, "path": path, "bytes": len(data)}
            rows.append({**row, **median_rates(samples, args.records)})
        print(f"  {name}: done", file=sys.stderr)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{'codec':<8}{'path':<10}{'bytes':>11}{'per wall s':>13}{'per CPU s':>13}"
        f"{'x aiokafka':>12}"
    ]
    for row in rows:
        theirs = next(
            r["per_cpu_s"] for r in rows if r["codec"] == row["codec"] and r["path"] == "aiokafka"
        )
        lines.append(
            f"{row['codec']:<8}{row['path']:<10}{row['bytes']:>11,}"
            f"{row['per_wall_s'] / 1e6:>12.2f}M{row['per_cpu_s'] / 1e6:>12.2f}M"
            f"{row['per_cpu_s'] / theirs:>11.1f}x"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fetch_decode", description=__doc__)
    parser.add_argument("--records", type=int, default=1 << 16, help="records per response")
    parser.add_argument("--batch", type=int, default=500, help="records per record batch")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if stores.native() is None:
        parser.exit(2, f"bench.fetch_decode: no native core loaded (build {stores.build()})\n")
    run = announce(offline_command("bench.fetch_decode", argv))
    rows = measure(args)
    print(table(rows))
    write_offline_results(args.out, run, args, rows)


if __name__ == "__main__":
    main()
