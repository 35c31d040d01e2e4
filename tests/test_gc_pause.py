"""``stores.gc_pause``: ``paused_gc`` turns the collector off inside, restores it after, nests;
``freeze_survivors`` collects the garbage, then takes the survivors out of later collections;
``freeze_survivors_unless_paused`` does nothing inside a pause;
``PacedYoungCollections`` collects the young generation when due, outside pauses."""

import gc
import weakref

import pytest

from stores.gc_pause import (
    PacedYoungCollections,
    freeze_survivors,
    freeze_survivors_unless_paused,
    paused_gc,
)


def test_pause_disables_and_restores_the_collector() -> None:
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause leaves the outer one in force
    assert gc.isenabled()


def test_pause_restores_the_collector_after_an_exception() -> None:
    with pytest.raises(RuntimeError), paused_gc():
        raise RuntimeError("build failed")
    assert gc.isenabled()


def test_pause_keeps_a_disabled_collector_disabled() -> None:
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


class _Cyclic:
    def __init__(self) -> None:
        self.me = self


def test_freeze_survivors_collects_garbage_then_freezes_the_living() -> None:
    alive = [_Cyclic() for _ in range(100)]
    garbage = weakref.ref(_Cyclic())  # unreachable, in a reference cycle
    try:
        freeze_survivors()
        assert garbage() is None
        assert gc.get_freeze_count() >= 100
        assert not any(isinstance(obj, _Cyclic) for obj in gc.get_objects())  # all frozen
        assert all(obj.me is obj for obj in alive)
    finally:
        gc.unfreeze()


def test_periodic_freeze_waits_for_a_paused_build() -> None:
    """Inside ``paused_gc`` (a restore building) nothing is collected or frozen: the build's
    objects would all be traversed. Outside, it is ``freeze_survivors``."""
    try:
        with paused_gc():
            building = [_Cyclic() for _ in range(100)]
            garbage = weakref.ref(_Cyclic())
            assert freeze_survivors_unless_paused() is False
            assert garbage() is not None  # not collected
            assert any(obj is building[0] for obj in gc.get_objects())  # not frozen
        assert freeze_survivors_unless_paused() is True
        assert garbage() is None
        assert not any(isinstance(obj, _Cyclic) for obj in gc.get_objects())
    finally:
        gc.unfreeze()


def test_a_freezing_pause_freezes_the_build_before_the_collector_resumes() -> None:
    """``paused_gc(freeze=True)``: what was built inside is frozen on the way out, so that no
    young collection after the pause traverses it; the collector is on again after an outer
    pause only."""
    collections: list[int] = []

    def record(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(record)
    try:
        with paused_gc():
            with paused_gc(freeze=True):
                built = [_Cyclic() for _ in range(10_000)]
            assert not gc.isenabled()
        assert gc.isenabled()
        assert collections == []  # nothing collected on the way out
        assert not any(obj is built[-1] for obj in gc.get_objects())  # frozen
        assert gc.get_count()[0] < 100  # the youngest generation was emptied by the freeze
    finally:
        gc.callbacks.remove(record)
        gc.unfreeze()


def test_paced_young_collections_collect_generation_0_when_due_and_never_in_a_pause() -> None:
    collected: list[int] = []

    def record(phase: str, info: dict) -> None:
        if phase == "stop":
            collected.append(info["generation"])

    young = PacedYoungCollections(every=200)
    thresholds = gc.get_threshold()
    gc.set_threshold(10**9)  # no automatic collection during the test
    gc.callbacks.append(record)
    try:
        young.add(150)
        assert young.collect_if_due() is False
        assert collected == []
        young.add(50)
        with paused_gc():  # a bulk build: due, but not now
            assert young.collect_if_due() is False
        assert collected == []
        assert young.collect_if_due() is True
        assert collected == [0]
        assert young.collect_if_due() is False  # the count starts again
        assert collected == [0]
    finally:
        gc.callbacks.remove(record)
        gc.set_threshold(*thresholds)
