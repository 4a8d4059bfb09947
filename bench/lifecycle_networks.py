"""Held-out AUC of the lifecycle's first version: the default network against the user
network the cluster tests' stack ships (tests/support/cluster.py, USER_NETWORK_FIXTURE).

The data as lifecycle phase 1 generates it (tests/support/lifecycle.py `generate_argv`: 26
slots of 50 ids, 6 hours x 20,000 examples, 4,000 held out) for each generator seed; the
trainer.json the dev stack renders under mocks (its `training-config` ConfigMap, with and
without `training.model custom`), with the data, the held-out set and the stores on local
files; one offline pass on 1 pserver + 2 trainers as `python -m elasticctr_trainer local`.

    .venv/bin/python bench/lifecycle_networks.py --seeds 7 1 2 3 [--work /tmp/networks]

Prints one row per seed and network, and the table as Markdown at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)] + [str(REPO / "images" / p) for p in ("trainer", "common")]

from local_job import local_job_command, trainer_env  # noqa: E402 (a module beside this script)

from components.training import CONFIG_MAP  # noqa: E402
from tests.support.cluster import USER_NETWORK_FIXTURE  # noqa: E402
from tests.support.lifecycle import generate_argv  # noqa: E402
from tests.support.pulumi_harness import stack_config  # noqa: E402
from tests.support.stacks import run_stack  # noqa: E402

NETWORKS = {"wide_deep (default)": {}, "the user's network": {"model": "custom"}}


def rendered(training: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The dev stack's trainer.json and shipped network file with `training` settings."""
    section = "elasticctr:training"
    dev = stack_config("dev").get(section, {})
    graph = run_stack("dev", {section: {**dev, **training}})
    (config_map,) = [
        m
        for m in graph.manifests()
        if m["kind"] == "ConfigMap" and m["metadata"]["name"] == CONFIG_MAP
    ]
    return json.loads(config_map["data"]["trainer.json"]), config_map["data"].get("network.py")


def generate(data: Path, seed: int) -> float:
    """The lifecycle's data for `seed` in `data` (kept if there); its held-out Bayes AUC."""
    truth = data / "generated.json"
    if not truth.exists():
        done = subprocess.run(
            [sys.executable, "-m", "elasticctr_trainer", *generate_argv(data, seed)],
            env=trainer_env(), capture_output=True, text=True, check=True,
        )  # fmt: skip
        truth.write_text(done.stdout.strip().splitlines()[-1])
    return float(json.loads(truth.read_text())["heldout_bayes_auc"])


def train(work: Path, data: Path, settings: dict[str, Any]) -> float:
    """One offline pass with the rendered settings; version 1's held-out AUC."""
    if settings.get("model") == "custom":
        settings = {**settings, "network_module": USER_NETWORK_FIXTURE}
    config, network = rendered(settings)
    work.mkdir(parents=True)
    if network is not None:
        (work / "network.py").write_text(network)
        config["hyper_parameters"]["network_module"] = str(work / "network.py")
    config["runner"].update(
        train_data_uri=f"file://{data}/train", eval_data_uri=f"file://{data}/heldout",
        slot_conf=str(data / "slot.conf"), model_uri=f"file://{work}/models",
        checkpoint_uri=f"file://{work}/checkpoints", work_dir=str(work / "scratch"),
        passes=1, data_wait_seconds=0, publish_every_version=True,
    )  # fmt: skip
    (work / "trainer.json").write_text(json.dumps(config, indent=1))
    command = local_job_command(work / "trainer.json", work / "logs", 1, 2)
    env = trainer_env({"MLFLOW_TRACKING_URI": ""})
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, timeout=3600)
    meta = json.loads((work / "models" / "1" / "dense" / "meta.json").read_text())
    return float(meta["eval_auc"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[7, 1, 2, 3])
    parser.add_argument("--work", type=Path, help="keep everything here (default: a temp dir)")
    args = parser.parse_args()
    os.chdir(REPO)  # the stack names the network relative to the project
    work = args.work or Path(tempfile.mkdtemp(prefix="lifecycle-networks-"))
    rows = []
    for seed in args.seeds:
        bayes = generate(work / f"data-{seed}", seed)
        aucs = {}
        for n, (name, settings) in enumerate(NETWORKS.items()):
            aucs[name] = train(work / f"seed-{seed}-{n}", work / f"data-{seed}", settings)
            print(json.dumps({"seed": seed, "network": name, "bayes": bayes, "auc": aucs[name]}))
        rows.append((seed, bayes, aucs))
    print(f"\n| seed | Bayes | {' | '.join(NETWORKS)} |\n|---|---:|{'---:|' * len(NETWORKS)}")
    for seed, bayes, aucs in rows:
        print(f"| {seed} | {bayes:.4f} | {' | '.join(f'{aucs[n]:.4f}' for n in NETWORKS)} |")


if __name__ == "__main__":
    main()
