"""python -m elasticctr_trainer run|local|generate|simulate|pserver-sync (docs/trainer.md,
docs/feedback.md)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from elasticctr_common.logs import log_info_to_stderr
from elasticctr_common.trainer_json import HyperParameters

from . import BAD_DATA_EXIT_CODE, DEFAULT_FIRST_SLOT, DEFAULT_SLOTS


def build_parser() -> argparse.ArgumentParser:
    """The command line of every subcommand (the README's tests parse its `generate` lines
    with it)."""
    parser = argparse.ArgumentParser(prog="python -m elasticctr_trainer")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run this pod's role (TRAINING_ROLE) of the job")
    run.add_argument("--config", required=True, help="trainer.json")

    local = commands.add_parser("local", help="run pservers and trainers as local processes")
    local.add_argument("--config", required=True)
    local.add_argument("--pservers", type=int, default=1)
    local.add_argument("--trainers", type=int, default=2)
    local.add_argument("--log-dir", default="elasticctr-local-logs")

    gen = commands.add_parser("generate", help="write synthetic ElasticCTR data")
    gen.add_argument("--out", required=True, help="storage URI (file://, s3://, hdfs://)")
    gen.add_argument(
        "--profile", choices=("simple", "realistic", "criteo"), default="simple",
        help="realistic: 20 Zipf slots, multi-hot, an interaction, 4%% clicks (realistic.py); "
        "criteo: 13 dense features, 26 slots of Criteo's cardinalities scaled down, in "
        "PaddleRec's slot format (synth.py); "
        "its defaults: --start 20191221/20 --hours 8 --heldout 60000",
    )  # fmt: skip
    gen.add_argument(
        "--baselines", action="store_true",
        help="also fit logistic regressions (ids; ids + the interacting pair) and print "
        "their held-out AUC (needs scipy)",
    )  # fmt: skip
    gen.add_argument(
        "--sparse-dim", type=int, default=HyperParameters.sparse_dim, help="for --baselines"
    )
    gen.add_argument("--max-vocab", type=int, default=100_000, help="realistic: largest slot")
    gen.add_argument(
        "--slots", type=int, default=DEFAULT_SLOTS, help="simple: how many (stacks/slot.txt's)"
    )
    gen.add_argument(
        "--first-slot", type=int, default=DEFAULT_FIRST_SLOT,
        help="slot ids FIRST.. (default: stacks/slot.txt's)",
    )  # fmt: skip
    gen.add_argument("--vocab", type=int, default=200, help="feasigns per slot")
    gen.add_argument("--start", help="first hour, YYYYMMDD/HH (simple: 20191221/00)")
    gen.add_argument("--hours", type=int, help="simple: 2")
    gen.add_argument("--examples-per-hour", type=int, default=30000)
    gen.add_argument("--files-per-hour", type=int, default=4)
    gen.add_argument("--heldout", type=int, help="held-out examples (simple: 5000)")
    gen.add_argument("--seed", type=int, default=7)
    gen.add_argument("--missing-hour", action="append", default=[], help="write no donefile")

    sim = commands.add_parser(
        "simulate", help="users of serving: predict requests and clicks under a drifting truth"
    )
    sim.add_argument("--serving-url", required=True)
    sim.add_argument("--token", default=os.environ.get("ELASTICCTR_SERVING_TOKEN", ""))
    sim.add_argument("--truth", help="generate's truth.json (URI or path); else made from:")
    sim.add_argument("--slots", type=int, default=DEFAULT_SLOTS)
    sim.add_argument("--first-slot", type=int, default=DEFAULT_FIRST_SLOT)
    sim.add_argument("--vocab", type=int, default=200)
    sim.add_argument("--seed", type=int, default=7, help="the truth's (generate's) seed")
    sim.add_argument("--seconds", type=float, default=60.0, help="how long to send requests")
    sim.add_argument("--qps", type=float, default=20.0, help="requests a second")
    sim.add_argument("--batch", type=int, default=4, help="instances a request")
    sim.add_argument("--threads", type=int, default=2)
    sim.add_argument("--click-delay", type=float, default=5.0, help="mean seconds to a click")
    sim.add_argument("--late-share", type=float, default=0.05, help="clicks sent late")
    sim.add_argument("--late-after", type=float, default=60.0, help="seconds (past the window)")
    sim.add_argument("--drift-at", type=float, help="seconds after the start the truth drifts")
    sim.add_argument("--record", default="", help="write every impression here (JSON lines)")

    sync = commands.add_parser("pserver-sync", help="internal: a pserver's checkpoint uploader")
    sync.add_argument("--checkpoint-uri", required=True)
    sync.add_argument("--rank", type=int, required=True)
    sync.add_argument("--parent-pid", type=int, required=True)
    sync.add_argument("--poll-seconds", type=float, default=0.5)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    log_info_to_stderr("elasticctr_trainer")
    if args.command in ("run", "local"):
        from elasticctr_common.trainer_json import ConfigError, load_config

        try:
            config = load_config(args.config)
        except ConfigError as err:  # every attempt would meet it: end the Job, name the key
            for line in str(err).splitlines():
                logging.getLogger("elasticctr_trainer").error("trainer.json %s", line)
            return BAD_DATA_EXIT_CODE
    if args.command == "run":
        from .roles import role_from_env

        role = role_from_env()
        # Paddle's train_from_dataset writes debug files (<id>_train_desc.prototxt) into the
        # current directory: keep them in the scratch directory, not wherever we started.
        os.makedirs(config.runner.work_dir, exist_ok=True)
        os.chdir(config.runner.work_dir)
        code = 0
        from .checkpoint import CheckpointMismatch
        from .networks import NetworkError

        try:
            if role.is_server:
                from .pserver import run_pserver

                run_pserver(config, role)
            else:
                from .trainer import PassFailed, run_trainer

                try:
                    run_trainer(config, role)
                except PassFailed:  # logged by the trainer already; Volcano's code of its own
                    code = BAD_DATA_EXIT_CODE
        # A checkpoint the model does not fit, a network module that cannot be used: every
        # attempt would meet it, so no restart.
        except (CheckpointMismatch, NetworkError) as err:
            logging.getLogger("elasticctr_trainer").error("%s", err)
            code = BAD_DATA_EXIT_CODE
        # Done, and everything is written: leave without the interpreter's teardown, where
        # Paddle's and brpc's static destructors run after the servers stopped. Should one
        # crash there, the pod would fail and Volcano restart the whole finished Job.
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(code)
    if args.command == "local":
        from .local import run_local

        return run_local(args.config, args.pservers, args.trainers, args.log_dir)
    if args.command == "generate":
        from elasticctr_common.storage import StorageError, open_store

        from .generate import run_generate

        try:
            open_store(args.out)  # a bad --out is a usage error, before any data is made
        except StorageError as err:
            print(f"error: generate: --out {err}", file=sys.stderr)
            return 2
        run_generate(args)
        return 0
    if args.command == "simulate":
        from .simulate import run_simulate

        run_simulate(args)
        return 0
    from .checkpoint import serve_uploads

    serve_uploads(args.checkpoint_uri, args.rank, args.parent_pid, args.poll_seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
