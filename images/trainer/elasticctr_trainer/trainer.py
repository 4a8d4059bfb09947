"""The trainer role: passes over hour directories through Paddle's C++ dataset, metrics
per pass, and (trainer 0) export, evaluation and checkpoint after each pass.

Start: trainer 0 initialises the pservers' dense parameters (`init_worker`), then admits
the others (sync.py); they call `init_worker`, which pulls those parameters, only then.

A pass, for every trainer: train its share of the files, flush its client's pushes, write
a report marker, wait for trainer 0's result. Trainer 0 in between: gathers every report,
fails the pass over the bad-data threshold (lines and files), else evaluates, checks
and exports version V, and checkpoints; the others wait, so nothing moves the model while
it is read. A version that fails its check (modelcheck.py) is not published and fails the
pass like bad data does.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import paddle
from elasticctr_common.datafiles import BadFile
from elasticctr_common.feedback import next_partition, partition_bounds
from elasticctr_common.slotconf import read_slot_conf
from elasticctr_common.storage import Store, open_store
from elasticctr_common.trainer_json import AUTO_CROSSES, TrainerConfig, line_format
from elasticctr_common.versions import MODEL_META, dense_path, read_versions
from numpy.typing import NDArray
from paddle.distributed import fleet

from . import checkpoint as ckpt
from .auto_crosses import SlotSample, choose_crosses
from .delta import SNAPSHOT
from .evaluate import evaluate, predictions_text
from .export import prepare_version, publish_version
from .hours import first_ready, wait_for_hours, wait_for_range
from .lines import LineParser
from .metrics import MetricsLogger, PassMetrics, auc_from_histograms, metrics_port, run_params
from .modelcheck import check_version
from .pipe import native_pipe
from .prior import click_rate, log_odds, prior_hours
from .program import (
    build_training_program,
    dense_parameter_names,
    init_fleet,
    shrink_sparse_table,
)
from .roles import Role, wait_for_pservers
from .staging import collect_reports, split_files, stage
from .sync import PassSync

log = logging.getLogger(__name__)


# How long trainer 0 waits, after a failed pass, for the others to have logged why.
FAILURE_ACK_SECONDS = 60.0


class PassFailed(RuntimeError):
    """A pass failed its checks: more malformed lines or unusable data files than
    `runner.max_bad_line_fraction` allows, or a version refused by the model check.
    Rerunning on the same data would fail the same way."""


@dataclass(frozen=True)
class PlannedPass:
    pass_id: int
    hours: list[str]


def plan_passes(
    config: TrainerConfig,
    last: ckpt.Checkpoint | None,
    logger: MetricsLogger,
    sync: PassSync,
    trainer: int,
    waited: WaitedHours | None,
) -> Iterator[PlannedPass]:
    """The passes left to train; `waited` is trainer 0's `wait_for_first_data`."""
    runner = config.runner
    data = open_store(runner.train_data_uri)
    done = last.pass_id if last else 0
    if runner.mode == "offline":
        if done < runner.passes:  # a job resumed after its last pass has nothing to wait for
            hours = offline_hours(config, data, logger, sync, trainer, waited)
            for pass_id in range(done + 1, runner.passes + 1):
                yield PlannedPass(pass_id, hours)
        return
    minutes = runner.partition_minutes
    start = next_partition(last.hour, minutes) if last and last.hour else runner.start_date_hr

    def skipped(partitions: list[str]) -> None:
        logger.event("skipped_hours", {"hours": partitions, "reason": "a later one is ready"})

    partitions = wait_for_hours(
        data, start, runner.end_date_hr, runner.online_poll_seconds, minutes=minutes,
        skipped=skipped,
    )  # fmt: skip
    for offset, partition in enumerate(partitions):
        yield PlannedPass(done + 1 + offset, [partition])


def shrinks_after(config: TrainerConfig, pass_id: int) -> bool:
    """Whether the table decays and deletes (HyperParameters' accessor settings) after pass
    `pass_id`: after every online pass, and between an offline job's passes, whose next
    pass repeats the data; not after its last. What resumes that checkpoint trains new data
    (the online job follows the offline one), where a rare id's weight is what it learnt,
    not a memorised example: deleting it there cost the first online version 0.06 AUC
    (docs/trainer.md, "The table between passes")."""
    hyper = config.hyper_parameters
    if hyper.show_click_decay_rate >= 1 and hyper.deletion() <= 0:
        return False
    return config.runner.mode == "online" or pass_id < config.runner.passes


def shrinks_at_resume(config: TrainerConfig, last: ckpt.Checkpoint) -> bool:
    """Whether the table shrinks before the first pass: an offline job resumed from its
    own last pass's checkpoint (kept whole) with passes left (`passes` raised after it
    finished), whose next pass repeats the data as a pass between them would."""
    # Offline, shrinks_after is true only for a pass before the last: passes are left.
    return (
        config.runner.mode == "offline"
        and not last.table_shrunk
        and shrinks_after(config, last.pass_id)
    )


# (ready, skipped) hours of an offline job's range, as hours.wait_for_range returns them.
WaitedHours = tuple[list[str], list[str]]


def wait_for_first_data(
    config: TrainerConfig, data: Store, last: ckpt.Checkpoint | None
) -> WaitedHours | None:
    """Trainer 0 of an offline job with passes left: its range's hours once they are there
    (or the wait runs out). Before the dense parameters are pushed, so that a new model's
    output bias starts from this data (prior.py); None for an online job or none left.
    An online job's new model with crosses `auto` waits for its first partition likewise,
    to choose them from its lines (start_new_model)."""
    runner = config.runner
    if runner.mode != "offline":
        if last is None and config.hyper_parameters.crosses == AUTO_CROSSES:
            first_ready(data, runner.start_date_hr, runner.partition_minutes,
                        runner.data_wait_seconds, runner.online_poll_seconds)  # fmt: skip
        return None
    if last is not None and last.pass_id >= runner.passes:
        return None
    assert runner.end_date_hr is not None  # config.py requires it offline
    return wait_for_range(
        data,
        runner.start_date_hr,
        runner.end_date_hr,
        runner.data_wait_seconds,
        runner.online_poll_seconds,
    )


def join_extra_seconds(config: TrainerConfig) -> float:
    """How much longer than for a peer the others wait for trainer 0's welcome: offline,
    or online choosing crosses, trainer 0 waits for the data first (wait_for_first_data)."""
    runner = config.runner
    choosing = config.hyper_parameters.crosses == AUTO_CROSSES
    return runner.data_wait_seconds if runner.mode == "offline" or choosing else 0.0


def offline_hours(
    config: TrainerConfig,
    data: Store,
    logger: MetricsLogger,
    sync: PassSync,
    trainer: int,
    waited: WaitedHours | None,
) -> list[str]:
    """The hours of START..END to train: trainer 0 publishes the ones it waited for (its
    plan), the others read it."""
    runner = config.runner
    span = f"{runner.start_date_hr}..{runner.end_date_hr}"
    if trainer == 0:
        assert waited is not None  # Trainer.run waits before the join
        ready, skipped = waited
        sync.publish_plan({"hours": ready, "skipped": skipped})
    else:
        plan = sync.wait_plan()
        ready, skipped = list(plan["hours"]), list(plan.get("skipped", []))
    if skipped:  # in every trainer's log: any of them is where a user may look
        logger.event("skipped_hours", {"hours": skipped, "reason": "no donefile"})
    if not ready:
        waited_for = f" after waiting {runner.data_wait_seconds:.0f}s" if trainer == 0 else ""
        raise FileNotFoundError(f"{data.uri()}: no hour of {span} has a donefile{waited_for}")
    return ready


def pipe_command(config: TrainerConfig, slots: list[int], report_dir: str) -> str:
    """The native pipe where the image installed it, else `python -m elasticctr_trainer.pipe`
    with this process's import path: the same rules, output and report."""
    sparse_dim = str(config.hyper_parameters.sparse_dim)
    form = line_format(config)
    format_args = [] if form.name == "elasticctr" else ["--format", form.name]
    for feature in form.dense:
        format_args += ["--dense", f"{feature.name}:{feature.dim}"]
    crosses = config.hyper_parameters.crosses
    if crosses == AUTO_CROSSES:  # chosen before any pass (Trainer.start_new_model)
        raise ValueError("hyper_parameters.crosses: auto, not chosen yet")
    for a, b in crosses:
        format_args += ["--cross", f"{a}:{b}"]
    native = native_pipe()
    if native:
        args = [native, "--slots", ",".join(map(str, slots)), "--sparse-dim", sparse_dim,
                "--report-dir", report_dir, *format_args]  # fmt: skip
        return " ".join(shlex.quote(a) for a in args)
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env = f"PYTHONPATH={shlex.quote(os.pathsep.join(paths))}"
    args = [
        sys.executable, "-m", "elasticctr_trainer.pipe",
        "--slot-conf", os.path.abspath(config.runner.slot_conf),
        "--sparse-dim", sparse_dim,
        "--report-dir", report_dir, *format_args,
    ]  # fmt: skip
    return f"{env} {' '.join(shlex.quote(a) for a in args)}"


class Trainer:
    def __init__(self, config: TrainerConfig, role: Role) -> None:
        config = ckpt.with_resolved_model(config)
        self.role = role
        self.slots = read_slot_conf(config.runner.slot_conf)
        self.use_config(config)
        self.models = open_store(config.runner.model_uri)
        self.checkpoints = open_store(config.runner.checkpoint_uri)
        self.data = open_store(config.runner.train_data_uri)
        self.sync = PassSync(self.checkpoints.child("sync"), config.runner.sync_timeout_seconds)
        self.work_dir = os.path.join(config.runner.work_dir, role.name)
        self.held_back: dict[int, str] = {}  # versions this job kept but did not publish
        self.logger = MetricsLogger(
            config.runner.mlflow_experiment,
            run_name=role.name,
            tags={"role": "trainer", "trainer_id": str(role.index)},
            params=run_params(config, len(role.pserver_endpoints), role.trainers),
        )
        self.pass_metrics = PassMetrics(metrics_port(os.environ))
        if self.pass_metrics.port is not None:
            self.logger.event("metrics_port", {"port": self.pass_metrics.port, "path": "/metrics"})

    # setup ----------------------------------------------------------------------------

    def use_config(self, config: TrainerConfig) -> None:
        """The config this job runs, its line parser and model layout: once at start, and
        again when a new model's crosses `auto` are chosen (start_new_model, start_worker)."""
        self.config = config
        hyper = config.hyper_parameters
        crosses = None if hyper.crosses == AUTO_CROSSES else hyper.crosses
        self.parser = LineParser(self.slots, hyper.sparse_dim, line_format(config), crosses)
        self._layout = None if crosses is None else ckpt.ModelLayout.of(hyper, self.slots)

    @property
    def layout(self) -> ckpt.ModelLayout:
        if self._layout is None:
            raise RuntimeError("the model's crosses are not chosen yet (start_new_model)")
        return self._layout

    def use_crosses(self, crosses: list[list[int]]) -> None:
        hyper = replace(self.config.hyper_parameters, crosses=crosses)
        self.use_config(replace(self.config, hyper_parameters=hyper))

    def build(self) -> None:
        init_fleet(self.role)
        self.net = build_training_program(
            self.config.hyper_parameters, len(self.slots), len(self.role.pserver_endpoints)
        )
        self.main = paddle.static.default_main_program()
        self.test_program = self.main.clone(for_test=True)._prune(targets=[self.net.prob])
        self.dump_program = self.main.clone(for_test=True)._prune(targets=[self.net.pulled[0]])
        self.exe = paddle.static.Executor(paddle.CPUPlace())
        self.exe.run(paddle.static.default_startup_program())
        self.scope = paddle.static.global_scope()

    def restore_dense(self, last: ckpt.Checkpoint) -> None:
        arrays = ckpt.load_dense(self.checkpoints, last.pass_id)
        expected = {name: tuple(value.shape) for name, value in self.dense_in_scope().items()}
        saved = {name: tuple(value.shape) for name, value in arrays.items()}
        if saved != expected:  # a checkpoint that records no layout (check_layout)
            raise ckpt.CheckpointMismatch(
                f"checkpoint pass {last.pass_id} "
                f"({self.checkpoints.uri(f'pass-{last.pass_id}/dense.npz')}) holds dense "
                f"parameters {saved}, this job's model has {expected}: {ckpt.LAYOUT_CHANGED}"
            )
        for name, value in arrays.items():
            self.scope.find_var(name).get_tensor().set(value, paddle.CPUPlace())
        log.info("restored %d dense parameters of pass %d", len(arrays), last.pass_id)

    def start_new_model(self, waited: WaitedHours | None) -> None:
        """Trainer 0 of a new model, from the first lines of its first ready hours (prior.py:
        an offline job's that it waited for, an online job's first partition if it is there
        now): the output bias at the log-odds of their click rate (left at 0 without such a
        bias or such data), and with crosses `auto` the crosses (auto_crosses.py)."""
        name = self.net.output_bias
        choosing = self.config.hyper_parameters.crosses == AUTO_CROSSES
        sample = SlotSample(len(self.slots)) if choosing else None
        found, hours, why = None, [], "no data ready"
        if name is not None or sample is not None:
            try:
                planned = waited[0] if waited is not None else None
                hours = prior_hours(self.data, self.config.runner, planned)
                observe = sample.add if sample is not None else None
                if hours:
                    found = click_rate(self.data, hours, self.parser, observe=observe)
            except Exception as err:
                # A start at 0 is no failure: the pass reads the data anew and reports it.
                found, why = None, f"the data could not be read: {err}"
                log.warning("%s; the logit starts at 0", why)
        if sample is not None:
            crosses = choose_crosses(sample, self.slots)
            self.logger.event(
                "crosses", {"chosen": crosses, "examples": sample.examples, "hours": hours}
            )
            if not sample.examples:
                log.warning("crosses auto: no data to choose from (%s): slot.conf's first", why)
            self.use_crosses(crosses)
        if name is None or found is None:
            reason = "the network adds no bias last" if name is None else why
            self.logger.event("prior", {"applied": False, "reason": reason})
            return
        rate, examples = found
        logit = log_odds(rate)
        tensor = self.scope.find_var(name).get_tensor()
        tensor.set(np.full(np.array(tensor).shape, logit, dtype=np.float32), paddle.CPUPlace())
        self.logger.event(
            "prior",
            {"applied": True, "bias": name, "click_rate": round(rate, 6),
             "examples": examples, "hours": hours, "logit": round(logit, 6)},
        )  # fmt: skip

    def dense_in_scope(self) -> dict[str, NDArray[Any]]:
        return {
            name: np.array(self.scope.find_var(name).get_tensor())
            for name in dense_parameter_names(self.main)
        }

    def pull_dense(self) -> dict[str, NDArray[Any]]:
        """The pservers' current dense parameters, into the scope and returned."""
        with tempfile.TemporaryDirectory() as tmp:
            fleet.save_dense_params(self.exe, os.path.join(tmp, "dense"), self.scope, self.main)
        return self.dense_in_scope()

    def start_worker(self) -> None:
        """`init_worker` in order: trainer 0 first (it pushes the dense parameters it holds
        to the pservers), then the others (their `init_worker` pulls them). Paddle orders
        this with Gloo barriers, which are no-ops here: unordered, a trainer could pull the
        pservers' zero-initialised dense table and train on it until trainer 0's values
        arrived."""
        wait_for_pservers(self.role.pserver_endpoints, self.config.runner.sync_timeout_seconds)
        if self.role.index == 0:
            fleet.init_worker()
            attempt = self.sync.welcome(
                self.role.trainers, {"crosses": self.config.hyper_parameters.crosses}
            )
        else:
            self.logger.event("joining", {"waiting_for": "trainer 0's dense parameters"})
            attempt = self.sync.join(self.role.index, join_extra_seconds(self.config))
            if self.config.hyper_parameters.crosses == AUTO_CROSSES:  # a new model's
                self.use_crosses(self.sync.model["crosses"])
            fleet.init_worker()
            # Only now may trainer 0 train: its first pushes would otherwise change the dense
            # parameters before this trainer pulled them (seen on a busy machine).
            self.sync.joined(self.role.index)
        dense = self.dense_in_scope()
        digest = hashlib.sha256()
        for name in sorted(dense):
            digest.update(np.ascontiguousarray(dense[name]).tobytes())
        self.logger.event(
            "joined",
            {
                "attempt": attempt,
                "dense_sha256": digest.hexdigest()[:16],
                "dense_mean_abs": float(np.mean([np.abs(v).mean() for v in dense.values()])),
            },
        )

    def flush_pushes(self) -> None:
        """Flush this trainer's client once more before its pass marker. Paddle's client
        holds up to 12 dense and sparse updates back to merge them and sends them at a
        flush; its flush sleeps 100 ms, then waits only for requests already in flight, so
        the flush at the end of `train_from_dataset` can return with updates still queued
        when the send threads got no CPU in those 100 ms. This gives them that window
        again; the tests check the result (each version's show counts are exact)."""
        fleet.fleet._runtime_handle._worker.client_flush()

    def check_resume(self, last: ckpt.Checkpoint) -> None:
        """The checkpoint fits this model (else CheckpointMismatch); a pserver count of its
        own is fine: the pservers reshard it as they restore it (reshard.py)."""
        ckpt.check_layout(self.checkpoints, last, self.layout)
        pservers = len(self.role.pserver_endpoints)
        if last.pservers != pservers:
            log.info(
                "checkpoint pass %d taken with %d pservers, resharded to %d",
                last.pass_id, last.pservers, pservers,
            )  # fmt: skip
            self.logger.event(
                "resharded",
                {"pass": last.pass_id, "from_pservers": last.pservers, "to_pservers": pservers},
            )

    # one pass -------------------------------------------------------------------------

    def train_pass(self, planned: PlannedPass) -> dict[str, Any]:
        pass_dir = os.path.join(self.work_dir, f"pass-{planned.pass_id}")
        report_dir = os.path.join(pass_dir, "reports")
        mine = split_files(self.data, planned.hours, self.role.index, self.role.trainers)
        staged = stage(self.data, mine, os.path.join(pass_dir, "stage"))
        self.logger.event(
            "pass_start", {"pass": planned.pass_id, "hours": planned.hours, "files": mine}
        )
        for var in self.net.pass_state:
            tensor = self.scope.find_var(var.name).get_tensor()
            tensor.set(np.zeros_like(np.array(tensor)), paddle.CPUPlace())
        started = time.time()
        if staged.local_paths:
            dataset = paddle.distributed.QueueDataset()
            dataset.init(
                batch_size=self.config.hyper_parameters.batch_size,
                thread_num=self.config.runner.thread_num,
                use_var=self.net.feed_order,
                pipe_command=pipe_command(self.config, self.slots, report_dir),
            )
            dataset.set_filelist(staged.local_paths)
            self.exe.train_from_dataset(
                self.main,
                dataset,
                fetch_list=[self.net.loss],
                fetch_info=["loss"],
                print_period=1000,
            )
        self.flush_pushes()
        seconds = time.time() - started
        reports = collect_reports(report_dir, staged)
        shutil.rmtree(pass_dir, ignore_errors=True)  # staged copies and reports

        def value(var: Any) -> NDArray[Any]:
            return np.array(self.scope.find_var(var.name).get_tensor())

        examples = float(value(self.net.example_count).sum())
        metrics = {
            "loss": float(value(self.net.loss_sum).sum()) / examples if examples else float("nan"),
            "auc": auc_from_histograms(value(self.net.auc_stat_pos), value(self.net.auc_stat_neg)),
            "examples": examples,
            "seconds": seconds,
            "examples_per_sec": examples / seconds if seconds > 0 else 0.0,
            "files": float(len(mine)),
        }
        self.logger.metrics(planned.pass_id, metrics)
        runner = self.config.runner
        minutes = runner.partition_minutes if runner.mode == "online" else 60
        data_end = partition_bounds(planned.hours[-1], minutes)[1]
        self.pass_metrics.trained(planned.pass_id, metrics, data_end)
        self.pass_metrics.read(reports)
        for report in reports:
            if report["failed"]:
                self.logger.event("failed_file", report)
            elif report["bad"]:
                self.logger.event("bad_lines", report)
        return {"metrics": metrics, "reports": reports}

    def check_data(self, pass_id: int, payloads: list[dict[str, Any]]) -> str | None:
        """Why the pass's data fails it, or None. `runner.max_bad_line_fraction` bounds
        both the malformed share of the lines read and the unusable share of the pass's
        files (a file that is not lines of text, compressed data that broke off, a file the
        pipe never reported on: how many examples such a file held is unknown, so it counts
        as a file, not as lines). Unusable files within the bound are logged by name."""
        reports = [r for p in payloads for r in p["reports"]]
        failed = [r for r in reports if r.get("failed")]
        lines = sum(r["lines"] for r in reports)
        bad = sum(r["bad"] for r in reports)
        limit = self.config.runner.max_bad_line_fraction
        self.logger.metrics(
            pass_id,
            {"bad_lines": float(bad), "lines": float(lines), "failed_files": float(len(failed))},
        )
        problems = []
        if failed:
            unusable = (
                f"{len(failed)} of {len(reports)} data files unusable "
                f"({len(failed) / len(reports):.2%})"
            )
            named = ", ".join(f"{r['file']} ({r['failed']})" for r in failed[:5]) + (
                f" and {len(failed) - 5} more" if len(failed) > 5 else ""
            )
            if len(failed) / len(reports) > limit:
                problems.append(
                    f"{unusable}, over runner.max_bad_line_fraction={limit:.2%}: {named}"
                )
            else:
                log.warning(
                    "pass %d: %s, within runner.max_bad_line_fraction=%.2f%%, trained without "
                    "them (the lines before a failure count): %s",
                    pass_id, unusable, limit * 100, named,
                )  # fmt: skip
        if lines and bad / lines > limit:
            worst = sorted(reports, key=lambda r: -r["bad"])[:5]
            problems.append(
                f"{bad} of {lines} lines malformed ({bad / lines:.2%}), over "
                f"runner.max_bad_line_fraction={limit:.2%}; worst files: "
                + ", ".join(f"{r['file']} ({r['bad']}/{r['lines']}: {r['reasons']})" for r in worst)
            )
        return f"pass {pass_id}: " + "; and ".join(problems) if problems else None

    def publish_gate(self, eval_auc: object) -> str | None:
        """Why this version must not be published (its held-out AUC is below the serving
        version's by more than `runner.publish_margin`), or None."""
        runner = self.config.runner
        published = read_versions(self.models)
        if runner.publish_every_version or not isinstance(eval_auc, float) or not published:
            return None
        serving = published[-1].id
        meta = json.loads(self.models.read_text(dense_path(serving, MODEL_META)))
        serving_auc = meta.get("eval_auc")
        if not isinstance(serving_auc, float) or eval_auc >= serving_auc - runner.publish_margin:
            return None
        return (
            f"held-out AUC {eval_auc:.4f} is below serving version {serving}'s "
            f"{serving_auc:.4f} by more than runner.publish_margin={runner.publish_margin}"
        )

    def finish_pass(self, planned: PlannedPass) -> dict[str, Any]:
        """Trainer 0: evaluate, check, export, checkpoint; `ok` False (and nothing
        published) when the version fails its check."""
        # A fresh executor: one whose cached programs saw train_from_dataset rebind the
        # feed variables crashes in the feed op (Paddle 2.6).
        exe = paddle.static.Executor(paddle.CPUPlace())
        hyper = self.config.hyper_parameters
        dense = self.pull_dense()
        extra_files: dict[str, bytes] = {}
        extra_meta: dict[str, object] = {
            "pass": planned.pass_id,
            "hours": planned.hours,
            "model": hyper.model,
            "network_module": hyper.network_module,
            "data_format": self.config.runner.data_format,
            "dense_features": [asdict(feature) for feature in hyper.dense_features],
            "crosses": hyper.crosses,  # serving forms them from the slots it is sent
        }
        predictions = None
        if self.config.runner.eval_data_uri:
            try:
                result = evaluate(
                    exe, self.test_program, self.net,
                    open_store(self.config.runner.eval_data_uri), self.parser,
                )  # fmt: skip
            except BadFile as err:
                return {"ok": False, "error": f"pass {planned.pass_id}: {err}"}
            self.logger.metrics(planned.pass_id, {"eval_auc": result["auc"]})
            predictions = result["predictions"]
            extra_files["eval/predictions.txt"] = predictions_text(predictions)
            extra_meta["eval_auc"] = result["auc"]
        held_back = self.publish_gate(extra_meta.get("eval_auc"))
        # A version held back is exported whole (a user may publish it on its own later);
        # else a delta on the last published version, if the snapshot of it is here.
        published = read_versions(self.models)
        parent = published[-1].id if published and not held_back else None
        snapshot = Path(self.config.runner.work_dir) / SNAPSHOT
        with tempfile.TemporaryDirectory(prefix="elasticctr-export-") as tmp:
            max_abs_weight = self.config.runner.max_abs_weight
            prepared = prepare_version(
                exe, self.test_program, self.dump_program, self.net, hyper.sparse_dim, Path(tmp),
                max_abs_weight, None if held_back else snapshot, parent,
            )  # fmt: skip
            try:
                problems = check_version(
                    dense, prepared.embeddings, prepared.table_shows, predictions, max_abs_weight
                )
                if problems:
                    self.logger.event(
                        "version_refused", {"pass": planned.pass_id, "problems": problems}
                    )
                    self.pass_metrics.version("refused", extra_meta.get("eval_auc"))
                    error = (
                        f"pass {planned.pass_id}: model refused, nothing published (the last "
                        f"published version stays current): {'; '.join(problems)}"
                    )
                    return {"ok": False, "error": error}
                version = publish_version(
                    self.models, prepared, self.slots, hyper.sparse_dim, hyper.embedding_dim,
                    extra_meta, extra_files, held_back,
                )  # fmt: skip
            finally:
                prepared.discard()  # a no-op once published: the snapshot is in place
        self.logger.metrics(planned.pass_id, {"published": 0.0 if held_back else 1.0})
        outcome = "held_back" if held_back else "published"
        self.pass_metrics.version(outcome, extra_meta.get("eval_auc"))
        if held_back:
            self.logger.event(
                "version_held_back",
                {"pass": planned.pass_id, "version": version.id, "reason": held_back},
            )
            self.held_back[version.id] = held_back
            self.logger.tags(
                {"held_back_versions": "; ".join(f"{v}: {r}" for v, r in self.held_back.items())}
            )
        shrunk = shrinks_after(self.config, planned.pass_id)
        if shrunk:
            # Exported first; the checkpoint then holds the table the next pass starts from.
            shrink_sparse_table()
        local = ckpt.local_dir(self.config.runner.work_dir, planned.pass_id)
        fleet.save_persistables(self.exe, local, mode=0)
        ckpt.save_dense(self.checkpoints, planned.pass_id, dense)
        ckpt.request_upload(self.checkpoints, planned.pass_id, local)
        ckpt.wait_uploads(
            self.checkpoints, planned.pass_id, len(self.role.pserver_endpoints),
            self.config.runner.sync_timeout_seconds,
        )  # fmt: skip
        ckpt.append(
            self.checkpoints,
            ckpt.Checkpoint(
                pass_id=planned.pass_id,
                hour=planned.hours[-1] if self.config.runner.mode == "online" else None,
                version=version.id,
                pservers=len(self.role.pserver_endpoints),
                trainers=self.role.trainers,
                layout=self.layout,
                table_shrunk=shrunk,
            ),
        )
        ckpt.prune(self.checkpoints, planned.pass_id)
        self.logger.event(
            "version", {"pass": planned.pass_id, "version": version.id, "published": not held_back}
        )
        if not held_back:
            self.logger.register_version(
                version.id,
                self.models.uri(str(version.id)),
                {"pass": str(planned.pass_id), "partitions": ",".join(planned.hours),
                 **({"eval_auc": str(extra_meta["eval_auc"])} if "eval_auc" in extra_meta else {})},
            )  # fmt: skip
        return {"ok": True, "version": version.id, "published": not held_back}

    # the loop -------------------------------------------------------------------------

    def run(self) -> None:
        self.build()
        last = ckpt.latest(self.checkpoints)
        if last:
            try:
                self.check_resume(last)
                self.logger.event("resume", {"after_pass": last.pass_id, "version": last.version})
                if self.role.index == 0:
                    self.restore_dense(last)
            except ckpt.CheckpointMismatch as err:
                self.logger.tags({"failure_reason": str(err)})
                self.logger.close(True)
                raise
        waited = None
        if self.role.index == 0:
            waited = wait_for_first_data(self.config, self.data, last)
            if not last:
                self.start_new_model(waited)
        self.start_worker()
        if last and self.role.index == 0 and shrinks_at_resume(self.config, last):
            # Before trainer 0 publishes its plan: the other trainers wait for it to start.
            log.info("checkpoint pass %d was kept whole: shrinking it first", last.pass_id)
            shrink_sparse_table()
        failed = True
        try:
            passes = plan_passes(self.config, last, self.logger, self.sync, self.role.index, waited)
            for planned in passes:
                payload = self.train_pass(planned)
                self.sync.trainer_done(planned.pass_id, self.role.index, payload)
                if self.role.index == 0:
                    payloads = self.sync.wait_trainers(planned.pass_id, self.role.trainers)
                    error = self.check_data(planned.pass_id, payloads)
                    result: dict[str, Any] = (
                        {"ok": False, "error": error} if error else self.finish_pass(planned)
                    )
                    if not result["ok"]:
                        # In the log before the others learn of it and the job is torn down.
                        self.log_failure(planned.pass_id, result["error"], "")
                    self.sync.publish_result(planned.pass_id, result)
                    if not result["ok"]:
                        late = self.sync.wait_acknowledged(
                            planned.pass_id, self.role.trainers, FAILURE_ACK_SECONDS
                        )
                        if late:
                            log.warning("trainers %s did not acknowledge the failure", late)
                    self.sync.forget(planned.pass_id - 1)
                else:
                    result = self.sync.wait_result(planned.pass_id)
                    if not result["ok"]:
                        self.log_failure(planned.pass_id, result["error"], " (trainer 0 says)")
                        self.sync.acknowledge(planned.pass_id, self.role.index)
                if not result["ok"]:
                    raise PassFailed(result["error"])
            failed = False
        finally:
            self.shutdown(failed)

    def log_failure(self, pass_id: int, error: Any, source: str) -> None:
        log.error("pass failed%s: %s", source, error)
        self.logger.tags({"failed_pass": str(pass_id), "failure_reason": str(error)})

    def shutdown(self, failed: bool) -> None:
        if not failed:
            self.sync.trainer_finished(self.role.index)
            if self.role.index == 0:
                # every trainer is past its last pull/push: stop the pservers so the job ends
                self.sync.wait_finished(list(range(1, self.role.trainers)))
                fleet.fleet._runtime_handle._worker.stop_server()
        fleet.stop_worker()
        self.logger.close(failed)
        self.pass_metrics.close()


def run_trainer(config: TrainerConfig, role: Role) -> None:
    Trainer(config, role).run()
