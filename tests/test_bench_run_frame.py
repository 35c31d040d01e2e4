"""``bench.run_frame``: an offline run prints its command, machine and load after, and writes
the document every offline benchmark's results file has (``bench.results_page`` reads it)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

import stores
from bench import run_frame


def test_an_offline_run_prints_its_frame_and_writes_its_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results" / "offline.json"
    run = run_frame.announce(run_frame.offline_command("bench.x", ["--n", "a b"]))
    args = argparse.Namespace(n=3, out=out)
    run_frame.write_offline_results(out, run, args, [{"rate": 1.0}], verdict="met")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "command: python -m bench.x --n 'a b'"
    assert [line.split(":")[0] for line in lines[1:-2]] == list(run["machine"])
    assert lines[-2].startswith("load average after (1, 5, 15 min): ")
    assert lines[-1].startswith("results: ") and lines[-1].endswith("offline.json")
    document = json.loads(out.read_text())
    assert list(document) == [
        "command", "machine", "load_after", "build", "settings", "results", "verdict"
    ]  # fmt: skip
    assert document["command"] == run["command"] and document["machine"] == run["machine"]
    assert document["load_after"] == lines[-2].rpartition(": ")[2]
    assert document["build"] == stores.build()
    assert document["settings"] == {"n": 3, "out": str(out)}
    assert document["results"] == [{"rate": 1.0}] and document["verdict"] == "met"
