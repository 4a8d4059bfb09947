"""`status`: training progress from MLflow, and the versions serving and cube serve now.

MLflow through its REST API (no mlflow package in the client): the experiment is the
training job's name (components/training.py sets `mlflow_experiment` to it); each trainer
is a run named `trainer-<i>` whose metrics are logged per pass (step = pass).
Serving's `GET /status` gives the dense model version it serves and the cube version it
has seen committed; the transfer's `GET /status` gives cube's committed version and phase.
Each part is reported on its own: one that does not answer says so, the others still print.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from .endpoints import auth_header, unreachable_hint

TRAINING_METRICS = (
    "auc", "loss", "eval_auc", "published", "examples", "examples_per_sec", "bad_lines",
)  # fmt: skip
# Trainer 0's tag listing the versions the publish gate held back, with the reasons.
HELD_BACK_TAG = "held_back_versions"


def call(method: str, url: str, body: Any = None, timeout: float = 10.0,
         headers: dict[str, str] | None = None) -> Any:  # fmt: skip
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as err:
        raise RuntimeError(f"{url}: HTTP {err.code}: {err.read()[:300]!r}") from None
    except (OSError, ValueError) as err:
        raise RuntimeError(f"{url}: {err}{unreachable_hint(url)}") from None


def training(mlflow_url: str, experiment: str, timeout: float = 10.0) -> dict[str, Any]:
    base = mlflow_url.rstrip("/") + "/api/2.0/mlflow"
    query = urllib.parse.urlencode({"experiment_name": experiment})
    try:
        found = call("GET", f"{base}/experiments/get-by-name?{query}", timeout=timeout)
    except RuntimeError as err:
        if "RESOURCE_DOES_NOT_EXIST" in str(err):
            return {"experiment": experiment, "runs": [], "note": "no such experiment yet"}
        raise
    experiment_id = found["experiment"]["experiment_id"]
    search = {
        "experiment_ids": [experiment_id],
        "max_results": 100,
        "order_by": ["attributes.start_time DESC"],
    }
    runs = call("POST", f"{base}/runs/search", search, timeout).get("runs", [])
    out = []
    for run in runs:
        info, metrics = run["info"], run.get("data", {}).get("metrics", [])
        latest = {m["key"]: m for m in metrics}
        tags = {t["key"]: t["value"] for t in run.get("data", {}).get("tags", [])}
        out.append(
            {
                "held_back": tags.get(HELD_BACK_TAG),
                "run": info.get("run_name") or info["run_id"],
                "status": info.get("status"),
                "start_time": info.get("start_time"),
                "pass": max((int(m.get("step", 0)) for m in metrics), default=None),
                "metrics": {k: latest[k]["value"] for k in TRAINING_METRICS if k in latest},
            }
        )
    return {"experiment": experiment, "runs": sorted(out, key=lambda r: r["run"])}


def serving(serving_url: str, token: str | None = None, timeout: float = 10.0) -> dict[str, Any]:
    url = serving_url.rstrip("/") + "/status"
    status = call("GET", url, timeout=timeout, headers=auth_header(token))
    keep = ("version", "cube_committed", "cube_source", "slots", "rejected", "last_error")
    return {k: status.get(k) for k in keep}


def transfer(transfer_url: str, timeout: float = 10.0) -> dict[str, Any]:
    status = call("GET", transfer_url.rstrip("/") + "/status", timeout=timeout)
    keep = ("committed", "previous", "phase", "kept_versions", "last_error", "shards")
    return {k: status.get(k) for k in keep}


def collect(sources: dict[str, tuple[Any, ...]], timeout: float) -> dict[str, Any]:
    """{part: result or {"error": ...}} for sources {part: (function, *args)}."""
    report: dict[str, Any] = {}
    for part, (function, *args) in sources.items():
        try:
            report[part] = function(*args, timeout=timeout)
        except (RuntimeError, KeyError, TypeError) as err:
            report[part] = {"error": str(err)}
    return report


def render(report: dict[str, Any]) -> str:
    lines = []
    train = report.get("training")
    if train is not None:
        if "error" in train:
            lines.append(f"training: unavailable ({train['error']})")
        else:
            lines.append(f"training (MLflow experiment {train['experiment']}):")
            for run in train["runs"]:
                metrics = " ".join(
                    f"{k}={v:.4g}" for k, v in run["metrics"].items() if isinstance(v, float)
                )
                lines.append(f"  {run['run']}: {run['status']}, pass {run['pass']}  {metrics}")
                if run.get("held_back"):
                    lines.append(f"    versions held back (not published): {run['held_back']}")
            if not train["runs"]:
                lines.append("  no runs yet")
    serve = report.get("serving")
    if serve is not None:
        if "error" in serve:
            lines.append(f"serving: unavailable ({serve['error']})")
        else:
            rejected = ", ".join(f"{v}: {r['error']}" for v, r in (serve["rejected"] or {}).items())
            lines.append(
                f"serving: model version {serve['version']}, cube committed "
                f"{serve['cube_committed']} (from {serve['cube_source'] or '?'})"
                + (f"; rejected versions: {rejected}" if rejected else "")
            )
    cube = report.get("cube")
    if cube is not None:
        if "error" in cube:
            lines.append(f"cube: unavailable ({cube['error']})")
        else:
            lines.append(
                f"cube: committed {cube['committed']} (previous {cube['previous']}), phase "
                f"{cube['phase']}, kept {cube['kept_versions']}, {cube['shards']} shards"
                + (f", last error: {cube['last_error']}" if cube["last_error"] else "")
            )
    return "\n".join(lines)
