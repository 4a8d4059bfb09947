"""python -m elasticctr_client predict|click|logs|status|upload (docs/serving.md, "Client").

Endpoints come from flags, else from `pulumi stack output --json` of --stack (or the
current stack) run in the current directory. Serving's bearer token (serving.auth token)
likewise: --token, else $ELASTICCTR_SERVING_TOKEN, else the secret stack output
serving_token.

A failure is one line on stderr (--debug: with its traceback); exit codes: 0 done, 1 the
result is bad (failed examples, unhealthy parts), 2 usage, 3 a local file, 4 no endpoint,
5 credentials, 6 a service does not answer, 7 a service refused, 70 a bug.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from elasticctr_common.datafiles import BadFile, data_lines
from elasticctr_common.stack_outputs import (
    BUCKET,
    CUBE_TRANSFER_URL,
    HDFS_ADDRESS,
    JOINER_URL,
    KUBECONFIG,
    MLFLOW_URL,
    NAMESPACE,
    PROMETHEUS_URL,
    SERVING_TOKEN,
    SERVING_URL,
    STORAGE_ENDPOINT,
    TRAINING_JOB,
)

from .endpoints import TOKEN_ENV, StackOutputs, http_url
from .errors import (
    CliError,
    CredentialsError,
    EndpointError,
    ExitCode,
    InputError,
    UsageError,
    one_line,
)
from .forward import Forwarder
from .httpjson import Retry, request_json


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(text)
    return value


def retry_count(text: str) -> int:
    value = int(text)
    if not 0 <= value <= MAX_RETRIES:
        raise ValueError(text)
    return value


MAX_RETRIES = 10
positive_int.__name__ = "integer >= 1"
retry_count.__name__ = f"integer from 0 to {MAX_RETRIES}"  # argparse names the type in its message
positive_float.__name__ = "number > 0"


class Parser(argparse.ArgumentParser):
    """argparse with its usage errors on one line, like the client's other failures."""

    def error(self, message: str) -> NoReturn:
        self.exit(ExitCode.USAGE, f"error: {self.prog}: {one_line(message)} (--help lists them)\n")


def build_parser(
    prog: str = "python -m elasticctr_client", epilog: str | None = None
) -> argparse.ArgumentParser:
    p = Parser(
        prog=prog,
        description=__doc__,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--stack", help="Pulumi stack whose outputs give the endpoints")
    p.add_argument("--timeout", type=positive_float, default=30.0, help="seconds per HTTP call")
    p.add_argument(
        "--retries",
        type=retry_count,
        default=Retry.retries,
        help="times an HTTP call is sent again after a refused connection or a 502/503/504, "
        "waiting 0.5 s, 1 s, 2 s, ... (at most 8 s) between them",
    )
    p.add_argument("--debug", action="store_true", help="show the traceback of a failure")
    p.add_argument(
        "--token",
        help=f"serving's bearer token (default: ${TOKEN_ENV}, else stack output serving_token)",
    )
    commands = p.add_subparsers(dest="command", required=True)

    pr = commands.add_parser("predict", help="predict example lines; print the AUC")
    pr.add_argument("files", nargs="+", help="files of example lines ('-': stdin)")
    pr.add_argument(
        "--format",
        choices=("elasticctr", "paddlerec"),
        help="the lines' format: ElasticCTR lines or PaddleRec's slot format (default: the "
        "served model's)",
    )
    pr.add_argument("--serving-url")
    pr.add_argument("--batch-size", type=positive_int, default=64)
    pr.add_argument("--output", help="write line, label, prob1, version rows (TSV) here")
    pr.add_argument("--no-progress", action="store_true")
    pr.add_argument("--json", action="store_true", help="print the summary as JSON")

    ck = commands.add_parser(
        "click", help="send clicks on answered instances (the feedback loop, docs/feedback.md)"
    )
    ck.add_argument(
        "clicks", nargs="+", metavar="REQUEST_ID:INSTANCE",
        help="the request_id a prediction answered with, and the instance's index in it",
    )  # fmt: skip
    ck.add_argument("--serving-url")

    lg = commands.add_parser(
        "logs", help="follow trainer 0, cube-transfer and failed pods of the job"
    )
    lg.add_argument("--namespace")
    lg.add_argument("--job", help="training job name (stack output training_job)")
    lg.add_argument("--kubeconfig", help="default: stack output kubeconfig, $KUBECONFIG")
    lg.add_argument("--context")
    lg.add_argument("--tail", type=int, default=100, help="earlier lines to show first")
    lg.add_argument("--wait", type=float, default=300.0, help="seconds to wait for a pod")
    lg.add_argument(
        "--json", action="store_true", help='one {"source": ..., "line": ...} object a line'
    )

    st = commands.add_parser("status", help="training progress and versions served")
    st.add_argument("--mlflow-url")
    st.add_argument("--experiment", help="MLflow experiment (default: the training job)")
    st.add_argument("--serving-url")
    st.add_argument("--transfer-url")
    st.add_argument("--joiner-url", help="the feedback joiner (default: stack output joiner_url)")
    st.add_argument(
        "--prometheus-url",
        help="the stack's Prometheus, for its alerts (default: stack output prometheus_url)",
    )
    st.add_argument("--json", action="store_true", help="print JSON")
    st.add_argument(
        "--wait",
        type=positive_float,
        metavar="SECONDS",
        help="ask again every 5 s, up to SECONDS, until serving serves a model version and "
        "nothing is unhealthy (a new stack's first model); then report",
    )

    db = commands.add_parser(
        "dashboard",
        help="print a Grafana dashboard (JSON, for import) of every metric the parts expose",
    )
    db.add_argument("--out", help="write it to this file instead")
    db.add_argument("--title", default="elasticctr", help="the dashboard's title")

    al = commands.add_parser(
        "alerts", help="print Prometheus alert rules (YAML) for the stack's parts"
    )
    al.add_argument("--out", help="write them to this file instead")
    al.add_argument(
        "--operator",
        metavar="NAMESPACE",
        help="as a PrometheusRule object (Prometheus Operator) in this namespace",
    )
    al.add_argument(
        "--for",
        dest="alert_for",
        action="append",
        default=[],
        metavar="ALERT=DURATION",
        help="how long ALERT's condition must hold before it fires (the stack's "
        "monitoring.alert_for); repeatable",
    )

    sc = commands.add_parser(
        "scrape-config",
        help="print Prometheus scrape jobs (YAML) for a stack's parts, or PodMonitors",
    )
    sc.add_argument("namespace", help="the stack's namespace (config namespace)")
    sc.add_argument("--out", help="write them to this file instead")
    sc.add_argument("--interval", type=positive_int, default=30, help="seconds between scrapes")
    sc.add_argument(
        "--token-file",
        help="the file holding the serving token (stack output serving_token), for a stack "
        "with serving.auth token",
    )
    sc.add_argument(
        "--operator",
        action="store_true",
        help="as PodMonitor objects (Prometheus Operator) in the stack's namespace",
    )

    up = commands.add_parser("upload", help="upload hour directories and slot.conf")
    up.add_argument("source", help="local directory of YYYYMMDD/HH hour directories")
    up.add_argument("--dest", help="storage URI (default: the stack's dataset location)")
    up.add_argument(
        "--data-source",
        choices=("hdfs", "storage"),
        default="hdfs",
        help="where the stack's trainers read (config data.source)",
    )
    up.add_argument("--dataset-path", default="/train_data", help="config data.dataset_path")
    up.add_argument("--slot-conf", help="slot.conf to upload beside the hours")
    up.add_argument("--json", action="store_true", help="print the summary as JSON")
    return p


def main(
    argv: list[str] | None = None,
    prog: str = "python -m elasticctr_client",
    epilog: str | None = None,
) -> int:
    args = build_parser(prog, epilog).parse_args(argv)
    needs_stack = {
        "predict": not args.serving_url if args.command == "predict" else False,
        "click": not args.serving_url if args.command == "click" else False,
        "logs": args.command == "logs" and not (args.namespace and args.job),
        "status": args.command == "status"
        and not (args.mlflow_url and args.serving_url and args.transfer_url),
        "upload": args.command == "upload" and not args.dest,
        "dashboard": False,
        "alerts": False,
        "scrape-config": False,
    }[args.command]
    try:
        outputs = _outputs(args) if needs_stack else StackOutputs({}, args.stack)
        stack_kubeconfig = outputs.values.get(KUBECONFIG)
        with Forwarder(str(stack_kubeconfig) if stack_kubeconfig else None) as forwarder:
            return COMMANDS[args.command](args, outputs, forwarder)
    except CliError as err:
        return _fail(args, one_line(str(err)), err.code)
    except KeyboardInterrupt:
        return _fail(args, "interrupted", ExitCode.INTERRUPTED)
    except Exception as err:  # not one the client knows: still one line, the trace on --debug
        message = f"{type(err).__name__}: {one_line(str(err))}"
        return _fail(args, f"{message} (unexpected: --debug shows where)", ExitCode.BUG)


def _fail(args: argparse.Namespace, message: str, code: int) -> int:
    if args.debug:
        traceback.print_exc()
    print(f"error: {message}", file=sys.stderr)
    return code


def _outputs(args: argparse.Namespace) -> StackOutputs:
    """The stack's outputs. `status` given some endpoints as flags reports on those even
    when the stack cannot be read (no login, no stack here): a warning, not an error."""
    try:
        return StackOutputs.read(args.stack)
    except EndpointError as err:
        if args.command != "status":
            raise
        flags = (
            args.mlflow_url,
            args.serving_url,
            args.transfer_url,
            args.joiner_url,
            args.prometheus_url,
        )
        if not any(flags) or args.stack:
            raise
        print(f"warning: {err}; reporting on the endpoints given as flags", file=sys.stderr)
        return StackOutputs({}, args.stack)


def _url(forwarder: Forwarder, url: str, flag: str) -> str:
    """`url` (a flag's or a stack output's) checked, and reachable from here."""
    return forwarder.reach(http_url(url, flag), flag)


def run_predict(args: argparse.Namespace, outputs: StackOutputs, forwarder: Forwarder) -> int:
    from .predict import predict, report, summary_json

    url = outputs.get(args.serving_url, SERVING_URL, "--serving-url")
    url = _url(forwarder, url, "--serving-url")
    token = _token(args, outputs)
    paths = [f for f in args.files if f != "-"]
    total = sum(1 for line in _lines(paths) if line.strip())  # every file read before sending
    lines = _lines(args.files)
    try:
        out = open(args.output, "w") if args.output else None  # noqa: SIM115 (closed below)
    except OSError as err:
        raise InputError(
            f"--output {args.output}: {_reason(err)}; pass a file in a writable directory"
        ) from None
    started = time.monotonic()
    try:
        summary = predict(
            url,
            lines,
            args.batch_size,
            args.timeout,
            total or None,
            out,
            progress=not args.no_progress,
            token=token,
            data_format=args.format,
            retry=Retry(args.retries),
        )
    finally:
        if out is not None:
            out.close()
    seconds = time.monotonic() - started
    if args.json:
        print(json.dumps(summary_json(summary, seconds), indent=1))
    else:
        report(summary, seconds)
    return 0 if summary.examples and not summary.failed else 1


MAX_CLICKS = 1000  # per request (serving's limit)


def run_click(args: argparse.Namespace, outputs: StackOutputs, forwarder: Forwarder) -> int:
    from elasticctr_common.feedback import CLICK_PATH, valid_request_id

    from .endpoints import auth_header

    clicks = []
    for item in args.clicks:
        request_id, _, index = item.rpartition(":")
        if not valid_request_id(request_id) or not index.isdigit():
            raise UsageError(
                f"{item!r} is not REQUEST_ID:INSTANCE (the request id an answer carried, a "
                "colon, the instance's index from 0)"
            )
        clicks.append({"request_id": request_id, "instance": int(index)})
    url = _url(
        forwarder, outputs.get(args.serving_url, SERVING_URL, "--serving-url"), "--serving-url"
    )
    url = url.rstrip("/") + CLICK_PATH
    token = _token(args, outputs)
    accepted = 0
    try:
        for start in range(0, len(clicks), MAX_CLICKS):
            body = {"clicks": clicks[start : start + MAX_CLICKS]}
            answer = request_json(
                "POST", url, body, args.timeout, auth_header(token), retry=Retry(args.retries)
            )
            accepted += int(answer["accepted"])
    except CliError as err:
        raise type(err)(f"{err} ({accepted} of {len(clicks)} clicks accepted)") from None
    print(f"{accepted} clicks accepted")
    return 0


def _token(args: argparse.Namespace, outputs: StackOutputs) -> str | None:
    value = args.token or os.environ.get(TOKEN_ENV) or outputs.values.get(SERVING_TOKEN)
    return str(value) if value else None


def _lines(files: list[str]) -> Iterator[str]:
    """The lines of each file ('-': stdin), read as the trainer reads data files (compressed
    ones decompressed, `\\n` ends a line); BadFile, naming the file, for one that is not
    lines of text."""
    for name in files:
        with contextlib.nullcontext(sys.stdin.buffer) if name == "-" else _open(name) as f:
            try:
                for _, line in data_lines(f):
                    yield line
            except BadFile as err:
                raise InputError(f"{name}: {err}; pass files of example lines") from None


def _open(name: str) -> Any:
    try:
        return open(name, "rb")
    except OSError as err:
        raise InputError(
            f"{name}: {_reason(err)}; pass files of example lines (or - for stdin)"
        ) from None


def _reason(err: OSError) -> str:
    """`No such file or directory` as `no such file or directory`."""
    reason = err.strerror or str(err)
    return reason[:1].lower() + reason[1:]


def run_logs(args: argparse.Namespace, outputs: StackOutputs, _: Forwarder) -> int:
    from .logs import api_client, follow_logs

    namespace = outputs.get(args.namespace, NAMESPACE, "--namespace")
    job = outputs.get(args.job, TRAINING_JOB, "--job")
    stack_kubeconfig = outputs.values.get(KUBECONFIG)
    if args.kubeconfig or not stack_kubeconfig:
        api = api_client(args.kubeconfig, args.context)
        return follow_logs(api, namespace, job, args.tail, args.wait, as_json=args.json)
    # A cluster the stack created: its kubeconfig (a secret stack output) stays in memory;
    # the key files the Kubernetes client needs for TLS live in a private directory that
    # goes away when the command ends, by Ctrl-C or SIGTERM too.
    import yaml

    try:
        config_dict = yaml.safe_load(str(stack_kubeconfig))
    except yaml.YAMLError:
        config_dict = None
    if not isinstance(config_dict, dict):
        raise CredentialsError(
            "the stack output kubeconfig is not a kubeconfig; pass the cluster's with --kubeconfig"
        )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    with tempfile.TemporaryDirectory(prefix="elasticctr-logs-") as key_dir:
        api = api_client(None, args.context, config_dict, key_dir)
        return follow_logs(api, namespace, job, args.tail, args.wait, as_json=args.json)


def run_status(args: argparse.Namespace, outputs: StackOutputs, forwarder: Forwarder) -> int:
    from . import status

    sources: dict[str, tuple[Any, ...]] = {}  # part: (function, *args)
    mlflow = args.mlflow_url or outputs.values.get(MLFLOW_URL)
    if mlflow:
        mlflow = _url(forwarder, str(mlflow), "--mlflow-url")
        experiment = args.experiment or outputs.values.get(TRAINING_JOB) or "elasticctr-train"
        sources["training"] = (status.training, mlflow, experiment)
    serving = args.serving_url or outputs.values.get(SERVING_URL)
    if serving:
        serving = _url(forwarder, str(serving), "--serving-url")
        sources["serving"] = (status.serving, serving, _token(args, outputs))
    transfer = args.transfer_url or outputs.values.get(CUBE_TRANSFER_URL)
    if transfer:
        transfer = _url(forwarder, str(transfer), "--transfer-url")
        sources["cube"] = (status.transfer, transfer)
    joiner = args.joiner_url or outputs.values.get(JOINER_URL)
    if joiner:  # a stack with feedback.enabled
        joiner = _url(forwarder, str(joiner), "--joiner-url")
        sources["feedback"] = (status.feedback, joiner)
    prometheus = args.prometheus_url or outputs.values.get(PROMETHEUS_URL)
    if prometheus:  # a stack with monitoring.prometheus in-cluster
        prometheus = _url(forwarder, str(prometheus), "--prometheus-url")
        sources["alerts"] = (status.alerts, prometheus)
    if not sources:
        how = outputs.missing or "pass a --stack"
        raise EndpointError(
            "nothing to ask: pass --mlflow-url, --serving-url, --transfer-url, --joiner-url "
            f"or --prometheus-url, or {how}"
        )
    result = status.collect(sources, args.timeout, Retry(args.retries))
    if args.wait:
        result = _wait_for_a_served_version(result, sources, args)
    print(json.dumps(result, indent=1) if args.json else status.render(result))
    failed = any("error" in part for part in result.values() if isinstance(part, dict))
    return 1 if failed or result["unhealthy"] else 0


STATUS_POLL_SECONDS = 5.0


def _wait_for_a_served_version(
    result: dict[str, Any], sources: dict[str, tuple[Any, ...]], args: argparse.Namespace
) -> dict[str, Any]:
    """`status.collect` again until serving reports a model version and the report is
    healthy, or `--wait` seconds have passed: the last report either way."""
    from . import status

    deadline = time.monotonic() + args.wait
    said = ""
    while not status.settled(result) and time.monotonic() < deadline:
        waiting = status.waiting_for(result)
        if waiting != said:  # each new reason once, on stderr: stdout stays the report
            print(f"waiting: {waiting}", file=sys.stderr)
            said = waiting
        time.sleep(min(STATUS_POLL_SECONDS, max(deadline - time.monotonic(), 0)))
        result = status.collect(sources, args.timeout, Retry(args.retries))
    return result


def run_upload(args: argparse.Namespace, outputs: StackOutputs, forwarder: Forwarder) -> int:
    from .upload import upload

    dest = args.dest
    if not dest:
        dataset = args.dataset_path.strip("/")
        if args.data_source == "hdfs":
            dest = f"{outputs.get(None, HDFS_ADDRESS, '--dest').rstrip('/')}/{dataset}"
        else:
            dest = f"s3://{outputs.get(None, BUCKET, '--dest')}/{dataset}"
            endpoint = outputs.values.get(STORAGE_ENDPOINT)
            if endpoint and "AWS_ENDPOINT_URL" not in os.environ:
                os.environ["AWS_ENDPOINT_URL"] = str(endpoint)
    slot_conf = Path(args.slot_conf) if args.slot_conf else None
    report = upload(Path(args.source), dest, slot_conf, timeout=args.timeout, forwarder=forwarder)
    if args.json:
        print(json.dumps({"dest": dest, **dataclasses.asdict(report)}, indent=1))
        return 0
    print(
        f"uploaded {report.files} files ({report.bytes:,} bytes) to {dest}: "
        f"{len(report.ready)} hours ready, {len(report.not_ready)} without donefile"
    )
    return 0


def _print_or_write(text: str, out: str | None, hint: str) -> int:
    """`text` to stdout, or to the file `out` (then `hint` on stderr)."""
    if not out:
        sys.stdout.write(text)
        return ExitCode.OK
    try:
        Path(out).write_text(text, encoding="utf-8")
    except OSError as err:
        raise InputError(f"--out {out}: cannot write it ({err.strerror or err})") from None
    print(f"wrote {out}: {hint}", file=sys.stderr)
    return ExitCode.OK


def run_dashboard(args: argparse.Namespace, outputs: StackOutputs, forwarder: Forwarder) -> int:
    from elasticctr_common.dashboard import dashboard

    text = json.dumps(dashboard(title=args.title), indent=1) + "\n"
    return _print_or_write(text, args.out, "import it in Grafana (Dashboards, New, Import)")


def run_alerts(args: argparse.Namespace, outputs: StackOutputs, forwarder: Forwarder) -> int:
    import yaml
    from elasticctr_common.alerts import prometheus_rule, rule_file, with_durations

    pairs = [item.partition("=") for item in args.alert_for]
    if any(not sep for _, sep, _ in pairs):
        raise UsageError(
            f"--for takes ALERT=DURATION (ElasticctrCubeShardDown=2m), got {args.alert_for}"
        )
    try:
        rules = with_durations({name: duration for name, _, duration in pairs})
    except ValueError as err:
        raise UsageError(f"--for: {err}") from None
    if args.operator:
        document, hint = prometheus_rule(args.operator, rules), "kubectl apply -f it"
    else:
        document = rule_file(rules)
        hint = "list it under rule_files in Prometheus's configuration"
    text = yaml.safe_dump(document, sort_keys=False, width=120, allow_unicode=True)
    return _print_or_write(text, args.out, hint)


def run_scrape_config(args: argparse.Namespace, outputs: StackOutputs, forwarder: Forwarder) -> int:
    import yaml
    from elasticctr_common.contract import SERVING_AUTH_SECRET, ServingEnv
    from elasticctr_common.scrape import pod_monitors, scrape_configs

    if args.operator:
        token = (SERVING_AUTH_SECRET, ServingEnv.AUTH_TOKEN)
        secret = {"serving": token} if args.token_file else {}
        text = yaml.safe_dump_all(
            pod_monitors(args.namespace, args.interval, secret), sort_keys=False, width=120
        )
        hint = "kubectl apply -f it (the stack's monitoring.prometheus external, operator true)"
    else:
        files = {"serving": args.token_file} if args.token_file else {}
        jobs = scrape_configs(args.namespace, args.interval, files)
        text = yaml.safe_dump({"scrape_configs": jobs}, sort_keys=False, width=120)
        hint = "add the jobs to scrape_configs in Prometheus's configuration"
    return _print_or_write(text, args.out, hint)


COMMANDS = {
    "predict": run_predict,
    "click": run_click,
    "logs": run_logs,
    "status": run_status,
    "upload": run_upload,
    "dashboard": run_dashboard,
    "alerts": run_alerts,
    "scrape-config": run_scrape_config,
}

if __name__ == "__main__":
    sys.exit(main())
