"""A client of a worker's HTTP range-query endpoint ``GET /windows/{key}`` (stdlib only).

``http_ask(settings, query)`` sends ``?from=&to=`` (or ``?window=``, plus ``aggregations``) to
the worker at ``web_host:web_port`` and returns the decoded answer object (the same shape as an
answers-topic record, ``agents.records.Answer``). A worker listening on all interfaces
(``0.0.0.0``/``::``) is asked on loopback; an IPv6 ``web_host`` is written in brackets.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import replace
from typing import Any

from agents.records import AGGREGATIONS, FROM, TO, WINDOW, RangeQuery
from app.settings import Settings


class WorkerUnreachable(Exception):
    """Nothing answered at the worker's HTTP address; ``str(exc)`` is one clear line."""


class BadWorkerAnswer(Exception):
    """The worker answered something that is not a JSON object."""


def windows_url(settings: Settings, query: RangeQuery) -> str:
    """The URL asking ``query`` of the worker of ``settings``."""
    params: dict[str, Any] = {}
    if query.window is not None:
        params[WINDOW] = query.window
    else:
        params[FROM], params[TO] = query.from_ts, query.to_ts
    if query.aggregations:
        params[AGGREGATIONS] = ",".join(query.aggregations)
    key = urllib.parse.quote(query.key, safe="")
    return f"{local_web_url(settings)}/windows/{key}?{urllib.parse.urlencode(params)}"


def local_web_url(settings: Settings) -> str:
    """The base URL to reach the worker of ``settings`` from this machine: its ``web_url``,
    on loopback when it listens on all interfaces."""
    if settings.web_host in ("0.0.0.0", "::", ""):
        settings = replace(settings, web_host="127.0.0.1")
    return settings.web_url


def http_ask(settings: Settings, query: RangeQuery, timeout: float = 30.0) -> dict[str, Any]:
    """The worker's answer to ``query`` (an error answer with an HTTP error status included).

    Raises ``WorkerUnreachable`` or ``BadWorkerAnswer``.
    """
    url = windows_url(settings, query)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise WorkerUnreachable(f"cannot reach the worker at {url}: {reason}") from None
    try:
        answer = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise BadWorkerAnswer(f"the worker at {url} did not answer JSON: {body[:200]!r}") from None
    if not isinstance(answer, dict):
        raise BadWorkerAnswer(f"the worker at {url} answered {answer!r}")
    return answer
