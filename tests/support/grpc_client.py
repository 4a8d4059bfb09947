"""Triton's own gRPC client (tritonclient[grpc] from PyPI) calling serving, for the tests.

It needs protobuf 6 and the project's venv has Paddle's 4.25, so it runs in a virtualenv of
its own (tools/setup.sh, tests/support/grpc-client-requirements.txt): `run` starts this file
there with a list of calls as JSON and reads back each call's answer, or its error's gRPC
status and message.

A call: {"op": "infer", "model", "version", "inputs": [{"name", "datatype", "shape",
"data"}]} (data flat, row-major; BYTES as strings), or "live", "ready", "model_ready"
(model, version), "server_metadata", "model_metadata" (model, version); every call sends
`token` as its bearer token unless it says "token": null.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

GRPC_CLIENT_VENV_NAME = "grpc-client"


def venv_python() -> Path:
    from tools.localcluster.settings import CACHE

    return CACHE / GRPC_CLIENT_VENV_NAME / "bin" / "python"


def run(address: str, token: str | None, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    python = venv_python()
    if not python.exists():
        raise AssertionError(
            f"no {python}: tools/setup.sh makes tritonclient[grpc]'s virtualenv there"
        )
    request = json.dumps({"address": address, "token": token, "calls": calls})
    done = subprocess.run(
        [str(python), __file__], input=request, capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(f"the gRPC client failed ({done.returncode}):\n{done.stderr}")
    answers: list[dict[str, Any]] = json.loads(done.stdout)
    return answers


def _call(client: Any, grpc: Any, token: str | None, call: dict[str, Any]) -> dict[str, Any]:
    """One call with tritonclient.grpc (in the client's virtualenv)."""
    import numpy as np

    given = call.get("token", token)
    headers = {"authorization": f"Bearer {given}"} if given else None
    op, model, version = call["op"], call.get("model", ""), call.get("version", "")
    if op == "live":
        return {"live": client.is_server_live(headers=headers)}
    if op == "ready":
        return {"ready": client.is_server_ready(headers=headers)}
    if op == "model_ready":
        return {"ready": client.is_model_ready(model, version, headers=headers)}
    if op == "server_metadata":
        return {"metadata": client.get_server_metadata(headers=headers, as_json=True)}
    if op == "model_metadata":
        return {
            "metadata": client.get_model_metadata(model, version, headers=headers, as_json=True)
        }
    inputs = []
    for spec in call["inputs"]:
        dtype = {"UINT64": np.uint64, "INT64": np.int64, "FP32": np.float32, "BYTES": object}
        data = spec["data"]
        if spec["datatype"] == "BYTES":
            data = [value.encode() for value in data]
        array = np.array(data, dtype=dtype[spec["datatype"]]).reshape(spec["shape"])
        tensor = grpc.InferInput(spec["name"], list(spec["shape"]), spec["datatype"])
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    result = client.infer(model, inputs, model_version=version, headers=headers)
    response = result.get_response(as_json=True)
    probability = result.as_numpy("probability")
    return {
        "probability": [None if np.isnan(p) else float(p) for p in probability.tolist()],
        "dtype": str(probability.dtype),
        "model_version": response["model_version"],
        "parameters": {k: next(iter(v.values())) for k, v in response["parameters"].items()},
    }


def _main() -> int:
    import tritonclient.grpc as grpc
    from tritonclient.utils import InferenceServerException

    request = json.load(sys.stdin)
    client = grpc.InferenceServerClient(request["address"])
    answers = []
    for call in request["calls"]:
        try:
            answers.append(_call(client, grpc, request["token"], call))
        except InferenceServerException as err:
            answers.append({"error": {"status": err.status(), "message": err.message()}})
    client.close()
    json.dump(answers, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
