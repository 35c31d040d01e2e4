"""``docs/benchmarks.md`` and the README's peers table are what ``bench.results_page`` makes of
the committed ``bench/results/``."""

import json
import re

import pytest

from bench import results_page


def test_the_committed_results_page_is_current():
    page, plots = results_page.render()
    assert results_page.PAGE.read_text() == page, (
        "docs/benchmarks.md is stale: run `python -m bench.results_page`"
    )
    for image in ("ooo.png", "fifo.png", "peers.png", "latency.png", "soak.png"):
        assert f"](img/{image})" in page
        assert (results_page.IMAGES / image).stat().st_size > 0
    assert len(plots) == 5


def test_the_readme_peers_table_is_current():
    readme = results_page.README.read_text()
    assert results_page.readme_with_peers(readme) == readme, (
        "the README's peers table is stale: run `python -m bench.results_page`"
    )


def test_every_results_json_is_on_the_page():
    page, _ = results_page.render()
    for path in sorted(results_page.RESULTS.glob("*.json")):
        if path.name != "paper_claims.json":
            assert f"`bench/results/{path.name}`" in page, path.name
    for claim in json.loads((results_page.RESULTS / "paper_claims.json").read_text()):
        assert claim["claim"] in page


def test_a_changed_result_changes_the_page(tmp_path, monkeypatch):
    """The page follows the data: a faster Quix run in a copy of the results shows up in both
    tables, and a run without a machine says so."""
    for path in results_page.RESULTS.iterdir():
        if path.is_file():
            (tmp_path / path.name).write_bytes(path.read_bytes())
    peers = json.loads((tmp_path / "peers.json").read_text())
    for row in peers:
        if row["scenario"] == "quix":
            row["events_per_s"] = 123_456.0
    (tmp_path / "peers.json").write_text(json.dumps(peers))
    goals = json.loads((tmp_path / results_page.GOALS).read_text())
    (peers_part,) = [part for part in goals["results"] if part["part"] == "peers"]
    for row in peers_part["rows"]:
        if row["scenario"] == "flink":
            row["events_per_s"] = 654_321.0
        if row["scenario"] == "quix":
            row["events_per_s"] = 111_222.0
    (tmp_path / results_page.GOALS).write_text(json.dumps(goals))
    monkeypatch.setattr(results_page, "RESULTS", tmp_path)
    page, _ = results_page.render()
    assert "123,456 (" in page
    readme = results_page.readme_with_peers(results_page.README.read_text())
    assert "654,321 (" in readme and "111,222 (" in readme  # from the goals run's peers part
    assert "123,456" not in readme  # the embedded broker's run is on the page only
    assert re.search(r"^- (\w[\w ]*, )*machine(, [\w ]+)*: not recorded$", page, re.M)


def test_a_quick_goals_run_beside_the_full_one_is_on_the_page(tmp_path, monkeypatch):
    """``bench.goals --quick`` after the full run: the page shows the full run's table and
    names the quick file as wiring only (it named neither, failing the page's check)."""
    for path in results_page.RESULTS.iterdir():
        if path.is_file():
            (tmp_path / path.name).write_bytes(path.read_bytes())
    full = json.loads((tmp_path / results_page.GOALS).read_text())
    (tmp_path / results_page.GOALS_QUICK).write_text(json.dumps({**full, "date": "quick-day"}))
    monkeypatch.setattr(results_page, "RESULTS", tmp_path)
    page, _ = results_page.render()
    assert f"`bench/results/{results_page.GOALS}`" in page
    assert f"`bench/results/{results_page.GOALS_QUICK}`, quick-day) proves the wiring" in page
    assert "**A `--quick` run**" not in page


def test_a_readme_without_the_markers_is_refused():
    with pytest.raises(SystemExit, match="peers-table"):
        results_page.readme_with_peers("# no table here\n")


def test_the_native_k_section_gives_each_cell_against_the_same_runs_floor(tmp_path, monkeypatch):
    """Every cell of a per-k run as a multiple of that run's floor, on the wall and per CPU
    second, and each mode's range, flatness and goal."""
    rows = [
        {"scenario": "floor", "occupancy": 100, "events_per_s": 400_000.0, "cpu_us_per_event": 1.0},
        {"scenario": "batch", "occupancy": 100, "events_per_s": 200_000.0, "cpu_us_per_event": 4.0},
        {"scenario": "batch", "occupancy": 1000, "events_per_s": 1e5, "cpu_us_per_event": 5.0},
        {"scenario": "batch", "occupancy": 1000, "events_per_s": 1.0, "cpu_us_per_event": 9.0,
         "queries": True},
    ]  # fmt: skip
    run = {"command": "python -m bench.worker_pipeline run", "date": "today", "machine": {}}
    (tmp_path / "k.json").write_text(json.dumps({**run, "results": rows, "load_after": "1 2 3"}))
    monkeypatch.setattr(results_page, "RESULTS", tmp_path)
    text = "\n".join(results_page.native_k_section("k.json", "Per k"))
    assert "## Per k" in text
    assert "| `batch` | 100 | 200,000 | 4 | 250,000 | 0.500x | 0.250x |" in text
    assert "| `batch` | 1,000 | 100,000 | 5 | 200,000 | 0.250x | 0.200x |" in text
    assert "| `batch` | 100, 1,000 | 0.250x-0.500x | 0.200x-0.250x | 50% | 80% | >= 0.5x |" in text
    assert text.count("| `batch` | 1,000 |") == 1  # the run with queries is left out
    assert "Load average after the run: 1 2 3." in text


def test_other_files_show_their_recorded_run_and_numbered_runs_share_a_table(tmp_path, monkeypatch):
    """A file no section reads shows the command and date it records (it said ``not recorded``
    for every fact), and the numbered runs of one A/B are one table with a ``run`` column."""
    run = {
        "command": "python -m bench.worker_pipeline run --results ab_x.json",
        "date": "2026-01-02 03:04 UTC",
        "machine": {"cpu": "Test CPU", "cores": "2", "load average (1, 5, 15 min)": "1 2 3"},
        "results": [{"scenario": "batch", "events_per_s": 1.5}],
    }
    for name in ("ab_base1_kafka.json", "ab_base2_kafka.json", "ab_fix1_kafka.json"):
        (tmp_path / name).write_text(json.dumps(run))
    monkeypatch.setattr(results_page, "RESULTS", tmp_path)
    lines = results_page.other_files_section(used=set())
    page = "\n".join(lines)
    assert "### `ab_{base1, base2, fix1}_kafka.json`" in page
    assert page.count("- command: `python -m bench.worker_pipeline run --results ab_x.json`") == 3
    assert "- date: 2026-01-02 03:04 UTC" in page and "not recorded" not in page
    assert "| `run` | `scenario` | `events_per_s` |" in page
    assert "| base2 | batch | 1.5 |" in page
