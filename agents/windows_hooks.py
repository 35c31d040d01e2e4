"""The windows pipeline in a Faust worker: ``install`` registers it on the app.

The assignment agent (which makes Faust's consumer join the group, see
``agents.input_reader``), the rebalance hooks (revoked: pause the reader, hand over what was
applied, flush the store; assigned: keep only the owned partitions' state and read them), the
idle-key sweep timer and the periodic freeze of long-lived window entries
(``stores.gc_pause``). Design: docs/design/delivery.md.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any, Protocol

import faust
from faust.types import TP

from agents.config import FaustWorker
from agents.windows import WindowsPipeline
from stores.gc_pause import freeze_survivors_unless_paused

logger = logging.getLogger(__name__)

FREEZE_INTERVAL_S = 2.0
"""Seconds between two ``stores.gc_pause.freeze_survivors``: the window entries made since the
last one are taken out of the cyclic collector's full collections, so that none of them
traverses the whole window state (one pause proportional to it)."""


class PartitionReader(Protocol):
    """What ``install`` drives of the input reader (``agents.input_reader.InputReader``)."""

    def pause(self, partitions: Iterable[int]) -> None: ...

    async def follow(self, partitions: Iterable[int]) -> None: ...


def install(fiba: FaustWorker, pipeline: WindowsPipeline, reader: PartitionReader) -> None:
    """Register on ``fiba.app`` the assignment agent, the rebalance hooks that make ``reader``
    (the ``agents.input_reader.InputReader`` of ``pipeline``) read the owned input partitions,
    and the idle-key sweep timer."""
    app = fiba.app
    settings = fiba.settings

    async def assignment_agent(stream: faust.StreamT) -> None:
        # the assignment topic stays empty: this agent only makes Faust's consumer join the
        # group with it, so that Faust's assignor hands out its partitions (see input_reader)
        async for _ in stream.events():
            pass

    app.agent(fiba.assignment_topic, name="fiba-assignment")(assignment_agent)

    async def sweep_idle_keys() -> None:
        evicted = await pipeline.sweep()
        logger.info("sweep: %d entries evicted; stats %s", evicted, json.dumps(pipeline.stats()))

    app.timer(settings.sweep_interval / 1000, name="fiba-sweep", on_leader=False)(sweep_idle_keys)

    async def freeze_long_lived() -> None:
        freeze_survivors_unless_paused()  # a restore in progress freezes its own result

    app.timer(FREEZE_INTERVAL_S, name="fiba-gc-freeze", on_leader=False)(freeze_long_lived)

    @app.on_partitions_revoked.connect
    async def stop_reading_revoked(sender: Any, revoked: set[TP], **kwargs: Any) -> None:
        reader.pause(fiba.owned_partitions(revoked))
        await pipeline.wait_idle()
        await pipeline.hand_over()  # the reader may be between a chunk and its hand-over
        await pipeline.store.flush()

    @app.on_partitions_assigned.connect
    async def read_assigned(sender: Any, assigned: set[TP], **kwargs: Any) -> None:
        owned = fiba.owned_partitions(assigned)
        await pipeline.keep_only(owned)
        await reader.follow(owned)
