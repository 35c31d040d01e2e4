"""``agents.records.AggregateEncoder`` (``emit=event``'s encoder) writes, byte for byte, what
the reference ``encode_aggregate`` writes of the record ``KeyWindows.record_of`` builds: for
every aggregation of the registry, any subset of a group (with or without ``count``), both
``window_end`` modes, late events, empty windows, overflowing sums and integers beyond 64
bits."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from agents.records import AggregateEncoder, encode_aggregate
from stores.key_windows import EVENT_TIME, STREAM_TIME, KeyWindows, Rejected, WindowConfig
from tests.aggregation_samples import aggregation_groups, group_settings

BASE = 1_700_000_000_000

numbers = (
    st.sampled_from([1, 2, 0.5, 2.5, -3.25])
    | st.floats(-1e308, 1e308, allow_nan=False)
    | st.integers(-(2**70), 2**70)
)
objects = st.fixed_dictionaries({"value": numbers, "arg": st.text(max_size=3)})


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[WindowConfig, list[tuple[str, int, object]]]:
    group = draw(st.sampled_from(sorted(aggregation_groups())))
    names = draw(st.lists(st.sampled_from(aggregation_groups()[group]), min_size=1, unique=True))
    window_end = draw(st.sampled_from([STREAM_TIME, EVENT_TIME]))
    config = WindowConfig.from_settings(
        replace(group_settings(group), aggregations=tuple(names), window_end=window_end)
    )
    values = numbers if group == "numbers" else objects
    events = draw(
        st.lists(
            st.tuples(st.sampled_from(["a", "b", "ключ"]), st.integers(0, 15_000), values),
            min_size=1,
            max_size=25,
        )
    )
    return config, [(key, BASE + dt, value) for key, dt, value in events]


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_the_encoder_writes_the_reference_bytes(scenario) -> None:
    config, events = scenario
    windows = KeyWindows(config, emit="event")
    encoder = AggregateEncoder(config.aggregations, config.lowered_is_aggregates)
    for offset, (key, ts, value) in enumerate(events):
        try:
            windows.apply_one(key, ts, value)
        except Rejected:
            continue
        fast = encoder.encode(
            key, ts, windows.stream_time, windows.lowered_windows(key, ts), 3, offset
        )
        record = windows.record_of(key, ts)
        assert fast == encode_aggregate(record, 3, offset)
