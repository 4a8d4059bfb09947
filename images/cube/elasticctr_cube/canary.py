"""The transfer's side of the canary (elasticctr_common.canary): its options, the joiner's
figures, and the record of a decision in MLflow.

A canary is part of the transfer's state (`transfer-state.json`, "canary"):
{"version", "baseline", "fraction", "started", "phase", "last"}; `phase` is SERVING while
serving scores the candidate's share, DRAINING once it is rolled back and readers leave
it. Its end is a history entry of kind "canary" (result committed or rolled_back) holding
the decision's numbers.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass
from typing import Any

from elasticctr_common import canary as contract
from elasticctr_common.canary import CanaryEnv, Decision
from elasticctr_common.online_eval import Quality
from elasticctr_common.registry import ModelRegistry, RegistryError

from .cliargs import env_option
from .httpjson import HttpCallError, call

log = logging.getLogger("cube-transfer")
JOINER_TIMEOUT = 5.0
DECISION_TAG = "elasticctr.canary"  # the model version's tag in MLflow's registry


@dataclass(frozen=True)
class CanaryPolicy:
    fraction: float
    margin: float
    confidence: float
    min_clicks: int
    max_seconds: float
    joiner_url: str

    def __post_init__(self) -> None:
        problems = []
        if not 0.0 < self.fraction < 1.0:
            problems.append(f"--canary-fraction must be in (0, 1), got {self.fraction}")
        if not 0.0 <= self.margin < 0.5:
            problems.append(f"--canary-margin must be in [0, 0.5), got {self.margin}")
        if not 0.5 <= self.confidence < 1.0:
            problems.append(f"--canary-confidence must be in [0.5, 1), got {self.confidence}")
        if self.min_clicks < 1 or not self.max_seconds > 0:
            problems.append(
                f"--canary-min-clicks must be >= 1 and --canary-max-seconds > 0, got "
                f"{self.min_clicks} and {self.max_seconds}"
            )
        if not self.joiner_url.startswith(("http://", "https://")):
            problems.append(
                f"--canary-joiner-url must be the joiner's http://host:port, got "
                f"{self.joiner_url!r} (the canary is judged on its joined feedback)"
            )
        if problems:
            raise ValueError("; ".join(problems))

    def figures(self) -> dict[int, Quality]:
        """Each version's online figures, as the joiner has them now."""
        url = self.joiner_url.rstrip("/") + "/status"
        code, answer = call("GET", url, None, JOINER_TIMEOUT)
        if code >= 400 or not isinstance(answer, dict):
            raise HttpCallError(f"GET {url}: HTTP {code}: {answer}")
        return contract.online_figures(answer)

    def judge(self, canary: dict[str, Any]) -> Decision:
        """The decision on the canary now; a joiner that does not answer is no figures."""
        try:
            figures = self.figures()
            error = None
        except (HttpCallError, ValueError) as err:
            figures, error = {}, f"the joiner's figures: {err}"
        decision = contract.decide(
            figures.get(canary["baseline"]),
            figures.get(canary["version"]),
            margin=self.margin,
            confidence=self.confidence,
            min_clicks=self.min_clicks,
            elapsed=time.time() - canary["started"],
            max_seconds=self.max_seconds,
        )
        if error is not None and decision.decision == contract.WAIT:
            return Decision(contract.WAIT, error, None, None)
        return decision


def add_options(p: argparse.ArgumentParser) -> None:
    env_option(
        p,
        "--canary-fraction",
        CanaryEnv.FRACTION,
        type=float,
        default=0.0,
        help="share of requests a new version serves before it is judged (0: no canary)",
    )
    env_option(
        p,
        "--canary-margin",
        CanaryEnv.MARGIN,
        type=float,
        default=contract.MARGIN,
        help="online AUC the candidate may lose against the committed version",
    )
    env_option(
        p, "--canary-confidence", CanaryEnv.CONFIDENCE, type=float, default=contract.CONFIDENCE
    )
    env_option(
        p,
        "--canary-min-clicks",
        CanaryEnv.MIN_CLICKS,
        type=int,
        default=contract.MIN_CLICKS,
        help="clicked (and unclicked) joined impressions each version needs for a decision",
    )
    env_option(
        p,
        "--canary-max-seconds",
        CanaryEnv.MAX_SECONDS,
        type=float,
        default=float(contract.MAX_SECONDS),
        help="a canary not decided by then is rolled back",
    )
    env_option(
        p,
        "--canary-joiner-url",
        CanaryEnv.JOINER_URL,
        default="",
        help="the feedback joiner's status URL (its online figures)",
    )


def policy_from_args(args: argparse.Namespace) -> CanaryPolicy | None:
    if args.canary_fraction == 0:
        return None
    return CanaryPolicy(
        fraction=args.canary_fraction,
        margin=args.canary_margin,
        confidence=args.canary_confidence,
        min_clicks=args.canary_min_clicks,
        max_seconds=args.canary_max_seconds,
        joiner_url=args.canary_joiner_url,
    )


def mlflow_metrics(decision: Decision, promoted: bool, seconds: float) -> dict[str, float]:
    """The decision's numbers as the candidate's run takes them (MLflow has no null)."""
    figures: dict[str, float | None] = {
        "canary_promoted": 1.0 if promoted else 0.0,
        "canary_seconds": seconds,
        "canary_auc_difference": decision.difference,
        "canary_standard_error": decision.standard_error,
        "canary_z": decision.z,
    }
    for role, q in (("baseline", decision.baseline), ("candidate", decision.candidate)):
        for key in ("auc", "examples", "clicks"):
            figures[f"canary_{role}_{key}"] = (q or {}).get(key)
    return {k: float(v) for k, v in figures.items() if v is not None}


def record_in_mlflow(
    registry: ModelRegistry, version: int, decision: Decision, promoted: bool, seconds: float
) -> str | None:
    """The decision on the candidate's run (metrics at step = version) and its model
    version (tag); the error, if MLflow refused or was away (never holds the transfer)."""
    try:
        run = registry.run_of(version)
        if run is not None:
            metrics = mlflow_metrics(decision, promoted, seconds)
            registry.log_metrics(run, metrics, version, int(time.time() * 1000))
        verdict = "promoted" if promoted else "rolled back"
        registry.tag_version(version, DECISION_TAG, f"{verdict}: {decision.reason}")
    except RegistryError as err:
        log.warning("canary of version %s not recorded in MLflow: %s", version, err)
        return str(err)
    return None
