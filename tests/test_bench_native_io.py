"""``python -m bench.native_io``: a tiny run prints the command, machine, load and table and
writes its results (the figures themselves are the benchmark's, not a test's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import stores
from bench import fetch_decode, native_io


@pytest.mark.skipif(stores.native() is None, reason=f"no native core ({stores.build()})")
def test_a_tiny_run_reports_every_figure_and_writes_its_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "native_io.json"
    native_io.main(
        ["--records", "256", "--chunks", "1,64", "--repetitions", "1", "--out", str(out)]
    )
    printed = capsys.readouterr().out
    assert printed.startswith("command: python -m bench.native_io --records 256")
    assert "load average after" in printed and "x Python" in printed
    rows = json.loads(out.read_text())["results"]
    figures = {(r["operation"], r["record"], r["chunk"], r["path"]) for r in rows}
    for path in ("native", "Python"):
        for record in ("number", "object"):
            assert {("parse_many", record, 1, path), ("parse_many", record, 64, path)} <= figures
        assert {("encode", "aggregate", 1, path), ("encode_many", "aggregate", 64, path)} <= figures
    assert all(r["per_cpu_s"] > 0 and r["per_wall_s"] > 0 for r in rows)


def test_without_the_native_core_it_says_so_in_one_line(monkeypatch, capsys) -> None:
    monkeypatch.setattr(stores, "native", lambda: None)
    with pytest.raises(SystemExit) as stopped:
        native_io.main(["--records", "8"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.startswith("bench.native_io: no native core loaded")


@pytest.mark.skipif(stores.native() is None, reason=f"no native core ({stores.build()})")
def test_a_tiny_fetch_decode_run_reports_every_codec_both_ways(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fetch_decode.json"
    args = ["--records", "300", "--batch", "50", "--repetitions", "1", "--out", str(out)]
    fetch_decode.main(args)
    printed = capsys.readouterr().out
    assert printed.startswith("command: python -m bench.fetch_decode --records 300")
    assert "load average after" in printed and "x aiokafka" in printed
    rows = json.loads(out.read_text())["results"]
    assert {(r["codec"], r["path"]) for r in rows} == {
        (codec, path) for codec in fetch_decode.CODECS for path in ("native", "aiokafka")
    }
    assert all(r["per_cpu_s"] > 0 and r["per_wall_s"] > 0 for r in rows)
