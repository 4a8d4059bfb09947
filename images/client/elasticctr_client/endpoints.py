"""Where the stack's services are: flags first, then `pulumi stack output --json`.

Output names are elasticctr_common.stack_outputs, which the program exports. In-cluster
addresses (`*.svc.cluster.local`) only resolve inside the cluster; from a laptop,
`kubectl port-forward` and pass the local URL as a flag.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from .errors import EndpointError, UsageError, one_line

TOKEN_ENV = "ELASTICCTR_SERVING_TOKEN"


def auth_header(token: str | None) -> dict[str, str]:
    """The header serving wants when the stack has serving.auth token."""
    return {"Authorization": f"Bearer {token}"} if token else {}


PULUMI_SECONDS = 120  # for `pulumi stack output` (a remote backend may be slow)
NO_PULUMI = "install the pulumi CLI (tools/setup.sh; it is not on PATH) to read the stack's outputs"


@dataclass
class StackOutputs:
    values: dict[str, Any]
    stack: str | None
    missing: str | None = None  # why there are no outputs, when that is not the stack's fault

    @classmethod
    def read(cls, stack: str | None, cwd: str | None = None) -> StackOutputs:
        """`pulumi stack output --json [--stack S] --show-secrets`; empty without pulumi
        (`missing` says so: the flags may give every endpoint)."""
        pulumi = shutil.which("pulumi")
        if pulumi is None:
            return cls({}, stack, NO_PULUMI)
        command = [pulumi, "stack", "output", "--json", "--show-secrets"]
        if stack:
            command += ["--stack", stack]
        shown = f"`{' '.join(command[1:])}`"
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, cwd=cwd, timeout=PULUMI_SECONDS
            )
        except subprocess.TimeoutExpired:
            raise EndpointError(
                f"{shown} gave no answer within {PULUMI_SECONDS} s; pass the endpoints as flags"
            ) from None
        if done.returncode != 0:
            raise EndpointError(
                f"{shown} failed: {one_line(done.stderr)[-500:]}; run where the stack's "
                "project is (or pass --stack), or pass the endpoints as flags"
            )
        try:
            values = json.loads(done.stdout or "{}")
        except ValueError:
            raise EndpointError(f"{shown} printed something that is not JSON") from None
        return cls(values if isinstance(values, dict) else {}, stack)

    def get(self, flag_value: str | None, output: str, flag: str) -> str:
        """The flag's value, else the stack output, else an EndpointError naming both."""
        if flag_value:
            return flag_value
        value = self.values.get(output)
        if value not in (None, ""):
            return str(value)
        if self.missing:
            raise EndpointError(f"no {flag}: pass {flag}, or {self.missing}")
        where = f"stack {self.stack}" if self.stack else "the current stack"
        raise EndpointError(
            f"no {flag}: pass {flag}, or run where `pulumi stack output {output}` answers "
            f"(it is empty or absent for {where})"
        )


def http_url(url: str, flag: str) -> str:
    """`url` when it is an http(s) URL, else a UsageError naming `flag`."""
    if not url.startswith(("http://", "https://")):
        raise UsageError(
            f"{flag} {url!r} is not an http:// or https:// URL (e.g. http://127.0.0.1:8010)"
        )
    return url


def unreachable_hint(url: str) -> str:
    """What to do when `url` is an in-cluster address seen from outside the cluster."""
    if ".svc.cluster.local" not in url and ".svc:" not in url:
        return ""
    host = url.split("//", 1)[-1].split("/", 1)[0]
    service, _, rest = host.partition(".")
    namespace = rest.split(".", 1)[0]
    port = host.rsplit(":", 1)[-1] if ":" in host else "80"
    return (
        f" ({host} resolves only inside the cluster: run `kubectl -n {namespace} "
        f"port-forward svc/{service} {port}` and pass http://127.0.0.1:{port})"
    )
