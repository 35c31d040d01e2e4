"""Jars from Maven Central, resolved once and cached: Apache Kafka's, and other tools' (Spark's
Kafka connector, ``spark_bridge.connector``).

``maven_jars(name, ...)`` returns ``<cache>/<name>/`` holding the given artifacts with their
runtime dependencies. The first call writes a small pom (``runtime_pom``) and runs ``mvn
dependency:copy-dependencies`` into a fresh temporary directory next to the cache, then renames
that directory to ``<cache>/<name>/`` in one step: concurrent first runs each resolve, one
rename wins, the others discard their copy, and a half-written cache never exists. Later calls
only check that the directory is there. ``kafka_jars()`` is the pinned broker
``kafka_2.13`` ``KAFKA_VERSION`` with a logging backend (log4j2 behind slf4j 2). The cache is
``$FIBA_CACHE_DIR`` or ``$XDG_CACHE_HOME/fiba-stream`` (default ``~/.cache/fiba-stream``); Maven
keeps its own download cache in ``~/.m2``. A missing ``java``/``mvn`` or a failed resolution
raises ``BrokerSetupError`` with one line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from app.brokers.process import BrokerSetupError
from app.settings import CACHE_DIR_ENV

KAFKA_VERSION = "4.1.1"
"""The Apache Kafka the project runs (``fiba broker --kind kafka``, the tests); the image in
docker-compose.yml names the same version."""

SCALA_VERSION = "2.13"
SLF4J_VERSION = "2.0.17"
LOG4J_VERSION = "2.24.3"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
RESOLVE_TIMEOUT_S = 900.0
"""Seconds a first resolution (every jar downloaded from Maven Central) may take."""


def cache_root() -> Path:
    """Where resolved Kafka versions live (module docstring)."""
    explicit = os.environ.get(CACHE_DIR_ENV)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "fiba-stream"


Coordinate = tuple[str, str, str]
"""A Maven artifact: (groupId, artifactId, version)."""


def kafka_dependencies(version: str = KAFKA_VERSION) -> list[Coordinate]:
    """The broker ``version`` and its logging backend.

    slf4j-api is pinned to 2.x because Kafka's own 1.7 would win Maven's nearest-first choice and
    ignore the log4j2 binding.
    """
    return [
        ("org.apache.kafka", f"kafka_{SCALA_VERSION}", version),
        ("org.slf4j", "slf4j-api", SLF4J_VERSION),
        ("org.apache.logging.log4j", "log4j-slf4j2-impl", LOG4J_VERSION),
        ("org.apache.logging.log4j", "log4j-core", LOG4J_VERSION),
    ]


def runtime_pom(name: str, dependencies: Sequence[Coordinate]) -> str:
    """A pom (artifact ``name``) whose dependencies are ``dependencies``."""
    xml = "\n".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
        f"<version>{v}</version></dependency>"
        for g, a, v in dependencies
    )
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>fiba-stream</groupId>
  <artifactId>{name}</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
{xml}
  </dependencies>
</project>
"""


def require_tool(name: str) -> str:
    """Path of executable ``name`` on ``PATH``; ``BrokerSetupError`` when there is none."""
    path = shutil.which(name)
    if path is None:
        raise BrokerSetupError(f"`{name}` not found on PATH; Apache Kafka needs Java 17+ and Maven")
    return path


def maven_jars(
    name: str,
    what: str,
    dependencies: Sequence[Coordinate],
    marker: str,
    root: Path | None = None,
    *,
    repository_layout: bool = False,
) -> Path:
    """``<cache>/<name>/``: the jars of ``dependencies`` and their runtime dependencies, resolved
    into the cache on first use (module docstring).

    ``what`` names them in errors; the resolution counts as failed unless a jar named
    ``marker`` is among them. ``repository_layout`` keeps Maven's ``group/artifact/version/``
    folders (so each jar's artifactId is known) instead of one flat folder.
    """
    root = root or cache_root()
    target = root / name
    if target.is_dir():
        return target
    mvn = require_tool("mvn")
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    try:
        (work / "pom.xml").write_text(runtime_pom(name, dependencies))
        jars = work / "jars"
        cmd = [
            mvn,
            "-q",
            "-B",
            "-f",
            str(work / "pom.xml"),
            f"{DEPENDENCY_PLUGIN}:copy-dependencies",
            f"-DoutputDirectory={jars}",
            "-DincludeScope=runtime",
            f"-Dmdep.useRepositoryLayout={str(repository_layout).lower()}",
        ]
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=RESOLVE_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired:
            raise BrokerSetupError(
                f"resolving {what} from Maven Central took over {RESOLVE_TIMEOUT_S:.0f} s"
            ) from None
        if done.returncode != 0 or not jars.is_dir() or next(jars.rglob(marker), None) is None:
            raise BrokerSetupError(
                f"resolving {what} from Maven Central failed: "
                f"{first_error(done.stdout + done.stderr)}"
            )
        try:
            jars.rename(target)
        except OSError:
            if not target.is_dir():  # not a concurrent run's rename: a real failure
                raise
        return target
    finally:
        shutil.rmtree(work, ignore_errors=True)


def kafka_jars(version: str = KAFKA_VERSION, root: Path | None = None) -> Path:
    """The directory of jars of Kafka ``version`` (flat), resolved into the cache on first use."""
    return maven_jars(
        f"kafka-{version}",
        f"Apache Kafka {version}",
        kafka_dependencies(version),
        f"kafka_{SCALA_VERSION}-{version}.jar",
        root,
    )


def first_error(output: str) -> str:
    """The first ``[ERROR]`` line of Maven's output (or its last line), for a one-line message."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("[ERROR]")]
    return (errors or lines or ["no output"])[0].removeprefix("[ERROR]").strip()


def main() -> None:
    """``python -m app.brokers.kafka_jars``: resolve the jars now (``make kafka-jars``), print
    where; a failure is one line on stderr and exit code 2."""
    try:
        print(kafka_jars())
    except BrokerSetupError as exc:
        print(f"fiba: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
