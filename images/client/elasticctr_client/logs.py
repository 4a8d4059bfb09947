"""`logs`: follow trainer 0 and cube-transfer in the cluster (the seeds' `-l`).

Trainer 0 is the Volcano pod `<job>-trainer-0`; the transfer is the pod of the Deployment
labelled `app.kubernetes.io/component=cube-transfer` (components/cube.py). Both streams
are followed at once through the Kubernetes API (the official Python client), each line
prefixed by its source. A pod of the job that failed is shown too: the trainer that met a
bad data file is not always trainer 0, and Volcano keeps a failed pod after ending the job
(the running ones it deletes). A pod that does not exist yet is waited for; following ends
when every stream has ended (the pods finished) or on Ctrl-C.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from typing import Any, TextIO

from .errors import CredentialsError, RefusedError, UnreachableError, one_line

TRANSFER_SELECTOR = "app.kubernetes.io/component=cube-transfer"


def api_client(
    kubeconfig: str | None,
    context: str | None,
    config_dict: dict[str, Any] | None = None,
    key_dir: str | None = None,
) -> Any:
    """A CoreV1Api from a kubeconfig file, or from `config_dict` (a kubeconfig held in
    memory only: the Kubernetes client writes the certificate and key data it holds to
    files for TLS, here in `key_dir`, which the caller removes). CredentialsError for a
    kubeconfig that is missing or not usable."""
    from kubernetes import client, config

    what = "the stack output kubeconfig" if config_dict is not None else f"kubeconfig {kubeconfig}"
    if kubeconfig and not os.path.isfile(kubeconfig):
        raise CredentialsError(f"{what}: no such file; {KUBECONFIG_HINT}")
    try:
        if config_dict is not None:
            config.load_kube_config_from_dict(config_dict, context=context, temp_file_path=key_dir)
        elif kubeconfig or context:
            config.load_kube_config(config_file=kubeconfig, context=context)
        else:
            try:
                config.load_kube_config()
            except config.ConfigException:
                if not _default_kubeconfig_exists():
                    try:
                        config.load_incluster_config()
                    except config.ConfigException:
                        where = os.environ.get("KUBECONFIG") or "~/.kube/config"
                        raise CredentialsError(
                            f"no kubeconfig: none at {where} and this is not a pod in a "
                            f"cluster; {KUBECONFIG_HINT}"
                        ) from None
                    return client.CoreV1Api()
                raise
    except (config.ConfigException, TypeError, ValueError, AttributeError, KeyError) as err:
        what = what if kubeconfig or config_dict is not None else "the default kubeconfig"
        detail = one_line(str(err))[:300]
        raise CredentialsError(f"{what} is not usable ({detail}); {KUBECONFIG_HINT}") from None
    return client.CoreV1Api()


KUBECONFIG_HINT = (
    "pass the kubeconfig of the stack's cluster with --kubeconfig (and --context), or set "
    "$KUBECONFIG"
)


def _default_kubeconfig_exists() -> bool:
    paths = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    return any(os.path.isfile(p) for p in paths.split(os.pathsep) if p)


def api_error(err: Exception, api: Any) -> Exception:
    """A CliError for a failed call of the Kubernetes API, naming the API server."""
    from kubernetes.client.exceptions import ApiException

    host = api.api_client.configuration.host
    if isinstance(err, ApiException):
        if err.status in (401, 403):
            return CredentialsError(
                f"the Kubernetes API at {host} answered {err.status} ({err.reason}): the "
                "kubeconfig's credentials are refused or lack the right to read pods; refresh "
                "them (cloud tokens expire) or pass another --kubeconfig or --context"
            )
        return RefusedError(f"the Kubernetes API at {host} answered {err.status} ({err.reason})")
    # urllib3's MaxRetryError wraps the connection's error, whose text ends with the reason
    reason = str(getattr(err, "reason", None) or err).rsplit(": ", 1)[-1]
    return UnreachableError(
        f"the Kubernetes API at {host}: cannot connect ({one_line(reason)}); is the "
        "cluster up, and the kubeconfig's server address reachable from here?"
    )


def _pod_name(api: Any, namespace: str, name: str | None, selector: str | None) -> str | None:
    from kubernetes.client.exceptions import ApiException

    if name:
        try:
            api.read_namespaced_pod(name, namespace)
            return name
        except ApiException as err:
            if err.status == 404:
                return None
            raise
    pods = api.list_namespaced_pod(namespace, label_selector=selector).items
    running = [p for p in pods if p.status and p.status.phase == "Running"]
    chosen = (running or pods)[:1]
    return chosen[0].metadata.name if chosen else None


def _failed_pods(api: Any, namespace: str, job: str) -> list[str]:
    """The job's pods that failed (Volcano labels its pods with the job's name)."""
    pods = api.list_namespaced_pod(namespace, label_selector=f"volcano.sh/job-name={job}").items
    return sorted(p.metadata.name for p in pods if p.status and p.status.phase == "Failed")


def _follow(
    api: Any,
    namespace: str,
    label: str,
    name: str | None,
    selector: str | None,
    tail: int,
    out: queue.Queue[tuple[str, str | None]],
    stop: threading.Event,
    wait: float,
) -> None:
    """Put `(label, line)` on `out`; `(label, None)` at the end of the stream."""
    try:
        pod = None
        deadline = time.monotonic() + wait
        while pod is None and not stop.is_set():
            pod = _pod_name(api, namespace, name, selector)
            if pod is None:
                if time.monotonic() > deadline:
                    out.put(
                        (label, f"(no pod {name or selector} in {namespace} after {wait:.0f}s)")
                    )
                    return
                time.sleep(1.0)
        if pod is None:
            return
        stream = api.read_namespaced_pod_log(
            pod, namespace, follow=True, tail_lines=tail, _preload_content=False
        )
        pending = b""
        for chunk in stream.stream(amt=4096, decode_content=True):
            if stop.is_set():
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                out.put((label, line.decode(errors="replace")))
        if pending:
            out.put((label, pending.decode(errors="replace")))
    except Exception as err:  # the API refused or the connection broke: say so, end
        out.put((label, f"(log stream ended: {type(err).__name__}: {err})"))
    finally:
        out.put((label, None))


def follow_logs(
    api: Any,
    namespace: str,
    job: str,
    tail: int = 100,
    wait: float = 300.0,
    stream: TextIO = sys.stdout,
    as_json: bool = False,
) -> int:
    """Print each line of the streams as `[source] line`, or with `as_json` as one JSON
    object a line, `{"source": ..., "line": ...}`; 0 when every stream has ended."""
    lines: queue.Queue[tuple[str, str | None]] = queue.Queue()
    stop = threading.Event()
    sources: dict[str, tuple[str | None, str | None]] = {
        "trainer-0": (f"{job}-trainer-0", None),
        "transfer": (None, TRANSFER_SELECTOR),
    }
    try:
        failed_pods = _failed_pods(api, namespace, job)
    except Exception as err:  # the API refused or cannot be reached: one line, not a trace
        raise api_error(err, api) from err
    for failed in failed_pods:
        sources.setdefault(failed.removeprefix(f"{job}-"), (failed, None))
    for label, (name, selector) in sources.items():
        threading.Thread(
            target=_follow,
            args=(api, namespace, label, name, selector, tail, lines, stop, wait),
            daemon=True,
        ).start()
    open_streams = len(sources)
    try:
        while open_streams:
            label, line = lines.get()
            if line is None:
                open_streams -= 1
                continue
            if as_json:
                stream.write(json.dumps({"source": label, "line": line}) + "\n")
            else:
                stream.write(f"[{label}] {line}\n")
            stream.flush()
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
    return 0
