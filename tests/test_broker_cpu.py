"""``bench.broker_cpu``: a process's CPU per thread from ``/proc``, summed per kind of thread
by the names ``jcmd`` gives (Apache Kafka's broker: tests/test_kafka_broker.py)."""

import os
import threading
import time

import pytest

from bench.broker_cpu import by_kind, kind_of, thread_cpu, thread_names


def burn(seconds: float, tid: list[int], burnt: threading.Event, done: threading.Event) -> None:
    """Use ``seconds`` of this thread's CPU, set ``burnt``, stay alive until ``done``."""
    tid.append(threading.get_native_id())
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
    burnt.set()
    done.wait()


def test_thread_cpu_charges_a_busy_thread_with_its_own_cpu_time() -> None:
    before = thread_cpu(os.getpid())
    tid: list[int] = []
    burnt, done = threading.Event(), threading.Event()
    worker = threading.Thread(target=burn, args=(0.3, tid, burnt, done))
    worker.start()
    burnt.wait()
    after = thread_cpu(os.getpid())  # the thread still alive: its /proc entry is there
    done.set()
    worker.join()
    assert tid[0] not in before
    assert 0.25 <= after[tid[0]] <= 0.4  # /proc counts in ticks of 10 ms
    spent = by_kind(before, after, {})  # no names: the process's total only
    assert list(spent) == ["process"]
    assert spent["process"] == pytest.approx(sum(t - before.get(i, 0.0) for i, t in after.items()))


def test_by_kind_sums_cpu_per_kind_of_kafka_thread() -> None:
    names = {
        1: "data-plane-kafka-request-handler-0",
        2: "data-plane-kafka-request-handler-1",
        3: "data-plane-kafka-network-thread-1-ListenerName(PLAINTEXT)-PLAINTEXT-0",
        4: "VM Thread",
        5: "C2 CompilerThread0",
        6: "kafka-1-raft-io-thread",
        7: "kafka-log-cleaner-thread-0",
    }
    before = {1: 1.0, 2: 0.5, 3: 0.25, 4: 0.0, 5: 2.0, 6: 0.0}
    after = {1: 1.5, 2: 1.0, 3: 0.75, 4: 0.125, 5: 2.0, 6: 0.25, 7: 0.5}
    assert by_kind(before, after, names) == {
        "process": 2.375,
        "request_handlers": 1.0,
        "network": 0.5,
        "gc": 0.125,
        "jit": 0.0,
        "controller": 0.25,
        "other": 0.5,  # the log cleaner, born between the samples
    }
    assert kind_of("kafka-log-cleaner-thread-0") == "other"


def test_a_process_that_is_no_jvm_has_no_thread_names() -> None:
    assert thread_names(os.getpid()) == {}


def test_worker_pipeline_report_adds_the_brokers_cpu_to_the_workers() -> None:
    """With the broker's CPU read, each row gives it per event and the events per CPU second
    of worker and broker together, and each mode's ratio to the floor also per CPU second."""
    from bench.worker_pipeline import markdown

    def row(scenario: str, rate: float, cpu: float, broker: float) -> dict:
        return {
            "scenario": scenario,
            "occupancy": 100,
            "events_per_s": rate,
            "cpu_us_per_event": cpu,
            "broker_cpu_us_per_event": broker,
        }

    report = markdown(
        [
            row("floor", 800_000, 1.0, 0.25),
            row("event", 50_000, 15.0, 5.0),
            row("emit-floor", 80_000, 8.0, 2.0),
        ]
    )
    assert "| floor | - | 800,000 | - | 1 | - | 0.2 | 800,000 |" in report
    assert "| event | 100 | 50,000 | - | 15 | - | 5.0 | 50,000 |" in report
    # (1 + 0.25) / (15 + 5) and (1 + 0.25) / (8 + 2)
    assert "(goal >= 0.25x); per CPU s of worker and broker 0.062x-0.062x" in report
    assert "the most emit=event can reach; per CPU s of worker and broker 0.125x-0.125x" in report


def test_the_broker_warm_up_produces_every_shape_and_reads_it_back(kafka_bootstrap: str) -> None:
    """``bench.broker_warmup``: the requests of every shape reach the broker (counted from
    the topics' high watermarks) and the read-back ends."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient

    from bench import broker_warmup

    asyncio.run(broker_warmup.warm_up(kafka_bootstrap, requests=40))

    async def records_per_topic() -> dict[str, int]:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        await admin.start()
        topics = [t for t in await admin.list_topics() if t.startswith("warm-up-")]
        await admin.close()
        counts = {}
        consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False)
        await consumer.start()
        for topic in topics:
            tps = [TopicPartition(topic, p) for p in range(broker_warmup.PARTITIONS)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            await consumer.getmany(timeout_ms=2000)  # a fetch: the high watermarks
            counts[topic.rsplit("-", 1)[1]] = sum(consumer.highwater(tp) or 0 for tp in tps)
        await consumer.stop()
        return counts

    counts = asyncio.run(records_per_topic())
    weights = [1 / (n * parts) ** 0.5 for _, n, parts, _ in broker_warmup.SHAPES]
    expected = {"plain": 0, "compacted": 0}
    for (compacted, n, parts, _), weight in zip(broker_warmup.SHAPES, weights, strict=True):
        requests = max(1, round(40 * weight / sum(weights)))
        expected["compacted" if compacted else "plain"] += requests * n * parts
    assert counts == expected
