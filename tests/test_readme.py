"""The README's command-line session runs as written (every other code block of the README and
of docs/: ``tests/test_docs.py``)."""

import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from app.brokers.process import free_port
from app.cli_base import parse_time
from app.generator import generate_events

README = Path(__file__).resolve().parent.parent / "README.md"


# --- the command-line session --------------------------------------------------------------


def session_lines() -> list[str]:
    """The commands of the README's session on the embedded broker, comments removed."""
    section = README.read_text().split("A session on the embedded broker:", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.DOTALL).group(1)
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


@pytest.mark.kafka
@pytest.mark.timeout(300)
def test_readme_session_works_as_written(kafka_bootstrap, embedded_profile, tmp_path):
    """Every command of the session exits 0 and shows what it promises; the broker is the
    test's (``fiba broker &`` is replaced by it), names and ports are made unique through
    ``FIBA_*`` variables, and, as someone typing would, the session waits until the worker is
    ready after ``fiba worker &`` and until it has taken every event after ``fiba produce``."""
    lines = session_lines()
    assert lines[0] == "fiba broker &"
    assert lines[1] == "export FIBA_BROKER_PROFILE=embedded"
    tag = f"readme{uuid.uuid4().hex[:8]}"
    web_port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIBA_")}
    env |= {
        "FIBA_BROKER": kafka_bootstrap,
        "FIBA_BROKER_PROFILE": "embedded" if embedded_profile else "kafka",
        "FIBA_APP_ID": tag,
        "FIBA_WEB_PORT": str(web_port),
        "FIBA_STATE_DIR": str(tmp_path / "state"),
        **{f"FIBA_{t.upper()}": f"{tag}-{t}" for t in TOPICS},
    }
    fiba = os.path.join(os.path.dirname(sys.executable), "fiba")
    outputs: dict[str, str] = {}
    background = []
    try:
        for line in lines[2:]:
            args = shlex.split(line.rstrip("&"))
            assert args[0] == "fiba", line
            if line.endswith("&"):
                log = open(tmp_path / "worker.log", "wb")  # noqa: SIM115 (closed below)
                background.append(
                    (subprocess.Popen([fiba, *args[1:]], stdout=log, stderr=log, env=env), log)
                )
                wait_ready(web_port)
                continue
            try:
                done = subprocess.run(
                    [fiba, *args[1:]], capture_output=True, text=True, env=env, timeout=60
                )
            except subprocess.TimeoutExpired:
                raise AssertionError(f"{line!r} did not end within 60 s") from None
            assert done.returncode == 0, (line, done.stderr[-2000:])
            outputs[line] = done.stdout
            if args[1] == "produce":  # someone typing: the worker is done when they go on
                wait_accepted(web_port, int(args[args.index("--generate") + 1]))
        tails = [line for line in outputs if line.startswith("fiba tail")]
        aggregates = [json.loads(x) for x in outputs[tails[0]].splitlines()]
        assert len(aggregates) == 3 and all(r["offset"] >= 0 for r in aggregates)
        assert outputs[tails[1]] == ""
        assert json.loads(outputs[lines[-2]])["error"] is None
        answer = json.loads(outputs[lines[-1]])
        assert answer["error"] is None
        assert answer["count"] == expected_count(lines[-1]) > 0
    finally:
        for process, log in background:
            process.terminate()
            process.wait(30)
            log.close()


TOPICS = ("input_topic", "queries_topic", "aggregates_topic", "answers_topic", "dead_letter_topic")


def wait_ready(port: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    raise AssertionError("the worker never became ready")


def wait_accepted(port: int, n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5) as response:
            if json.loads(response.read())["counts"].get("accepted", 0) >= n:
                return
        time.sleep(0.5)
    raise AssertionError(f"the worker did not accept {n} events")


def expected_count(query_line: str) -> int:
    """The number of events of the session's ``fiba produce`` that the query line covers."""
    produce = shlex.split(next(x for x in session_lines() if x.startswith("fiba produce")))
    query = shlex.split(query_line)

    def option(args: list[str], name: str) -> str:
        return args[args.index(name) + 1]

    events = generate_events(
        int(option(produce, "--generate")),
        keys=int(option(produce, "--keys")),
        seed=int(option(produce, "--seed")),
        start_ms=parse_time(option(produce, "--start")),
    )
    low, high = parse_time(option(query, "--from")), parse_time(option(query, "--to"))
    return sum(1 for e in events if e.key == query[2] and low <= e.ts <= high)
