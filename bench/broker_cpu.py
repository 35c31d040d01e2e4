"""The broker's CPU over a benchmark's measured part, per kind of thread.

``thread_cpu(pid)`` reads each thread's user + system CPU seconds from ``/proc/<pid>/task``
(cheap: no attach to the JVM, so it can be read at the marks of a measured part);
``thread_names(pid)`` names them once afterwards from ``jcmd <pid> Thread.print`` (the JDK's
full names: ``/proc`` keeps 15 characters, so Kafka's network and request threads look alike
there), and ``by_kind`` sums CPU seconds per ``THREAD_KINDS`` entry (``other`` for the rest,
everything in ``process`` where no names are known, e.g. the embedded broker or no ``jcmd``).
Apache Kafka's threads: network threads (socket reads and writes, request parsing),
request handlers (the produce and fetch work: validation, log appends), the VM thread (where
the serial collector runs its collections), the JIT compilers. Costs: one small file read per
thread per sample; one ``jcmd`` run (a JVM of its own, ~0.5 s CPU) per naming.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

THREAD_KINDS: dict[str, tuple[str, ...]] = {
    "network": ("data-plane-kafka-network-thread", "data-plane-kafka-socket-acceptor"),
    "request_handlers": ("data-plane-kafka-request-handler",),
    "gc": ("VM Thread", "GC Thread", "G1 ", "Parallel GC"),
    "jit": ("C1 CompilerThread", "C2 CompilerThread"),
    "controller": ("controller", "quorum", "raft", "kafka-1-raft"),
}
"""Thread name prefixes (or substrings, for the controller's) per kind of Kafka broker work."""

_THREAD_LINE = re.compile(r'^"(?P<name>[^"]*)".*?\snid=(?P<nid>0x[0-9a-f]+|\d+)\s', re.M)


def thread_cpu(pid: int) -> dict[int, float]:
    """User + system CPU seconds so far of every live thread of process ``pid``, by thread id
    (threads that exited are not counted: a broker's pools live as long as it does)."""
    ticks = os.sysconf("SC_CLK_TCK")
    cpu: dict[int, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread exited meanwhile
            continue
        cpu[int(task.name)] = (int(fields[11]) + int(fields[12])) / ticks
    return cpu


def thread_names(pid: int, timeout: float = 30.0) -> dict[int, str]:
    """The names of the JVM ``pid``'s threads by thread id (``jcmd Thread.print``'s ``nid``);
    empty when the process is no JVM (``jcmd`` would send it SIGQUIT, which ends most other
    programs), ``jcmd`` is missing, or it fails."""
    jcmd = shutil.which("jcmd")
    if jcmd is None or not is_jvm(pid):
        return {}
    try:
        done = subprocess.run(
            [jcmd, str(pid), "Thread.print"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {}
    if done.returncode != 0:
        return {}
    return {int(m["nid"], 0): m["name"] for m in _THREAD_LINE.finditer(done.stdout)}


def is_jvm(pid: int) -> bool:
    """True when process ``pid`` runs a Java virtual machine (``libjvm`` is mapped)."""
    try:
        with open(f"/proc/{pid}/maps") as maps:
            return any("/libjvm.so" in line for line in maps)
    except OSError:
        return False


def kind_of(name: str) -> str:
    """The ``THREAD_KINDS`` kind of a thread named ``name``, else ``other``."""
    for kind, marks in THREAD_KINDS.items():
        if kind == "controller":
            if any(mark in name.lower() for mark in marks):
                return kind
        elif name.startswith(marks):
            return kind
    return "other"


def by_kind(
    before: dict[int, float], after: dict[int, float], names: dict[int, str]
) -> dict[str, float]:
    """CPU seconds per kind of thread between two ``thread_cpu`` samples (a thread born
    between them from 0), and their total as ``process``; only ``process`` without
    ``names``."""
    spent = {tid: cpu - before.get(tid, 0.0) for tid, cpu in after.items()}
    kinds: dict[str, float] = {"process": sum(spent.values())}
    if names:
        for tid, seconds in spent.items():
            kind = kind_of(names.get(tid, ""))
            kinds[kind] = kinds.get(kind, 0.0) + seconds
    return kinds
