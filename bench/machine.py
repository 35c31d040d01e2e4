"""Description of the machine a benchmark ran on: CPU model, cores, Python, date."""

from __future__ import annotations

import datetime
import os
import platform
import sys
from pathlib import Path


def cpu_model() -> str:
    """The CPU model name (from /proc/cpuinfo on Linux, else ``platform.processor()``)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"


def describe_machine() -> dict[str, str]:
    """Ordered facts about this machine and interpreter, for the report header."""
    return {
        "cpu": cpu_model(),
        "cores": str(os.cpu_count()),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(terse=True),
        "load average (1, 5, 15 min)": " ".join(f"{v:.2f}" for v in os.getloadavg()),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "interpreter": sys.executable,
    }
