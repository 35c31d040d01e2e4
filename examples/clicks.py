"""Per-user click windows in a Faust app of your own (docs/reference/library.md, "Sliding
windows in your own Faust agents"). Run: ``faust -A examples.clicks worker -l info``."""

import os

import faust

from agents.sliding import LateEvent, SlidingWindows
from stores.monoids import make_monoid

app = faust.App(
    os.environ.get("CLICKS_APP_ID", "clicks-example"),
    broker=os.environ.get("KAFKA_BROKER", "kafka://localhost:9092"),
    topic_partitions=int(os.environ.get("CLICKS_PARTITIONS", "4")),
    store="memory://",
)


class Click(faust.Record):
    ts: int  # event time, milliseconds
    amount: int


clicks = app.topic(os.environ.get("CLICKS_TOPIC", "clicks"), key_type=str, value_type=Click)
click_windows = app.topic(os.environ.get("CLICKS_OUT", "click-windows"), key_type=str)

# Your own monoid: the last three amounts in event-time order (not commutative).
last_three = make_monoid(
    (), lambda amount: (amount,), lambda a, b: (a + b)[-3:], list,
    name="last_three", to_state=list, from_state=tuple,
)  # fmt: skip

windows = SlidingWindows(
    app, "clicks", windows=["1m", "5m"], retention="10m",
    aggregations=["count", "sum", last_three],
)  # fmt: skip


@app.agent(clicks)
async def track(stream):
    async for user, click in stream.items():
        try:
            now = windows.add(user, click.ts, click.amount)
        except LateEvent:
            continue  # older than the stream time minus the retention
        await click_windows.send(
            key=user,
            value={"ts": click.ts, "stream_time": windows.stream_time(user), "windows": now},
        )
