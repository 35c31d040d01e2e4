"""The native restore (``stores._native.RestoredEntries``) against the Python one (``PyEntries``,
``replay_changelog``): the same entries and applied offset from the same record batches, the same
windows with partials equal bit for bit (``marshal.dumps``) for every built-in aggregation and
compose of them; compressed batches and partials outside the native subset go through Python;
the state's record layout version in its shape (an old shape restores, another version is
refused with one line).
"""

from __future__ import annotations

import marshal
import struct
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from app.settings import Settings
from stores import native
from stores.changelog import (
    APPLIED_KEY,
    SHAPE_KEY,
    FetchedBatch,
    encode_offset,
    encode_upsert,
    entry_id,
    replay_changelog,
)
from stores.monoids import compose, monoid, monoid_names, premap
from stores.restored_entries import PyEntries, replay_batches
from stores.state_shape import RESET_HINT, STATE_FORMAT, StateMismatch, StateShape
from stores.window_store import MarshalStateCodec

NATIVE = native()
needs_native = pytest.mark.skipif(NATIVE is None, reason="the native core is not installed")

NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.integers(-1000, 1000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e-300, 2.5]),
)


def part(name: str) -> Any:
    """Built-in ``name`` fed from a record ``{"value": x, "arg": ...}`` (arg* take the record;
    bloom and distinct_count the value's text; the others the value)."""
    m = monoid(name)
    if "arg" in name:
        return m
    if name in ("bloom", "distinct_count"):
        return premap(m, lambda r: str(r["value"]))
    return premap(m, "value")


def partials(names: list[str], xs: list[Any]) -> tuple[Any, Any]:
    """``(monoid, partial)``: one built-in, or a compose of several, over ``xs`` (values a
    part cannot lift, e.g. geomean's non-positive ones, are left out)."""
    parts = {name: part(name) for name in names}
    m = parts[names[0]] if len(names) == 1 else compose(parts)
    partial = m.identity
    for x in xs:
        try:
            partial = m.combine(partial, m.lift({"value": x, "arg": f"a{x}"}))
        except (ValueError, TypeError, OverflowError):
            continue
    return m, partial


def batch_bytes(records: list[tuple[bytes | None, bytes | None]], compression: int = 0) -> bytes:
    """One Kafka v2 record batch of ``records`` (key, value) at offsets 0, 1, ..., with a
    header on every third record."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for offset, (key, value) in enumerate(records):
        headers = [("h", b"x")] if offset % 3 == 0 else []
        assert builder.append(
            offset, timestamp=1000 + offset, key=key, value=value, headers=headers
        )
    return bytes(builder.build())


def fetched(data: bytes, min_offset: int) -> FetchedBatch:
    records = MemoryRecords(data)
    return FetchedBatch(records.next_batch(), data, 0, len(data), min_offset)


def same(a: Any, b: Any) -> bool:
    """Equal in types and values, floats bit for bit (-0.0 and NaN included), containers in
    order. (``marshal.dumps`` would not do: its bytes depend on reference counts.)"""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


# --- random changelogs ------------------------------------------------------------------------

KEYS = ["a", "b", "ключ"]
TIMES = st.integers(-5, 30)


@st.composite
def changelogs(draw: st.DrawFn) -> tuple[list[tuple[bytes | None, bytes | None]], list[bytes]]:
    """Records of a random changelog (upserts with deletions, tombstones, markers, a shape)
    and the partials' bytes they may carry."""
    names = draw(st.lists(st.sampled_from(monoid_names()), min_size=1, max_size=3, unique=True))
    pool = []
    for _ in range(draw(st.integers(1, 4))):
        m, partial = partials(names, draw(st.lists(NUMBERS, max_size=3)))
        pool.append(MarshalStateCodec(m).encode(partial))
    records: list[tuple[bytes | None, bytes | None]] = []
    for offset in range(draw(st.integers(0, 40))):
        kind = draw(st.sampled_from(["upsert", "upsert", "upsert", "tombstone", "marker", "shape"]))
        key, t = draw(st.sampled_from(KEYS)), draw(TIMES)
        if kind == "upsert":
            deleted = draw(st.lists(TIMES.filter(lambda d, t=t: d != t), max_size=3, unique=True))
            value = encode_upsert(offset, deleted, draw(st.sampled_from(pool)))
            records.append((entry_id(key, t), value))
        elif kind == "tombstone":
            records.append((entry_id(key, t), None))
        elif kind == "marker":
            records.append((APPLIED_KEY, encode_offset(offset + draw(st.integers(0, 5)))))
        else:
            records.append((SHAPE_KEY, b'{"format":"x"}'))
    return records, pool


@needs_native
@hsettings(max_examples=150, deadline=None)
@given(changelog=changelogs(), min_offset=st.integers(0, 5), applied=st.integers(-1, 3))
def test_native_replay_and_windows_equal_the_python_path(
    changelog: tuple[list[tuple[bytes | None, bytes | None]], list[bytes]],
    min_offset: int,
    applied: int,
) -> None:
    records, _ = changelog
    if not records:
        return
    data = batch_bytes(records)
    expected = PyEntries()
    kept = [r for r in MemoryRecords(data).next_batch() if r.offset >= min_offset]
    want = replay_changelog(kept, applied, expected.put, expected.delete)
    got_entries = NATIVE.RestoredEntries()
    assert got_entries.replay_batch(data, 0, len(data), min_offset, applied) == want
    assert got_entries.pop(SHAPE_KEY) == expected.pop(SHAPE_KEY)
    assert len(got_entries) == len(expected)
    decode = MarshalStateCodec(monoid("sum")).decode
    got, want_windows = got_entries.windows(decode, True), expected.windows(decode, True)
    assert same(got, want_windows)
    assert list(got) == list(want_windows)  # keys in the same order
    n = len(expected)
    assert got_entries.sorted_items(0, n) == expected.sorted_items(0, n)
    assert got_entries.sorted_items(1, 2) == expected.sorted_items(1, 2)


@needs_native
@hsettings(max_examples=200, deadline=None)
@given(
    names=st.lists(st.sampled_from(monoid_names()), min_size=1, max_size=4, unique=True),
    xs=st.lists(NUMBERS, max_size=4),
)
def test_native_partial_decode_equals_marshal_for_every_builtin_and_compose(
    names: list[str], xs: list[Any]
) -> None:
    """Every built-in partial and compose, with big ints, -0.0, inf and NaN: the native
    decode gives what the codec's Python decode gives, bit for bit and in types (the
    subset natively, the rest through the fallback)."""
    m, partial = partials(names, xs)
    codec = MarshalStateCodec(m)
    encoded = codec.encode(partial)
    entries = NATIVE.RestoredEntries()
    entries.put(entry_id("k", 1), encoded)
    got = entries.windows(codec.decode, True)
    assert same(got, {"k": [(1, codec.decode(encoded))]})


@needs_native
def test_marshal_forms_outside_the_subset_and_state_forms_go_through_python() -> None:
    """Longs beyond 60 bits, lists, dicts, sets, bytes and the state form (a tuple subclass)
    come back as Python's decode gives them; the decode is called for those only."""
    values = [2**64 + 3, -(2**100), [1, 2.5], {"a": 1}, frozenset({1}), b"raw", (1, (2, "x"))]
    codec = MarshalStateCodec(monoid("sum"))
    calls = []

    def decode(data: bytes) -> Any:
        calls.append(data)
        return codec.decode(data)

    entries = NATIVE.RestoredEntries()
    for t, v in enumerate(values):
        entries.put(entry_id("k", t), marshal.dumps(v, 4))
    state_form = b"\x00" + marshal.dumps([3, 4.0], 4)
    entries.put(entry_id("k", 99), state_form)
    windows = entries.windows(decode, True)
    assert same(windows["k"], [*enumerate(values), (99, codec.decode(state_form))])
    assert len(calls) == 7  # all but the nested tuple of ints and a short string


@needs_native
def test_a_compressed_batch_is_replayed_by_the_python_path() -> None:
    records = [(entry_id("k", t), encode_upsert(t, [], marshal.dumps(t, 4))) for t in range(5)]
    data = batch_bytes(records, compression=1)  # gzip
    entries = NATIVE.RestoredEntries()
    assert entries.replay_batch(data, 0, len(data), 0, -1) is None
    assert len(entries) == 0
    assert replay_batches(entries, [fetched(data, 2)], -1) == (4, 3)
    codec = MarshalStateCodec(monoid("sum"))
    assert entries.windows(codec.decode, True) == {"k": [(2, 2), (3, 3), (4, 4)]}


@needs_native
def test_a_corrupt_batch_is_one_clear_error() -> None:
    data = batch_bytes([(entry_id("k", 1), encode_upsert(1, [], b"i\x01\x00\x00\x00"))])
    entries = NATIVE.RestoredEntries()
    with pytest.raises(ValueError, match="corrupt changelog record"):
        entries.replay_batch(data[:-3], 0, len(data) - 3, 0, -1)
    with pytest.raises(ValueError, match="outside the fetched bytes"):
        entries.replay_batch(data, 1, len(data), 0, -1)


# --- the record layout's version in the state's shape ----------------------------------------


def test_a_shape_recorded_before_the_layout_had_a_version_is_adopted() -> None:
    """A state written before the shape had ``format`` is version 1: it restores. Fails if the
    missing field is not read as version 1 ("format changed from unset to ...")."""
    shape = StateShape.of(Settings(), MarshalStateCodec.format)
    old = StateShape(tuple(f for f in shape.fields if f[0] != "format"))
    assert dict(shape.fields)["format"] == STATE_FORMAT == "changelog-entries/1"
    shape.check(old.encode(), "partition 0 of the changelog")


def test_a_state_of_another_layout_version_is_refused_in_one_line() -> None:
    shape = StateShape.of(Settings(), MarshalStateCodec.format)
    newer = StateShape(
        tuple((n, "changelog-entries/2" if n == "format" else v) for n, v in shape.fields)
    )
    with pytest.raises(StateMismatch) as refused:
        shape.check(newer.encode(), "partition 0 of app-windows-changelog")
    message = str(refused.value)
    assert "\n" not in message
    assert message == (
        "partition 0 of app-windows-changelog was written with other settings (format changed "
        f"from changelog-entries/2 to changelog-entries/1): {RESET_HINT}"
    )
