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

TOKEN_ENV = "ELASTICCTR_SERVING_TOKEN"


def auth_header(token: str | None) -> dict[str, str]:
    """The header serving wants when the stack has serving.auth token."""
    return {"Authorization": f"Bearer {token}"} if token else {}


class EndpointError(Exception):
    """An endpoint is neither given as a flag nor a stack output; the message says how."""


@dataclass
class StackOutputs:
    values: dict[str, Any]
    stack: str | None

    @classmethod
    def read(cls, stack: str | None, cwd: str | None = None) -> StackOutputs:
        """`pulumi stack output --json [--stack S] --show-secrets`; empty without pulumi."""
        pulumi = shutil.which("pulumi")
        if pulumi is None:
            return cls({}, stack)
        command = [pulumi, "stack", "output", "--json", "--show-secrets"]
        if stack:
            command += ["--stack", stack]
        done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=120)
        if done.returncode != 0:
            raise EndpointError(f"`{' '.join(command[1:])}` failed: {done.stderr.strip()[-500:]}")
        return cls(json.loads(done.stdout or "{}"), stack)

    def get(self, flag_value: str | None, output: str, flag: str) -> str:
        """The flag's value, else the stack output, else an EndpointError naming both."""
        if flag_value:
            return flag_value
        value = self.values.get(output)
        if value not in (None, ""):
            return str(value)
        where = f"stack {self.stack}" if self.stack else "the current stack"
        raise EndpointError(
            f"no {flag}: pass {flag}, or run where `pulumi stack output {output}` answers "
            f"(it is empty or absent for {where})"
        )


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
