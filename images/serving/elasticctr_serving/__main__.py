"""python -m elasticctr_serving [--port 8010] [--grpc-port 8011]: the CTR prediction server
(docs/serving.md).

Options default to the environment the Pulumi program sets (components/serving.py):
MODEL_URI, CUBE_CONF, CUBE_TRANSFER_URL, SLOT_CONF, SPARSE_DIM. SERVING_AUTH_TOKEN (in the
Secret's file SERVING_AUTH_TOKEN_FILE names), when set, is the bearer token every client
must send (app.py). With
KAFKA_BOOTSTRAP_SERVERS set, impressions and clicks go to the stream (feedback.py;
elasticctr_common.feedback.FeedbackEnv names the rest).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from elasticctr_common import secrets
from elasticctr_common.contract import CUBE_CONF, SERVING_GRPC_PORT, SERVING_PORT, ServingEnv
from elasticctr_common.logs import log_info_to_stderr

from .recent import LOG_PERIOD_SECONDS

DEFAULT_MAX_BODY = 8 * 1024 * 1024


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(prog="python -m elasticctr_serving", description=__doc__)
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=SERVING_PORT)
    p.add_argument(
        "--grpc-port",
        type=int,
        default=SERVING_GRPC_PORT,
        help="the Open Inference Protocol over gRPC (0: none)",
    )
    p.add_argument("--model-uri", default=env(ServingEnv.MODEL_URI), help="the trainer's model URI")
    p.add_argument("--cube-conf", default=env(ServingEnv.CUBE_CONF, CUBE_CONF))
    p.add_argument(
        "--cube-transfer-url",
        default=env(ServingEnv.CUBE_TRANSFER_URL, ""),
        help="cube-transfer, whose committed version serving follows",
    )
    p.add_argument(
        "--slot-conf",
        default=env(ServingEnv.SLOT_CONF, ""),
        help="models must have been trained on these slots (empty: any)",
    )
    p.add_argument(
        "--sparse-dim",
        type=int,
        default=int(env(ServingEnv.SPARSE_DIM, "0")) or None,
        help="models must map feasigns with this sparse_dim (default: any)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="batch worker threads, one predictor each (1 measured best on 1-2 cores)",
    )
    p.add_argument("--max-batch", type=int, default=512, help="instances per predictor batch")
    p.add_argument(
        "--max-wait-ms",
        type=float,
        default=2.0,
        help="how long a batch waits for requests already arriving",
    )
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY)
    p.add_argument("--max-instances", type=int, default=10000, help="instances per request")
    p.add_argument("--poll-seconds", type=float, default=1.0, help="cube version checks")
    p.add_argument(
        "--retry-seconds",
        type=float,
        default=30.0,
        help="a rejected version is tried again after this long",
    )
    p.add_argument(
        "--shutdown-delay",
        type=float,
        default=0.0,
        help="seconds serving goes on, not ready, after SIGTERM before it stops accepting",
    )
    p.add_argument(
        "--failure-log-seconds",
        type=float,
        default=LOG_PERIOD_SECONDS,
        help="a 5xx answer's cause is logged at most once per this many seconds",
    )
    p.add_argument(
        "--cube-timeout",
        type=float,
        default=None,
        help="seconds per cube lookup (default: cube.conf's timeout)",
    )
    args = p.parse_args(argv)
    if not args.model_uri:
        p.error("--model-uri (or MODEL_URI) is required")
    if args.workers < 1 or args.max_batch < 1 or args.max_instances < 1:
        p.error("--workers, --max-batch and --max-instances must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log_info_to_stderr("elasticctr_serving")
    os.environ.setdefault("GLOG_minloglevel", "2")  # Paddle's C++ info logs, per predictor

    from aiohttp import web
    from elasticctr_common.cube.client import CubeClient
    from elasticctr_common.cube.conf import CubeConf
    from elasticctr_common.shutdown import DRAIN_SECONDS
    from elasticctr_common.slotconf import read_slot_conf
    from elasticctr_common.storage import open_store

    from .app import ServingApp
    from .batcher import Batcher
    from .feedback import FeedbackLog
    from .metrics import ServingMetrics
    from .rollout import ModelManager

    try:
        token = secrets.read(ServingEnv.AUTH_TOKEN)
    except secrets.SecretError as error:
        print(f"elasticctr_serving: {error}", file=sys.stderr)
        return 2
    conf = CubeConf.load(args.cube_conf)
    metrics = ServingMetrics()
    feedback = FeedbackLog.from_env(os.environ, metrics)
    manager = ModelManager(
        open_store(args.model_uri),
        conf,
        CubeClient(conf, timeout=args.cube_timeout),
        metrics,
        workers=args.workers,
        transfer_url=args.cube_transfer_url,
        slots=read_slot_conf(args.slot_conf) if args.slot_conf else None,
        sparse_dim=args.sparse_dim,
        poll_seconds=args.poll_seconds,
        retry_seconds=args.retry_seconds,
    )
    batcher = Batcher(
        CubeClient(conf, timeout=args.cube_timeout),
        manager.active,
        manager.poke,
        metrics,
        workers=args.workers,
        max_batch=args.max_batch,
        max_wait=args.max_wait_ms / 1000,
        candidate=manager.candidate,
    )
    app = ServingApp(
        manager,
        batcher,
        metrics,
        max_body_bytes=args.max_body_bytes,
        max_instances=args.max_instances,
        token=token,
        feedback=feedback,
        failure_log_seconds=args.failure_log_seconds,
    )
    application = app.build()
    app.stop_on_signal(application, args.shutdown_delay)
    if args.grpc_port:
        from .v2_grpc import GrpcServer

        grpc_server = GrpcServer(app, args.host, args.grpc_port, DRAIN_SECONDS)
        application.on_startup.append(grpc_server.start)
        application.on_shutdown.append(grpc_server.stop)
    manager.start()
    logging.getLogger("elasticctr_serving").info(
        "serving on %s:%d (gRPC %s), models %s, cube %d shards, transfer %s, %s, feedback %s",
        args.host,
        args.port,
        args.grpc_port or "off",
        args.model_uri,
        conf.shard,
        args.cube_transfer_url or "(none)",
        "bearer token required" if token else "no authentication",
        f"to {feedback.impressions_topic}" if feedback else "off",
    )
    try:
        web.run_app(
            application,
            host=args.host,
            port=args.port,
            access_log=None,
            print=None,
            handle_signals=False,  # app.stop_on_signal's, with the not-ready delay
            shutdown_timeout=DRAIN_SECONDS,
        )
    finally:
        manager.stop()
        batcher.stop()
        if feedback is not None:
            feedback.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
