"""python -m elasticctr_joiner: impressions + clicks from Kafka -> labelled examples in time
partitions under the dataset URI (docs/feedback.md).

Options default to the environment the Pulumi program sets (components/joiner.py;
elasticctr_common.feedback.FeedbackEnv): KAFKA_BOOTSTRAP_SERVERS and the SASL/TLS ones,
FEEDBACK_IMPRESSIONS_TOPIC, FEEDBACK_CLICKS_TOPIC, FEEDBACK_DATASET_URI,
FEEDBACK_JOIN_WINDOW_SECONDS, FEEDBACK_PARTITION_MINUTES; storage as every image reads it.
"""

from __future__ import annotations

import argparse
import os
import sys

from elasticctr_common.feedback import (
    JOINER_PORT,
    PARTITION_MINUTES,
    FeedbackConfigError,
    FeedbackEnv,
    kafka_client_config,
    topics,
)
from elasticctr_common.logs import log_info_to_stderr
from elasticctr_common.online_eval import WINDOW_EXAMPLES, WINDOW_SECONDS, OnlineEvaluator


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = os.environ.get
    impressions, clicks = topics(os.environ)
    p = argparse.ArgumentParser(prog="python -m elasticctr_joiner", description=__doc__)
    p.add_argument("--dataset-uri", default=env(FeedbackEnv.DATASET_URI), help="partitions go here")
    p.add_argument("--impressions-topic", default=impressions)
    p.add_argument("--clicks-topic", default=clicks)
    p.add_argument(
        "--partition-minutes",
        type=int,
        default=int(env(FeedbackEnv.PARTITION_MINUTES) or 60),
        choices=PARTITION_MINUTES,
    )
    p.add_argument(
        "--join-window-seconds",
        type=float,
        default=float(env(FeedbackEnv.JOIN_WINDOW_SECONDS) or 600),
        help="how long after a partition's end clicks are still joined",
    )
    p.add_argument(
        "--topic-partitions", type=int, default=3, help="partitions of a topic it creates"
    )
    p.add_argument("--port", type=int, default=JOINER_PORT, help="/status, /metrics, /healthz")
    p.add_argument(
        "--eval-window-examples",
        type=int,
        default=WINDOW_EXAMPLES,
        help="online evaluation: a version's newest joined examples at most",
    )
    p.add_argument(
        "--eval-window-seconds",
        type=float,
        default=WINDOW_SECONDS,
        help="online evaluation: examples served within this long of the newest",
    )
    args = p.parse_args(argv)
    if not args.dataset_uri:
        p.error(f"--dataset-uri (or {FeedbackEnv.DATASET_URI}) is required")
    if args.join_window_seconds < 0:
        p.error(f"--join-window-seconds must be >= 0, got {args.join_window_seconds}")
    try:
        args.evaluator = OnlineEvaluator(args.eval_window_examples, args.eval_window_seconds)
    except ValueError as err:
        p.error(str(err))
    if args.topic_partitions < 1:
        p.error(f"--topic-partitions must be >= 1, got {args.topic_partitions}")
    try:
        args.kafka = kafka_client_config(os.environ)
    except FeedbackConfigError as err:
        p.error(str(err))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log_info_to_stderr("elasticctr_joiner")
    from elasticctr_common.registry import ModelRegistry
    from elasticctr_common.storage import open_store

    from .report import OnlineReporter
    from .run import Runner

    # With MLflow in the stack: each version's online quality goes to its training run.
    registry = ModelRegistry.from_env(os.environ)
    reporter = OnlineReporter(registry) if registry is not None else None

    runner = Runner(
        args.kafka,
        open_store(args.dataset_uri),
        args.impressions_topic,
        args.clicks_topic,
        minutes=args.partition_minutes,
        window=args.join_window_seconds,
        topic_partitions=args.topic_partitions,
        port=args.port,
        evaluator=args.evaluator,
        reporter=reporter,
    )
    runner.stop_on_signal()
    runner.run()
    if reporter is not None:
        reporter.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
