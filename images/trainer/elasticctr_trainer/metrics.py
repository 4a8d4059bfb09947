"""Pass metrics: AUC from Paddle's histograms, and logging to stdout and MLflow."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
from elasticctr_common.registry import ModelRegistry, RegistryError
from elasticctr_common.trainer_json import TrainerConfig
from numpy.typing import NDArray

log = logging.getLogger(__name__)


def auc_from_histograms(positive: NDArray[Any], negative: NDArray[Any]) -> float:
    """ROC AUC from the per-threshold counts that `paddle.static.auc` accumulates."""
    pos = np.asarray(positive, dtype=np.float64).ravel()[::-1]
    neg = np.asarray(negative, dtype=np.float64).ravel()[::-1]
    if pos.sum() == 0 or neg.sum() == 0:
        return float("nan")
    tp, fp = np.cumsum(pos), np.cumsum(neg)
    tp_prev, fp_prev = np.concatenate([[0.0], tp[:-1]]), np.concatenate([[0.0], fp[:-1]])
    area = np.sum((fp - fp_prev) * (tp + tp_prev) / 2.0)
    return float(area / (tp[-1] * fp[-1]))


def auc(labels: NDArray[Any], scores: NDArray[Any]) -> float:
    """Exact ROC AUC (ties share their average rank)."""
    labels = np.asarray(labels).astype(bool)
    scores = np.asarray(scores, dtype=np.float64)
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    start = 0
    while start < len(scores):
        end = start
        while end + 1 < len(scores) and sorted_scores[end + 1] == sorted_scores[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2.0 + 1
        start = end + 1
    positives = labels.sum()
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def expected_auc(probabilities: NDArray[Any], scores: NDArray[Any]) -> float:
    """The AUC `scores` have in expectation over the clicks drawn from the true click
    `probabilities` (each instance a click with weight p, a non-click with 1 - p; pairs of
    an instance with itself left out; ties half). No click noise: on a few thousand
    impressions it moves far less than the AUC on the clicks drawn, so two versions'
    rankings can be compared on their own traffic. NaN when no pair has weight."""
    p = np.asarray(probabilities, dtype=np.float64)
    s = np.asarray(scores, dtype=np.float64)
    if p.shape != s.shape:
        raise ValueError(f"probabilities {p.shape} and scores {s.shape} differ in shape")
    groups, group_of = np.unique(s, return_inverse=True)  # ascending scores
    clicked = np.bincount(group_of, weights=p, minlength=len(groups))
    unclicked = np.bincount(group_of, weights=1.0 - p, minlength=len(groups))
    self_pairs = p * (1.0 - p)
    tied_self = np.bincount(group_of, weights=self_pairs, minlength=len(groups))
    unclicked_below = np.cumsum(unclicked) - unclicked
    ordered = np.sum(clicked * unclicked_below)
    tied = 0.5 * np.sum(clicked * unclicked - tied_self)
    weight = p.sum() * (1.0 - p).sum() - self_pairs.sum()
    return float((ordered + tied) / weight) if weight > 0 else float("nan")


def _experiment_id(mlflow: Any, name: str) -> str:
    """The experiment's id, creating it if needed: every trainer starts at once, so
    creation races, and the loser must not end up in the Default experiment."""
    found = mlflow.get_experiment_by_name(name)
    if found is not None:
        return str(found.experiment_id)
    try:
        return str(mlflow.create_experiment(name))
    except mlflow.exceptions.MlflowException:
        found = mlflow.get_experiment_by_name(name)
        if found is None:
            raise
        return str(found.experiment_id)


PARAM_CHARS = 500  # the longest param value every MLflow server takes


def run_params(config: TrainerConfig, pservers: int, trainers: int) -> dict[str, object]:
    """A trainer's MLflow params: every hyper-parameter, the data it reads, the job's shape."""
    runner = config.runner
    return {
        **{f"hyper_parameters.{k}": v for k, v in vars(config.hyper_parameters).items()},
        "runner.data_format": runner.data_format,
        "runner.start_date_hr": runner.start_date_hr,
        "runner.end_date_hr": runner.end_date_hr,
        "runner.partition_minutes": runner.partition_minutes,
        "job.pservers": pservers,
        "job.trainers": trainers,
    }


class MetricsLogger:
    """One JSON line per event on stdout; MLflow too when MLFLOW_TRACKING_URI is set."""

    def __init__(
        self,
        experiment: str,
        run_name: str,
        tags: dict[str, str],
        params: Mapping[str, object] | None = None,
    ) -> None:
        self.mlflow = None
        # The registry published versions go to: named after the experiment.
        self.registry = ModelRegistry.from_env(os.environ, experiment)
        if os.environ.get("MLFLOW_TRACKING_URI"):
            import mlflow

            mlflow.start_run(
                experiment_id=_experiment_id(mlflow, experiment), run_name=run_name, tags=tags
            )
            self.mlflow = mlflow
            if params:
                # What the run was trained with, as MLflow's UI compares runs by: its params.
                mlflow.log_params({k: str(v)[:PARAM_CHARS] for k, v in params.items()})

    def metrics(self, step: int, values: dict[str, float]) -> None:
        print(json.dumps({"event": "metrics", "step": step, **values}), file=sys.stdout, flush=True)
        if self.mlflow is not None:
            finite = {k: v for k, v in values.items() if np.isfinite(v)}
            self.mlflow.log_metrics(finite, step=step)

    def event(self, name: str, payload: dict[str, Any]) -> None:
        print(json.dumps({"event": name, **payload}), file=sys.stdout, flush=True)
        if self.mlflow is not None:
            self.mlflow.log_dict(payload, f"{name}.json")

    def tags(self, values: dict[str, str]) -> None:
        """Tags on this trainer's MLflow run (and a `tags` event on stdout)."""
        print(json.dumps({"event": "tags", **values}), file=sys.stdout, flush=True)
        if self.mlflow is not None:
            # MLflow caps a tag value at 5000 characters (8000 in newer servers).
            self.mlflow.set_tags({k: v[:5000] for k, v in values.items()})

    def register_version(self, version: int, source: str, tags: Mapping[str, str]) -> None:
        """A published version in MLflow's model registry, under the experiment's name and
        linked to this run. The registry is a view: when it refuses or cannot be reached,
        the reason is logged (event `registry_failed`) and training goes on."""
        registry = self.registry
        if self.mlflow is None or registry is None:
            return
        run = self.mlflow.active_run()
        try:
            number = registry.register(
                version, source, run.info.run_id if run else None, tags,
                description=f"elasticctr version {version}",
            )  # fmt: skip
        except RegistryError as err:
            log.warning("version %d not registered in MLflow: %s", version, err)
            self.event("registry_failed", {"version": version, "error": str(err)})
            return
        self.event(
            "registered",
            {"version": version, "registered_model": registry.model_name, "mlflow_version": number},
        )

    def close(self, failed: bool = False) -> None:
        if self.mlflow is not None:
            self.mlflow.end_run(status="FAILED" if failed else "FINISHED")


class PassMetrics:
    """The trainer's families of the metrics contract (elasticctr_common.metrics.TRAINER),
    served on `/metrics` of its own port while it runs: a Job's pod has no other HTTP
    port, and no push gateway is assumed (docs/trainer.md, "Metrics")."""

    def __init__(self, port: int | None) -> None:
        from elasticctr_common.exposition import Exposition
        from elasticctr_common.metrics import TRAINER, TRAINER_VERSION_OUTCOMES

        self.exposition = m = Exposition(TRAINER)
        self.newest_end: float | None = None
        for outcome in TRAINER_VERSION_OUTCOMES:  # every series from the start, at 0
            m["versions_total"].labels(outcome)
        for short in ("pass", "examples_per_second", "loss", "auc", "eval_auc"):
            m[short].set(float("nan"))
        m.gauge_function("data_lag_seconds", self._lag)
        m.gauge_function("newest_partition_end_timestamp_seconds", self._newest)
        self.server = None
        if port is not None:
            try:
                self.server = m.serve(port)
            except OSError as err:  # metrics are not worth failing the job for
                log.warning("no /metrics: cannot listen on port %s: %s", port, err)
        self.port = self.server.server_address[1] if self.server is not None else None

    def _newest(self) -> float:
        return float("nan") if self.newest_end is None else self.newest_end

    def _lag(self) -> float:
        return float("nan") if self.newest_end is None else time.time() - self.newest_end

    def trained(self, pass_id: int, values: dict[str, float], data_end: float) -> None:
        """A pass this trainer trained; `values` its logged metrics, `data_end` the end of
        the newest data it read (Unix time)."""
        m = self.exposition
        m["pass"].set(pass_id)
        m["examples_total"].inc(values["examples"])
        m["examples_per_second"].set(values["examples_per_sec"])
        m["loss"].set(values["loss"])
        m["auc"].set(values["auc"])
        m["pass_seconds"].observe(values["seconds"])
        self.newest_end = data_end if self.newest_end is None else max(self.newest_end, data_end)

    def read(self, reports: list[dict[str, Any]]) -> None:
        """This trainer's data file reports of a pass: lines, bad lines, failed files."""
        m = self.exposition
        m["lines_total"].inc(sum(r["lines"] for r in reports))
        m["bad_lines_total"].inc(sum(r["bad"] for r in reports))
        m["failed_files_total"].inc(sum(1 for r in reports if r.get("failed")))

    def version(self, outcome: str, eval_auc: object = None) -> None:
        """Trainer 0's export of a pass: published, held_back or refused."""
        self.exposition["versions_total"].labels(outcome).inc()
        if isinstance(eval_auc, float):
            self.exposition["eval_auc"].set(eval_auc)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def metrics_port(env: Mapping[str, str]) -> int | None:
    """The trainer's metrics port from TrainerEnv.METRICS_PORT (default the contract's;
    0: none); a clear error for anything else."""
    from elasticctr_common.contract import TRAINER_METRICS_PORT, TrainerEnv

    text = env.get(TrainerEnv.METRICS_PORT, str(TRAINER_METRICS_PORT))
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ValueError(f"{TrainerEnv.METRICS_PORT}={text!r}: need a port 0..65535 (0: none)")
    return port or None
