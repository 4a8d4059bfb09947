"""Kafka helpers of the tests (confluent-kafka, the client serving and the joiner use):
create topics, read a topic whole."""

from __future__ import annotations

import time
from typing import Any


def create_topics(bootstrap: str, partitions: dict[str, int]) -> None:
    """Create each topic with its partition count (replication 1); existing ones stay."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(name, count, 1) for name, count in partitions.items()]
    for future in admin.create_topics(new, request_timeout=60).values():
        try:
            future.result(timeout=90)
        except KafkaException as err:
            if err.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


def read_topic(bootstrap: str, topic: str, at_least: int = 0, timeout: float = 90.0) -> list[bytes]:
    """Every record of `topic` (values, by partition then offset): waits until there are
    `at_least`, then reads up to each partition's high watermark."""
    records, _ = read_topic_positions(bootstrap, topic, at_least, timeout)
    return records


def read_topic_positions(
    bootstrap: str, topic: str, at_least: int = 0, timeout: float = 90.0
) -> tuple[list[bytes], dict[int, int]]:
    """read_topic's records and each partition's end offset when they were read."""
    from confluent_kafka import Consumer, TopicPartition

    consumer: Any = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "tests-reader", "enable.auto.commit": False}
    )
    try:
        meta = consumer.list_topics(topic, timeout=30)
        parts = sorted(meta.topics[topic].partitions)
        deadline = time.monotonic() + timeout
        while True:
            ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                    for p in parts}  # fmt: skip
            if sum(ends.values()) >= at_least:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}: {sum(ends.values())} records, wanted {at_least}")
            time.sleep(0.2)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        by_partition: dict[int, list[bytes]] = {p: [] for p in parts}
        done = {p for p in parts if ends[p] == 0}
        while len(done) < len(parts):
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}: reading stalled before the ends {ends}")
            for message in consumer.consume(1000, 1.0):
                if message.error():
                    continue
                p = message.partition()
                if message.offset() < ends[p]:
                    by_partition[p].append(message.value())
                if message.offset() >= ends[p] - 1:
                    done.add(p)
        return [r for p in parts for r in by_partition[p]], ends
    finally:
        consumer.close()
