"""`status`: training progress from MLflow, and the versions serving and cube serve now.

MLflow through its REST API (no mlflow package in the client): the experiment is the
training job's name (components/training.py sets `mlflow_experiment` to it); each trainer
is a run named `trainer-<i>` whose metrics are logged per pass (step = pass).
Serving's `GET /status` gives the dense model version it serves, the cube version it
has seen committed, and its prediction requests of the last minute with their failures by
cause; the transfer's `GET /status` gives cube's committed version and phase, its
`GET /servers` what each cube-server serves. Each part is reported on its own: one that
does not answer says so, the others still print.

Then what users see (`unhealthy`): requests failing, or a cube-server that does not
answer or does not serve the committed version, each an `UNHEALTHY` line (and the JSON's
`unhealthy` list); the command then exits 1, as for a part that does not answer.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from elasticctr_common.alerts import PART_OF_LABEL as ALERT_PART_OF
from elasticctr_common.scrape import PART_OF_VALUE

from .endpoints import auth_header
from .errors import CliError, RefusedError
from .httpjson import DEFAULT_RETRY, Retry, request_json

TRAINING_METRICS = (
    "auc", "loss", "eval_auc", "published", "examples", "examples_per_sec", "bad_lines",
)  # fmt: skip
# Trainer 0's tag listing the versions the publish gate held back, with the reasons.
HELD_BACK_TAG = "held_back_versions"


def call(method: str, url: str, body: Any = None, timeout: float = 10.0,
         headers: dict[str, str] | None = None, service: str = "serving",
         retry: Retry = DEFAULT_RETRY) -> Any:  # fmt: skip
    return request_json(method, url, body, timeout, headers, service, retry)


def training(
    mlflow_url: str, experiment: str, timeout: float = 10.0, retry: Retry = DEFAULT_RETRY
) -> dict[str, Any]:
    base = mlflow_url.rstrip("/") + "/api/2.0/mlflow"
    query = urllib.parse.urlencode({"experiment_name": experiment})
    try:
        found = call(
            "GET", f"{base}/experiments/get-by-name?{query}", None, timeout, None, "MLflow", retry
        )
    except RefusedError as err:
        if "RESOURCE_DOES_NOT_EXIST" in str(err):
            return {"experiment": experiment, "runs": [], "note": "no such experiment yet"}
        raise
    experiment_id = found["experiment"]["experiment_id"]
    search = {
        "experiment_ids": [experiment_id],
        "max_results": 100,
        "order_by": ["attributes.start_time DESC"],
    }
    runs = call("POST", f"{base}/runs/search", search, timeout, None, "MLflow", retry)
    runs = runs.get("runs", [])
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


def serving(
    serving_url: str, token: str | None = None, timeout: float = 10.0, retry: Retry = DEFAULT_RETRY
) -> dict[str, Any]:
    url = serving_url.rstrip("/") + "/status"
    status = call("GET", url, None, timeout, auth_header(token), "serving", retry)
    keep = (
        "version", "cube_committed", "cube_source", "slots", "rejected", "last_error", "requests",
    )  # fmt: skip
    return {k: status.get(k) for k in keep}


def transfer(
    transfer_url: str, timeout: float = 10.0, retry: Retry = DEFAULT_RETRY
) -> dict[str, Any]:
    base = transfer_url.rstrip("/")
    status = call("GET", base + "/status", None, timeout, None, "cube-transfer", retry)
    keep = (
        "committed", "previous", "phase", "kept_versions", "last_error", "shards", "registry",
        "canary",
    )  # fmt: skip
    report = {k: status.get(k) for k in keep}
    try:
        servers = call("GET", base + "/servers", None, timeout, None, "cube-transfer", retry)
        report["servers"] = servers["servers"]
    except (CliError, KeyError, TypeError) as err:
        report["servers"] = {"error": str(err)}
    try:
        history = call("GET", base + "/history", None, timeout, None, "cube-transfer", retry)
        decided = [h for h in history["history"] if h.get("kind") == "canary"]
        report["last_canary"] = _canary_outcome(decided[-1]) if decided else None
    except (CliError, KeyError, TypeError) as err:
        report["last_canary"] = {"error": str(err)}
    return report


def _canary_outcome(entry: dict[str, Any]) -> dict[str, Any]:
    """A canary's end as the transfer's history has it: the verdict and its numbers."""
    canary = entry.get("canary") or {}
    decision = canary.get("decision") or {}
    return {
        "version": entry.get("version"),
        "baseline": canary.get("baseline"),
        "result": entry.get("result"),
        "finished": entry.get("finished"),
        "seconds": canary.get("seconds"),
        "reason": decision.get("reason") or entry.get("error"),
        "decision": decision,
    }


def feedback(
    joiner_url: str, timeout: float = 10.0, retry: Retry = DEFAULT_RETRY
) -> dict[str, Any]:
    """The joiner's partitions and each served version's online quality on joined
    feedback (elasticctr_common.online_eval)."""
    status = call("GET", joiner_url.rstrip("/") + "/status", None, timeout, None, "joiner", retry)
    keep = ("state", "closed", "last_close", "waiting_clicks", "online", "counts")
    return {k: status.get(k) for k in keep}


def alerts(
    prometheus_url: str, timeout: float = 10.0, retry: Retry = DEFAULT_RETRY
) -> dict[str, Any]:
    """The stack's alert rules that fire or wait out their `for` (Prometheus's
    /api/v1/alerts), the project's only (label part_of)."""
    answer = call(
        "GET", prometheus_url.rstrip("/") + "/api/v1/alerts", None, timeout, None,
        "Prometheus", retry,
    )  # fmt: skip
    found: dict[str, list[dict[str, Any]]] = {"firing": [], "pending": []}
    for alert in answer["data"]["alerts"]:
        labels = dict(alert.get("labels") or {})
        if labels.get(ALERT_PART_OF) != PART_OF_VALUE or alert.get("state") not in found:
            continue
        found[alert["state"]].append(
            {
                "alert": labels.pop("alertname", "?"),
                "severity": labels.pop("severity", ""),
                "since": alert.get("activeAt"),
                "summary": (alert.get("annotations") or {}).get("summary", ""),
                "labels": {k: v for k, v in labels.items() if k != ALERT_PART_OF},
            }
        )
    return found


def _figure(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def collect(
    sources: dict[str, tuple[Any, ...]], timeout: float, retry: Retry = DEFAULT_RETRY
) -> dict[str, Any]:
    """{part: result or {"error": ...}} for sources {part: (function, *args)}, and the
    `unhealthy` lines of what the parts say."""
    report: dict[str, Any] = {}
    for part, (function, *args) in sources.items():
        try:
            report[part] = function(*args, timeout=timeout, retry=retry)
        except (CliError, KeyError, TypeError) as err:
            report[part] = {"error": str(err)}
    report["unhealthy"] = unhealthy(report)
    return report


def unhealthy(report: dict[str, Any]) -> list[str]:
    """What users see going wrong: serving's failed requests of its recent window, and
    cube-servers that do not answer or do not serve cube's committed version."""
    found = []
    serve = report.get("serving") or {}
    recent = serve.get("requests") or {}
    if recent.get("failed"):
        causes = ", ".join(f"{c} {n}" for c, n in (recent.get("failure_causes") or {}).items())
        line = (
            f"serving: {recent['failed']} of {recent['requests']} requests failed in the last "
            f"{recent['window_seconds']} s ({causes})"
        )
        last = recent.get("last_failure")
        if last:
            line += f"; last: HTTP {last['status']} {last['message']}"
        found.append(line)
    cube = report.get("cube") or {}
    servers = cube.get("servers")
    if isinstance(servers, dict) and "error" not in cube:
        if "error" in servers:
            found.append(f"cube: the servers could not be read ({servers['error']})")
        else:
            committed = cube.get("committed")
            problems = (_server_problem(n, state, committed) for n, state in servers.items())
            wrong = [p for p in problems if p]
            if wrong:
                during = f" (a rollout is {cube['phase']})" if cube.get("phase") != "idle" else ""
                found.append(f"cube: {'; '.join(wrong)}{during}")
    return found


def settled(report: dict[str, Any]) -> bool:
    """Every part answered, serving serves a model version, nothing is unhealthy."""
    return not waiting_for(report)


def waiting_for(report: dict[str, Any]) -> str:
    """What keeps the report from being settled ("" when it is): the first reason."""
    for part, value in report.items():
        if isinstance(value, dict) and "error" in value:
            return f"{part} does not answer yet ({value['error']})"
    serve = report.get("serving")
    if serve is not None and serve.get("version") is None:
        return "serving has no model version yet (training publishes the first)"
    unhealthy_lines = report.get("unhealthy") or []
    return unhealthy_lines[0] if unhealthy_lines else ""


def _canary_lines(cube: dict[str, Any]) -> list[str]:
    lines = []
    canary = cube.get("canary")
    if isinstance(canary, dict):
        last = (canary.get("last") or {}).get("reason") or "not looked at yet"
        lines.append(
            f"  canary: version {canary['version']} on {100 * canary['fraction']:.0f}% of "
            f"requests beside {canary['baseline']} ({canary['phase']}); {last}"
        )
    outcome = cube.get("last_canary")
    if isinstance(outcome, dict) and "error" not in outcome:
        verdict = {"committed": "promoted", "rolled_back": "rolled back"}.get(outcome["result"])
        lines.append(
            f"  last canary: version {outcome['version']} {verdict} after "
            f"{_figure(outcome['seconds'], '.0f')} s: {outcome['reason']}"
        )
    return lines


def _server_problem(name: str, state: dict[str, Any], committed: Any) -> str | None:
    if "error" in state:
        return f"{name} does not answer ({state['error']})"
    if committed is not None and state.get("cur_version") != committed:
        serves = state.get("cur_version")
        serves_text = "no version" if serves is None else f"version {serves}"
        return f"{name} serves {serves_text}, not the committed {committed}"
    return None


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
            recent = serve.get("requests")  # None: a serving older than the window
            if recent:
                lines.append(
                    f"  requests in the last {recent['window_seconds']} s: "
                    f"{recent['requests']}, failed {recent['failed']}, "
                    f"refused as bad input {recent['client_errors']}"
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
            lines += _canary_lines(cube)
            registry = cube.get("registry")  # None: no MLflow, or a transfer before it
            if registry:
                lines.append(
                    f"  MLflow model {registry['model']}: alias serving -> version "
                    f"{registry['serving']}"
                    + (f" (not moved: {registry['error']})" if registry["error"] else "")
                )
    joined = report.get("feedback")
    if joined is not None:
        if "error" in joined:
            lines.append(f"feedback: unavailable ({joined['error']})")
        else:
            last = joined.get("last_close") or {}
            closed = (
                f"{last['partition']} ({last['examples']:,} examples, {last['clicked']:,} clicked)"
                if last.get("partition")
                else "none yet"
            )
            lines.append(f"feedback: joiner {joined['state']}, last partition closed {closed}")
            counts = joined.get("counts")
            if counts:  # the joiner's own since its start; what it skipped, by kind
                bad = sum((counts.get("bad") or {}).values())
                lines.append(
                    f"  since its start: {counts['impressions']:,} impressions,"
                    f" {counts['clicks']:,} clicks; skipped: {counts['late_clicks']:,} late"
                    f" clicks, {counts['unknown_clicks']:,} unknown,"
                    f" {counts['duplicate_clicks']:,} duplicate, {bad:,} bad records"
                )
            for version, q in sorted((joined.get("online") or {}).items(), key=lambda i: int(i[0])):
                lines.append(
                    f"  version {version} online: AUC {_figure(q['auc'], '.4f')}, calibration "
                    f"{_figure(q['calibration'], '.3f')}, log loss {_figure(q['log_loss'], '.4f')}"
                    f" on {q['examples']:,} examples ({q['clicks']:,} clicked)"
                )
    alerting = report.get("alerts")
    if alerting is not None:
        if "error" in alerting:
            lines.append(f"alerts: unavailable ({alerting['error']})")
        else:
            firing, pending = alerting["firing"], alerting["pending"]
            lines.append(f"alerts: {len(firing)} firing, {len(pending)} pending")
            for alert in firing:
                where = ", ".join(f"{k}={v}" for k, v in sorted(alert["labels"].items()))
                lines.append(
                    f"  FIRING {alert['alert']} ({alert['severity']}; {where}) since "
                    f"{alert['since']}: {alert['summary']}"
                )
    lines += [f"UNHEALTHY {line}" for line in report.get("unhealthy") or []]
    return "\n".join(lines)
