"""MLflow's model registry as elasticctr uses it (docs/trainer.md, "MLflow"): trainer 0
registers each published version, cube-transfer points the `serving` alias at the version
it commits to every shard. Both sides use this module, over MLflow's REST API with the
standard library only (the cube image carries no MLflow package).

A registered model is named after the training job (its MLflow experiment); each of its
versions carries the elasticctr version id in the tag `elasticctr.version` (MLflow numbers
its versions itself) and points at the version's directory in the model store. The
registry is a view for people and tools: a failure to reach it is reported to the caller,
which logs and counts it, and never stops training or a rollout.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from .contract import TrainerEnv

VERSION_TAG = "elasticctr.version"
SERVING_ALIAS = "serving"
# The variables MLflow's own clients read: the server, and its credentials when it has any.
TRACKING_URI_ENV = TrainerEnv.MLFLOW_TRACKING_URI
TOKEN_ENV = "MLFLOW_TRACKING_TOKEN"
USERNAME_ENV, PASSWORD_ENV = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"
# The registered model's name, given to cube-transfer (trainer 0 uses its experiment's).
MODEL_NAME_ENV = "ELASTICCTR_REGISTERED_MODEL"


class RegistryError(Exception):
    """The registry refused a call or could not be reached (the message says which)."""


class ModelRegistry:
    def __init__(
        self, tracking_uri: str, model_name: str, headers: Mapping[str, str] | None = None,
        timeout: float = 10.0,
    ) -> None:  # fmt: skip
        if not tracking_uri.startswith(("http://", "https://")):
            raise ValueError(f"MLflow tracking URI must be http(s)://..., got {tracking_uri!r}")
        if not model_name:
            raise ValueError("a registered model needs a name")
        self.base = tracking_uri.rstrip("/") + "/api/2.0/mlflow/"
        self.model_name, self.headers, self.timeout = model_name, dict(headers or {}), timeout

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], model_name: str | None = None
    ) -> ModelRegistry | None:
        """The registry of `env` (MLflow's variables), or None when no server is named."""
        uri = env.get(TRACKING_URI_ENV, "")
        name = model_name or env.get(MODEL_NAME_ENV, "")
        if not uri or not name:
            return None
        headers = {}
        if env.get(TOKEN_ENV):
            headers["Authorization"] = f"Bearer {env[TOKEN_ENV]}"
        elif env.get(USERNAME_ENV):
            pair = f"{env[USERNAME_ENV]}:{env.get(PASSWORD_ENV, '')}".encode()
            headers["Authorization"] = f"Basic {base64.b64encode(pair).decode()}"
        return cls(uri, name, headers)

    def _call(self, method: str, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        url = self.base + path
        data = None
        if method == "GET":
            url += "?" + urllib.parse.urlencode(body)
        else:
            data = json.dumps(body).encode()
        request = urllib.request.Request(
            url, data=data, method=method,
            headers={**self.headers, "Content-Type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                answer: dict[str, Any] = json.loads(response.read() or b"{}")
                return answer
        except urllib.error.HTTPError as err:
            try:
                detail = json.loads(err.read())
            except ValueError:
                detail = {}
            code = detail.get("error_code", f"HTTP {err.code}")
            raise RegistryError(f"MLflow {path}: {code}: {detail.get('message', '')}") from err
        except (OSError, ValueError) as err:
            raise RegistryError(f"MLflow {path}: {err}") from err

    def _versions(self, version: int) -> list[dict[str, Any]]:
        """MLflow's model versions of elasticctr version `version`, oldest first."""
        query = f"name='{_quoted(self.model_name)}' and tags.`{VERSION_TAG}`='{int(version)}'"
        found = self._call("GET", "model-versions/search", {"filter": query, "max_results": 10})
        return sorted(found.get("model_versions", []), key=lambda v: int(v["version"]))

    def find(self, version: int) -> str | None:
        """MLflow's version number of elasticctr version `version`, if registered."""
        versions = self._versions(version)
        return str(versions[0]["version"]) if versions else None

    def run_of(self, version: int) -> str | None:
        """The MLflow run that trained elasticctr version `version`, if registered with one."""
        versions = self._versions(version)
        return (versions[0].get("run_id") or None) if versions else None

    def log_metrics(
        self, run_id: str, metrics: Mapping[str, float], step: int, timestamp_ms: int
    ) -> None:
        """Metrics of run `run_id` at `step` (MLflow charts each key's history by step)."""
        batch = [
            {"key": key, "value": float(value), "timestamp": timestamp_ms, "step": int(step)}
            for key, value in metrics.items()
        ]
        self._call("POST", "runs/log-batch", {"run_id": run_id, "metrics": batch})

    def register(
        self, version: int, source: str, run_id: str | None = None,
        tags: Mapping[str, str] | None = None, description: str = "",
    ) -> str:  # fmt: skip
        """Register elasticctr version `version` (stored at `source`) once: again after a
        restart returns the number it was given the first time."""
        try:
            self._call("POST", "registered-models/create", {"name": self.model_name})
        except RegistryError as err:
            if "RESOURCE_ALREADY_EXISTS" not in str(err):
                raise
        known = self.find(version)
        if known is not None:
            return known
        body: dict[str, Any] = {
            "name": self.model_name,
            "source": source,
            "tags": [{"key": VERSION_TAG, "value": str(int(version))}]
            + [{"key": k, "value": str(v)[:5000]} for k, v in (tags or {}).items()],
            "description": description,
        }
        if run_id:
            body["run_id"] = run_id
        created = self._call("POST", "model-versions/create", body)
        return str(created["model_version"]["version"])

    def set_alias(self, version: int, alias: str = SERVING_ALIAS) -> str:
        """Point `alias` at elasticctr version `version`; its MLflow version number."""
        number = self.find(version)
        if number is None:
            raise RegistryError(f"MLflow: version {version} of {self.model_name} is not registered")
        self._call(
            "POST",
            "registered-models/alias",
            {"name": self.model_name, "alias": alias, "version": number},
        )
        return number

    def tag_version(self, version: int, key: str, value: str) -> str:
        """Set tag `key` of elasticctr version `version`'s model version; its MLflow number."""
        number = self.find(version)
        if number is None:
            raise RegistryError(f"MLflow: version {version} of {self.model_name} is not registered")
        body = {"name": self.model_name, "version": number, "key": key, "value": value}
        self._call("POST", "model-versions/set-tag", body)
        return number

    def alias(self, alias: str = SERVING_ALIAS) -> int | None:
        """The elasticctr version `alias` points at, or None when it points nowhere."""
        try:
            found = self._call(
                "GET", "registered-models/alias", {"name": self.model_name, "alias": alias}
            )
        except RegistryError as err:
            if "RESOURCE_DOES_NOT_EXIST" in str(err) or "INVALID_PARAMETER_VALUE" in str(err):
                return None
            raise
        tags = {t["key"]: t["value"] for t in found["model_version"].get("tags", [])}
        return int(tags[VERSION_TAG]) if VERSION_TAG in tags else None


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")
