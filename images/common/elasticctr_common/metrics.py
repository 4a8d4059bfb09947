"""The metrics contract: every metric family each long-running part exposes, with its type,
help, labels and buckets, and where Prometheus scrapes it (the component's pods, port and
path). Written once, here: the images build their registries from it (exposition.py; the
cube-server, in Rust, writes the same names and tests/images/common/test_metrics_contract.py
reads them back from the live process), and scrape.py Prometheus's jobs.

Prometheus conventions: base units (seconds, bytes), counters end in `_total`, a timestamp
is `_timestamp_seconds` (Unix time), a version gauge holds the version id (-1: none).
Labels are named here; a label's values are the part's own (a cause, a phase, a version).

No prometheus_client here: the program imports this module, the images bring the client.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from .contract import (
    CUBE_AGENT_PORT,
    CUBE_SERVER_PORT,
    CUBE_TRANSFER_PORT,
    SERVING_PORT,
    TRAINER_METRICS_PORT,
)
from .feedback import JOINER_PORT

COUNTER: Final = "counter"
GAUGE: Final = "gauge"
HISTOGRAM: Final = "histogram"
TYPES: Final = (COUNTER, GAUGE, HISTOGRAM)
METRICS_PATH: Final = "/metrics"

LATENCY_BUCKETS: Final = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
# A cube seek is answered in microseconds to a millisecond or so.
SEEK_BUCKETS: Final = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5,
)  # fmt: skip
BATCH_BUCKETS: Final = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
# Rollouts, prepares, passes: seconds to an hour.
LONG_BUCKETS: Final = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 3600.0)

_NAME = re.compile(r"elasticctr_[a-z][a-z0-9_]*[a-z0-9]")
_LABEL = re.compile(r"[a-z][a-z0-9_]*")
_UNITS = ("_seconds", "_bytes", "_examples", "_keys", "_records")


@dataclass(frozen=True)
class Family:
    """One metric family as exposed: `name` is the sample name of a counter (with
    `_total`) or gauge, the base name of a histogram (its samples add `_bucket`, `_sum`,
    `_count`)."""

    name: str
    type: str
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        problems = []
        if not _NAME.fullmatch(self.name):
            problems.append("the name must be elasticctr_<lowercase, digits, _>")
        if self.type not in TYPES:
            problems.append(f"type {self.type!r} is not one of {', '.join(TYPES)}")
        if (self.type == COUNTER) != self.name.endswith("_total"):
            problems.append("counters, and only they, end in _total")
        if self.type == HISTOGRAM and not (self.buckets and self.name.endswith(_UNITS)):
            problems.append(f"a histogram needs buckets and a unit suffix ({', '.join(_UNITS)})")
        if self.type != HISTOGRAM and self.buckets:
            problems.append("only histograms have buckets")
        if list(self.buckets) != sorted(set(self.buckets)):
            problems.append("buckets must increase")
        bad = [n for n in self.labels if not _LABEL.fullmatch(n) or n in ("le", "quantile")]
        if bad or len(set(self.labels)) != len(self.labels):
            problems.append(f"labels {list(self.labels)}: lowercase, unique, not le/quantile")
        if not self.help:
            problems.append("help must say what it counts")
        if problems:
            raise ValueError(f"metric family {self.name!r}: " + "; ".join(problems))

    @property
    def family_name(self) -> str:
        """The name a text parser reports for the family (a counter's without `_total`)."""
        return self.name.removesuffix("_total") if self.type == COUNTER else self.name


@dataclass(frozen=True)
class Endpoint:
    """Where one kind of process exposes its families: `port` (the process's HTTP port),
    `path`, in the pods of the stack's `component` (their label app.kubernetes.io/component).
    Every family's name starts with `prefix`; `endpoint["x_total"]` is family
    `<prefix>x_total`."""

    process: str
    port: int
    prefix: str
    families: tuple[Family, ...]
    path: str = METRICS_PATH
    component: str = field(kw_only=True)
    by_name: dict[str, Family] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name = {f.name.removeprefix(self.prefix): f for f in self.families}
        if len(by_name) != len(self.families):
            raise ValueError(f"{self.process}: a metric family is listed twice")
        outside = [f.name for f in self.families if not f.name.startswith(self.prefix)]
        if outside:
            raise ValueError(f"{self.process}: families {outside} do not start with {self.prefix}")
        object.__setattr__(self, "by_name", by_name)

    def __getitem__(self, short: str) -> Family:
        """The family named `prefix + short`."""
        try:
            return self.by_name[short]
        except KeyError:
            raise KeyError(f"{self.process} has no metric family {self.prefix}{short}") from None

    def problems(self, parsed: Iterable[Any]) -> list[str]:
        """What in `parsed` (metric families from prometheus_client's text parser: `.name`,
        `.type`, `.samples` with `.name`, `.labels`) breaks this contract: a family not
        listed, another type, other labels. Families listed but absent are not problems
        here (a labelled family has no sample until its first event); `missing` says."""
        known = {f.family_name: f for f in self.families}
        out = []
        for fam in parsed:
            want = known.get(fam.name)
            if want is None:
                out.append(f"{self.process}: family {fam.name} ({fam.type}) is not in the contract")
                continue
            if fam.type != want.type:
                out.append(
                    f"{self.process}: {fam.name} is a {fam.type}, the contract says {want.type}"
                )
            if want.type == HISTOGRAM:
                bounds = {float(s.labels["le"]) for s in fam.samples if "le" in s.labels}
                if bounds and bounds != {*want.buckets, float("inf")}:
                    out.append(
                        f"{self.process}: {fam.name} has buckets {sorted(bounds)}, the "
                        f"contract says {[*want.buckets, float('inf')]}"
                    )
            for sample in fam.samples:
                labels = set(sample.labels) - ({"le"} if want.type == HISTOGRAM else set())
                if labels != set(want.labels):
                    out.append(
                        f"{self.process}: {sample.name} has labels {sorted(labels)}, the "
                        f"contract says {sorted(want.labels)}"
                    )
                    break
        return out

    def missing(self, parsed: Iterable[Any]) -> list[str]:
        """Families of this contract `parsed` has no family for."""
        seen = {fam.name for fam in parsed}
        return [f.name for f in self.families if f.family_name not in seen]


def _f(
    name: str, type_: str, help_: str, labels: tuple[str, ...] = (), buckets: Iterable[float] = ()
) -> Family:
    return Family(name, type_, help_, labels, tuple(buckets))


# -- serving (elasticctr_serving/metrics.py builds these; the port is its API's) --------------
_S = "elasticctr_serving_"
# `outcome` of a logged impression or a click (the feedback loop): what became of it.
FEEDBACK_OUTCOMES: Final = ("queued", "sampled_out", "dropped_buffer_full", "delivered", "failed")
SERVING: Final = Endpoint(
    "serving",
    SERVING_PORT,
    _S,
    (
        _f(
            _S + "requests_total",
            COUNTER,
            "HTTP requests by path and status code",
            ("path", "code"),
        ),
        _f(
            _S + "request_seconds", HISTOGRAM, "request latency by path", ("path",), LATENCY_BUCKETS
        ),
        _f(_S + "examples_total", COUNTER, "instances predicted"),
        _f(_S + "batches_total", COUNTER, "predictor batches run"),
        _f(_S + "batch_examples", HISTOGRAM, "instances per predictor batch", (), BATCH_BUCKETS),
        _f(_S + "cube_keys_total", COUNTER, "distinct sparse keys looked up"),
        _f(_S + "cube_missing_keys_total", COUNTER, "looked-up keys cube does not hold"),
        _f(_S + "stage_seconds_total", COUNTER, "time spent per stage", ("stage",)),
        _f(_S + "model_version", GAUGE, "version being served (-1: none)"),
        _f(_S + "cube_committed_version", GAUGE, "cube's committed version as last seen"),
        _f(_S + "model_switches_total", COUNTER, "model versions switched to"),
        _f(_S + "canary_version", GAUGE, "version on trial scoring the canary's share (-1: none)"),
        _f(_S + "canary_examples_total", COUNTER, "instances the canary version predicted"),
        _f(_S + "failures_total", COUNTER, "requests answered 5xx, by cause", ("cause",)),
        _f(
            _S + "isolated_requests_total", COUNTER, "requests rerun alone after their batch failed"
        ),
        _f(
            _S + "model_rejections_total", COUNTER, "model versions that failed to load or validate"
        ),
        _f(_S + "failed_instances_total", COUNTER, "instances answered with an error", ("cause",)),
        _f(_S + "impressions_total", COUNTER, "impressions by outcome", ("outcome",)),
        _f(_S + "clicks_total", COUNTER, "clicks received by outcome", ("outcome",)),
    ),
    component="serving",
)

# -- cube-server (Rust: images/cube/server/src/metrics.rs), on its data port --------------
_CS = "elasticctr_cube_server_"
# `protocol` of a seek: the binary batch protocol or the JSON one over HTTP.
SEEK_PROTOCOLS: Final = ("binary", "http")
# `slot` of a held version: the one seeks read, or the one loaded beside it.
VERSION_SLOTS: Final = ("current", "background")
CUBE_SERVER: Final = Endpoint(
    "cube-server",
    CUBE_SERVER_PORT,
    _CS,
    (
        _f(_CS + "seeks_total", COUNTER, "seek requests, by protocol", ("protocol",)),
        _f(_CS + "seek_keys_total", COUNTER, "keys looked up by seeks"),
        _f(_CS + "seek_missing_keys_total", COUNTER, "looked-up keys the version does not hold"),
        _f(_CS + "errors_total", COUNTER, "requests answered with an error (seeks and control)"),
        _f(
            _CS + "seek_seconds",
            HISTOGRAM,
            "time from a seek's request read to its answer written, by protocol",
            ("protocol",),
            SEEK_BUCKETS,
        ),
        _f(_CS + "version", GAUGE, "version held in each slot (-1: none)", ("slot",)),
        _f(
            _CS + "keys",
            GAUGE,
            "keys in the held version's files (base and deltas), by slot",
            ("slot",),
        ),
        _f(_CS + "mapped_bytes", GAUGE, "bytes of the held version's mapped files", ("slot",)),
        _f(_CS + "resident_memory_bytes", GAUGE, "the process's resident memory"),
        _f(_CS + "ready", GAUGE, "1 when a version is switched in and the server is not stopping"),
        _f(_CS + "connections", GAUGE, "open data-port connections"),
        _f(_CS + "loads_total", COUNTER, "background loads finished, by result", ("result",)),
    ),
    component="cube",
)

# -- cube-agent (elasticctr_cube/agent.py), on its port -----------------------------------
_CA = "elasticctr_cube_agent_"
# Why a prepare failed: the step it was in.
AGENT_FAILURE_CAUSES: Final = ("start", "fetch", "verify", "load", "switch")
PREPARE_RESULTS: Final = ("ready", "failed", "aborted")
PREPARE_STATES: Final = ("queued", "fetching", "verifying", "loading")
CUBE_AGENT: Final = Endpoint(
    "cube-agent",
    CUBE_AGENT_PORT,
    _CA,
    (
        _f(
            _CA + "prepares_total", COUNTER, "prepares (fetch, verify, load) by result", ("result",)
        ),
        _f(
            _CA + "prepare_seconds",
            HISTOGRAM,
            "prepare durations by result",
            ("result",),
            LONG_BUCKETS,
        ),
        _f(_CA + "failures_total", COUNTER, "failed prepares by the step that failed", ("cause",)),
        _f(_CA + "prepares_in_progress", GAUGE, "prepares under way, by state", ("state",)),
        _f(_CA + "last_success_timestamp_seconds", GAUGE, "when a prepare last ended ready"),
        _f(_CA + "prepared_version", GAUGE, "the version last prepared (-1: none)"),
        _f(_CA + "restores_total", COUNTER, "committed versions restored on an empty server"),
    ),
    component="cube",
)

# -- cube-transfer (elasticctr_cube/transfer.py), on its reader port -----------------------
_CT = "elasticctr_cube_transfer_"
# The rollout phase (rollout.py's, plus idle, building and canary: a version on trial
# between rollouts); exactly one is 1. A rollout shows committed or aborted for the moment
# between its end and its record.
ROLLOUT_PHASES: Final = (
    "idle", "building", "preparing", "holding", "draining", "switching", "reverting",
    "aborting", "committed", "aborted", "canary",
)  # fmt: skip
ROLLOUT_KINDS: Final = ("donefile", "retry", "rollback", "layout", "canary")
ROLLOUT_RESULTS: Final = ("committed", "aborted", "rejected", "rolled_back")
# Why a rollout did not commit: its build was refused (never retried), storage failed
# while building or publishing, an agent or server failed the rollout, or the committed
# version could not be built for a new layout, or the canary was rolled back.
TRANSFER_FAILURE_CAUSES: Final = ("build", "storage", "rollout", "layout", "canary")
CUBE_TRANSFER: Final = Endpoint(
    "cube-transfer",
    CUBE_TRANSFER_PORT,
    _CT,
    (
        _f(_CT + "rollout_phase", GAUGE, "1 for the phase the transfer is in", ("phase",)),
        _f(_CT + "rollouts_total", COUNTER, "rollouts by kind and result", ("kind", "result")),
        _f(
            _CT + "rollout_seconds",
            HISTOGRAM,
            "rollout durations by result",
            ("result",),
            LONG_BUCKETS,
        ),
        _f(_CT + "failures_total", COUNTER, "rollouts not committed, by cause", ("cause",)),
        _f(_CT + "last_success_timestamp_seconds", GAUGE, "when a rollout last committed"),
        _f(_CT + "versions_built_total", COUNTER, "cube versions built and published", ("kind",)),
        _f(_CT + "committed_version", GAUGE, "the committed version (-1: none)"),
        _f(_CT + "canary_version", GAUGE, "the version on trial as a canary (-1: none)"),
        _f(_CT + "kept_versions", GAUGE, "published versions kept for rollback"),
        _f(_CT + "shards", GAUGE, "shards of the layout"),
        _f(
            _CT + "ready_shards",
            GAUGE,
            "shards with a ready server serving the committed version, at the scrape",
        ),
    ),
    component="cube-transfer",
)

# -- the trainer (elasticctr_trainer), a port per trainer pod while it runs ----------------
_T = "elasticctr_trainer_"
TRAINER_VERSION_OUTCOMES: Final = ("published", "held_back", "refused")
TRAINER: Final = Endpoint(
    "trainer",
    TRAINER_METRICS_PORT,
    _T,
    (
        _f(_T + "pass", GAUGE, "the last pass this trainer finished"),
        _f(_T + "examples_total", COUNTER, "examples this trainer trained"),
        _f(_T + "examples_per_second", GAUGE, "examples a second in the last pass"),
        _f(_T + "loss", GAUGE, "mean training loss of the last pass"),
        _f(_T + "auc", GAUGE, "training AUC of the last pass"),
        _f(_T + "eval_auc", GAUGE, "held-out AUC of the last version (trainer 0)"),
        _f(_T + "pass_seconds", HISTOGRAM, "training time of a pass", (), LONG_BUCKETS),
        _f(_T + "lines_total", COUNTER, "data lines this trainer read"),
        _f(_T + "bad_lines_total", COUNTER, "malformed lines counted and skipped"),
        _f(_T + "failed_files_total", COUNTER, "data files that were not lines of text"),
        _f(_T + "newest_partition_end_timestamp_seconds", GAUGE, "end of the newest data trained"),
        _f(_T + "data_lag_seconds", GAUGE, "now minus the end of the newest data trained"),
        _f(
            _T + "versions_total",
            COUNTER,
            "versions exported (trainer 0), by outcome",
            ("outcome",),
        ),
    ),
    component="trainer",
)

# -- the joiner (elasticctr_joiner), on its status port ------------------------------------
_J = "elasticctr_joiner_"
JOINER_DROPPED_IMPRESSIONS: Final = ("duplicate", "future")
JOINER_DROPPED_CLICKS: Final = ("duplicate", "unknown")
JOINER: Final = Endpoint(
    "joiner",
    JOINER_PORT,
    _J,
    (
        _f(_J + "impressions_total", COUNTER, "impressions taken into a partition"),
        _f(_J + "late_impressions_total", COUNTER, "impressions whose partition had closed"),
        _f(_J + "dropped_impressions_total", COUNTER, "impressions dropped", ("reason",)),
        _f(_J + "clicks_total", COUNTER, "clicks read"),
        _f(_J + "late_clicks_total", COUNTER, "clicks after their impression's partition closed"),
        _f(_J + "dropped_clicks_total", COUNTER, "clicks dropped", ("reason",)),
        _f(
            _J + "bad_records_total",
            COUNTER,
            "malformed records, by kind and reason",
            ("kind", "reason"),
        ),
        _f(_J + "examples_total", COUNTER, "joined examples written"),
        _f(_J + "clicked_examples_total", COUNTER, "joined examples written with a click"),
        _f(_J + "partitions_total", COUNTER, "partitions closed"),
        _f(
            _J + "newest_partition_end_timestamp_seconds",
            GAUGE,
            "end of the newest closed partition",
        ),
        _f(_J + "close_lag_seconds", GAUGE, "from the last closed partition's end to its close"),
        _f(
            _J + "consumer_lag_records",
            GAUGE,
            "records behind the high watermark",
            ("topic", "partition"),
        ),
        _f(_J + "online_auc", GAUGE, "AUC of the served scores on the window", ("version",)),
        _f(
            _J + "online_calibration",
            GAUGE,
            "mean score / observed CTR on the window",
            ("version",),
        ),
        _f(
            _J + "online_log_loss",
            GAUGE,
            "log loss of the served scores on the window",
            ("version",),
        ),
        _f(_J + "online_window_examples", GAUGE, "joined examples in the window", ("version",)),
        _f(_J + "online_window_clicks", GAUGE, "clicked examples in the window", ("version",)),
    ),
    component="joiner",
)

ENDPOINTS: Final = {
    e.process: e for e in (SERVING, CUBE_SERVER, CUBE_AGENT, CUBE_TRANSFER, TRAINER, JOINER)
}

_SERIES = re.compile(r"\belasticctr_[a-z0-9_]+")


def queryable_series() -> set[str]:
    """The series names a query of the parts' metrics may read: counters and gauges by
    their names, histograms through their `_bucket` series (histogram_quantile's)."""
    return {
        family.name + ("_bucket" if family.type == HISTOGRAM else "")
        for endpoint in ENDPOINTS.values()
        for family in endpoint.families
    }


def series_in(promql: str) -> set[str]:
    """The elasticctr series names a PromQL expression reads."""
    return set(_SERIES.findall(promql))
