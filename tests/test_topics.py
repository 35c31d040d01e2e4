"""Topic declarations and their idempotent, explicit creation on a real broker (app.topics)."""

import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from agents.clients import client_options
from app.settings import Settings, load_settings
from app.topics import (
    CHANGELOG_TOPIC_CONFIGS,
    DATA_TOPIC_CONFIGS,
    TopicMismatch,
    create_topics,
    missing_or_mismatched,
    topic_specs,
)

TOPIC_SETTINGS = (
    "input_topic",
    "queries_topic",
    "aggregates_topic",
    "answers_topic",
    "dead_letter_topic",
)
EXPLICIT_CONFIGS = {"retention.ms", "retention.bytes", "cleanup.policy"}


def unique_settings(bootstrap: str, embedded: bool, **overrides: object) -> Settings:
    """Settings whose app id and five topic names are unique to one test."""
    tag = f"t{uuid.uuid4().hex[:10]}"
    values: dict[str, object] = {
        "broker": bootstrap,
        "broker_profile": "embedded" if embedded else "kafka",
        "app_id": tag,
        "input_topic": f"{tag}-events",
        "queries_topic": f"{tag}-queries",
        "aggregates_topic": f"{tag}-aggregates",
        "answers_topic": f"{tag}-answers",
        "dead_letter_topic": f"{tag}-dead-letters",
    }
    values.update(overrides)
    return load_settings(overrides=values, environ={})


def test_specs_cover_every_topic_co_partitioned_with_explicit_configs():
    settings = load_settings(overrides={"partitions": "6", "app_id": "shop"}, environ={})
    specs = {spec.name: spec for spec in topic_specs(settings)}
    assert set(specs) == {
        "fiba-events",
        "fiba-queries",
        "fiba-aggregates",
        "fiba-answers",
        "fiba-dead-letters",
        "shop-windows-changelog",
        "shop-assignment",
        "shop-__assignor-__leader",
    }
    assert settings.changelog_topic == "shop-windows-changelog"
    assert settings.assignment_topic == "shop-assignment"
    assert {spec.partitions for spec in specs.values()} == {6}
    assert all(set(spec.configs) == EXPLICIT_CONFIGS for spec in specs.values())
    assert specs["shop-windows-changelog"].configs == CHANGELOG_TOPIC_CONFIGS
    assert specs["fiba-events"].configs == DATA_TOPIC_CONFIGS
    assert CHANGELOG_TOPIC_CONFIGS["cleanup.policy"] == "compact"
    assert DATA_TOPIC_CONFIGS["cleanup.policy"] == "delete"


async def describe(settings: Settings, names: list[str]) -> tuple[dict, dict]:
    """Partition count and configs of each named topic, as the broker reports them."""
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    try:
        topics = await admin.describe_topics(names)
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        )
    finally:
        await admin.close()
    counts = {t["topic"]: len(t["partitions"]) for t in topics}
    configs = {}
    for response in responses:
        for _code, _msg, _type, name, entries in response.resources:
            configs[name] = {entry[0]: entry[1] for entry in entries}
    return counts, configs


@pytest.mark.kafka
async def test_create_is_idempotent_with_partition_counts_and_configs(
    kafka_bootstrap, embedded_profile
):
    settings = unique_settings(kafka_bootstrap, embedded_profile, partitions="3")
    names = [spec.name for spec in topic_specs(settings)]

    first = await create_topics(settings)
    assert [(o.name, o.partitions, o.created) for o in first] == [(n, 3, True) for n in names]
    second = await create_topics(settings)
    assert [(o.name, o.created) for o in second] == [(n, False) for n in names]

    counts, configs = await describe(settings, names)
    assert counts == dict.fromkeys(names, 3)
    for spec in topic_specs(settings):
        assert {k: configs[spec.name][k] for k in EXPLICIT_CONFIGS} == dict(spec.configs)


@pytest.mark.kafka
async def test_an_existing_topic_with_another_partition_count_is_an_error(
    kafka_bootstrap, embedded_profile
):
    settings = unique_settings(kafka_bootstrap, embedded_profile, partitions="2")
    await create_topics(settings)
    same_names = {name: getattr(settings, name) for name in ("app_id", *TOPIC_SETTINGS)}
    wider = unique_settings(kafka_bootstrap, embedded_profile, partitions="3", **same_names)
    with pytest.raises(TopicMismatch) as error:
        await create_topics(wider)
    message = str(error.value)
    assert settings.input_topic in message
    assert "2 partitions" in message
    assert "need 3" in message


@pytest.mark.kafka
async def test_missing_or_mismatched_topics_are_reported_without_creating_them(
    kafka_bootstrap, embedded_profile
):
    settings = unique_settings(kafka_bootstrap, embedded_profile, partitions="2")
    problems = await missing_or_mismatched(settings)
    assert problems == [f"topic {spec.name!r} is missing" for spec in topic_specs(settings)]
    assert await missing_or_mismatched(settings) == problems  # still missing: not auto-created

    await create_topics(settings)
    assert await missing_or_mismatched(settings) == []
    same_names = {name: getattr(settings, name) for name in ("app_id", *TOPIC_SETTINGS)}
    wider = unique_settings(kafka_bootstrap, embedded_profile, partitions="3", **same_names)
    assert await missing_or_mismatched(wider) == [
        f"topic {spec.name!r} has 2 partitions, not 3" for spec in topic_specs(wider)
    ]
