"""The whole ElasticCTR pipeline on this machine, as processes, without a cluster:

    .venv/bin/python tools/demo.py [--work-dir DIR] [--keep-running] [--profile criteo]
    .venv/bin/python tools/demo.py --data DIR ...         # your own data, either format

generated data -> 2 pservers + 2 trainers (local mode), 2 passes -> versions 1 and 2
exported -> cube (3 shard servers + agents + transfer) rolls each out -> serving follows
-> `elasticctr_client predict` on the held-out examples, printing their AUC. The same
commands as in the cluster, with file:// storage and loopback ports. About 40 s on 2
cores; needs cargo once, to build the native cube-server. Every process it starts is
stopped at the end (Ctrl-C too).

`--profile criteo` generates Criteo-shaped data instead (13 dense features, 26 slots, in
PaddleRec's slot format). `--data DIR` reads ElasticCTR lines or PaddleRec's slot format,
told apart by the first line (`click:` starts a slot-format line); the slot format's dense
features (their names and sizes) and, without DIR/slot.conf, its slots are read off the
first lines too, and printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
IMAGES = ("trainer", "common", "cube", "serving", "client")
PYTHONPATH = os.pathsep.join(str(REPO / "images" / p) for p in IMAGES)
SHARDS = 3


class Demo:
    def __init__(self, work: Path, args: argparse.Namespace) -> None:
        self.work, self.args = work, args
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.env = {
            **os.environ,
            "PYTHONPATH": PYTHONPATH,
            "PYTHONUNBUFFERED": "1",
            "GLOG_minloglevel": "2",
        }
        for key in [k for k in self.env if k.startswith(("PADDLE_", "TRAINING_ROLE"))]:
            del self.env[key]  # the local job sets its own; stray ones would confuse roles
        self.env.pop("MLFLOW_TRACKING_URI", None)

    def say(self, text: str) -> None:
        print(f"[demo {time.strftime('%H:%M:%S')}] {text}", flush=True)

    def python(self, *argv: str) -> list[str]:
        return [sys.executable, *argv]

    def start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with open(self.logs / f"{name}.log", "wb") as log:
            # cwd: whatever a process drops where it runs stays in the work directory.
            proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.work,
                start_new_session=True,
            )
        self.procs[name] = proc
        with open(self.work / "demo-pids.txt", "a") as pids:
            pids.write(f"{proc.pid} {name}\n")
        return proc

    def run(self, name: str, argv: list[str], timeout: float) -> None:
        proc = self.start(name, argv)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise SystemExit(f"{name} did not finish within {timeout:.0f}s") from None
        if code != 0:
            tail = (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]
            raise SystemExit(f"{name} failed with exit code {code}; its log ends:\n{tail}")

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def wait_http(
        self,
        url: str,
        what: str,
        timeout: float,
        check: Callable[[dict[str, Any]], bool] = lambda body: True,
        process: str = "",
    ) -> dict[str, Any]:
        """`url`'s JSON once `check` holds; on a timeout, the error ends with the last lines
        of `process`'s log."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() not in (None, 0):
                    raise SystemExit(f"{name} exited with {proc.returncode} (log: {self.logs})")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    body: dict[str, Any] = json.loads(response.read())
                if check(body):
                    return body
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        tail = ""
        if process and (self.logs / f"{process}.log").exists():
            lines = (self.logs / f"{process}.log").read_text(errors="replace").splitlines()
            tail = "; the end of its log:\n" + "\n".join(lines[-30:])
        raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what} ({url}){tail}")

    # -- the pipeline -----------------------------------------------------------------------
    def generate(self) -> dict[str, Any]:
        a = self.args
        if a.data:  # the user's own: nothing to generate, no known best AUC
            return {}
        what = "Criteo-shaped" if a.profile == "criteo" else f"{a.slots} slots,"
        self.say(f"generating data: {what} {a.hours} hours x {a.examples} examples")
        out = self.work / "generate.json"
        shape = ["--slots", str(a.slots), "--vocab", str(a.vocab)]
        if a.profile == "criteo":
            shape = ["--profile", "criteo", "--start", "20191221/00", "--seed", str(a.seed)]
        self.run(
            "generate",
            self.python(
                "-m",
                "elasticctr_trainer",
                "generate",
                "--out",
                f"file://{self.work}/data",
                *shape,
                "--hours",
                str(a.hours),
                "--examples-per-hour",
                str(a.examples),
                "--files-per-hour",
                "2",
                "--heldout",
                str(a.heldout),
            ),
            timeout=900,
        )
        summary: dict[str, Any] = json.loads(
            (self.logs / "generate.log").read_text().strip().splitlines()[-1]
        )
        out.write_text(json.dumps(summary))
        return summary

    def start_cube(self) -> Path:
        from elasticctr_common.cube.conf import DICT_NAME, CubeConf, CubeNode
        from elasticctr_common.ports import free_port
        from elasticctr_cube.server import BINARY_NAME, build_server, server_binary

        if os.environ.get("ELASTICCTR_CUBE_SERVER_BIN") or shutil.which(BINARY_NAME):
            binary = server_binary()
        else:  # cargo's incremental build: a no-op when current, a rebuild after a pull
            self.say("building the native cube-server (cargo)")
            binary = build_server()
        self.env["ELASTICCTR_CUBE_SERVER_BIN"] = binary
        nodes = tuple(CubeNode("127.0.0.1", free_port(), free_port()) for _ in range(SHARDS))
        conf = self.work / "cube.conf"
        conf.write_text(CubeConf(DICT_NAME, SHARDS, nodes).to_json())
        self.say(f"starting cube: {SHARDS} shard servers + agents + transfer")
        for i, node in enumerate(nodes):
            control_port = free_port()  # loads and switches: the agent's, beside its server
            self.start(
                f"cube-server-{i}",
                self.python(
                    "-m",
                    "elasticctr_cube",
                    "server",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(node.port),
                    "--control-port",
                    str(control_port),
                    "--shard",
                    str(i),
                    "--shard-num",
                    str(SHARDS),
                ),
            )
            self.start(
                f"cube-agent-{i}",
                self.python(
                    "-m",
                    "elasticctr_cube",
                    "agent",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(node.agent_port),
                    "--shard",
                    str(i),
                    "--shard-num",
                    str(SHARDS),
                    "--cube-uri",
                    f"file://{self.work}/cube",
                    "--server",
                    f"http://127.0.0.1:{control_port}",
                    "--data-dir",
                    str(self.work / f"shard-{i}"),
                ),
            )
        self.transfer_url = f"http://127.0.0.1:{free_port()}"
        self.start(
            "cube-transfer",
            self.python(
                "-m",
                "elasticctr_cube",
                "transfer",
                "--host",
                "127.0.0.1",
                "--port",
                self.transfer_url.rsplit(":", 1)[1],
                "--control-port",
                str(free_port()),
                "--model-uri",
                f"file://{self.work}/models",
                "--cube-uri",
                f"file://{self.work}/cube",
                "--cube-conf",
                str(conf),
                "--work-dir",
                str(self.work / "transfer"),
                "--poll-seconds",
                "1",
            ),
        )
        return conf

    @property
    def data(self) -> Path:
        """The hour directories' parent (train/) and the held-out set's (heldout/)."""
        return Path(self.args.data).resolve() if self.args.data else self.work / "data"

    @property
    def slot_conf(self) -> Path:
        if self.args.slot_conf:
            return Path(self.args.slot_conf).resolve()
        given = self.data / "slot.conf"
        if given.exists() or not self.args.data:
            return given
        found = self.work / "slot.conf"  # read off the data (`sniff`)
        return found

    def sniff(self) -> dict[str, Any]:
        """trainer.json settings for the data's format: `runner.data_format` and, for the
        slot format, the dense features of its first line; without DIR/slot.conf, a
        slot.conf of the slots its first lines use."""
        from elasticctr_common.lines import LABEL

        first = sorted(p for p in (self.data / "train").rglob("*") if _is_data_file(p))
        if not first:
            raise SystemExit(f"{self.data}/train: no data files under the hour directories")
        lines = _first_lines(first[0], 1000)
        if not lines or not lines[0].startswith(f"{LABEL}:"):
            self.say("data: ElasticCTR lines")
            return {"data_format": "elasticctr"}
        dense: dict[str, int] = {}
        for token in lines[0].split():
            name = token.split(":", 1)[0]
            if name != LABEL and not name.lstrip("-").isdigit():
                dense[name] = dense.get(name, 0) + 1
        features = [{"name": n, "dim": d} for n, d in dense.items()]
        slots = {
            int(name)
            for line in lines
            for name in (t.split(":", 1)[0] for t in line.split())
            if name.isdigit()
        }
        self.say(f"data: PaddleRec's slot format, dense features {features or 'none'}")
        if not (self.data / "slot.conf").exists() and not self.args.slot_conf:
            (self.work / "slot.conf").write_text("".join(f"{s}\n" for s in sorted(slots)))
            self.say(
                f"no slot.conf in {self.data}: using the slots of its first lines, {sorted(slots)}"
            )
        return {"data_format": "paddlerec", "dense_features": features}

    @property
    def heldout(self) -> Path | None:
        held = self.data / "heldout"
        return held if held.is_dir() else None

    def train(self) -> int:
        """Train; the newest published version (the publish gate may hold some back)."""
        from elasticctr_common.storage import open_store
        from elasticctr_common.trainer_json import (
            HyperParameters,
            Runner,
            TrainerConfig,
            apply_settings,
        )
        from elasticctr_common.versions import read_versions

        a = self.args
        runner = Runner(
            train_data_uri=f"file://{self.data}/train",
            start_date_hr=a.start,
            end_date_hr=a.end or f"20191221/{a.hours - 1:02d}",
            slot_conf=str(self.slot_conf),
            passes=a.passes,
            model_uri=f"file://{self.work}/models",
            checkpoint_uri=f"file://{self.work}/checkpoints",
            eval_data_uri=f"file://{self.heldout}" if self.heldout else None,
            work_dir=str(self.work / "scratch"),
            mlflow_experiment="demo",
            data_wait_seconds=0,
        )
        # A small sparse_dim keeps the export quick (it scans every key).
        hyper = HyperParameters(sparse_dim=a.sparse_dim, learning_rate=0.003, batch_size=64)
        config = TrainerConfig(runner, hyper).to_dict()
        form = self.sniff() if a.data else self.generated_format()
        config["runner"]["data_format"] = form["data_format"]
        if "dense_features" in form:
            config["hyper_parameters"]["dense_features"] = form["dense_features"]
        apply_settings(config, a.set)
        module = config["hyper_parameters"].get("network_module")
        if isinstance(module, str) and module.endswith(".py"):
            # Your network file as you named it (relative to here), not to the trainers' cwd.
            config["hyper_parameters"]["network_module"] = str(Path(module).resolve())
        path = self.work / "trainer.json"
        path.write_text(json.dumps(config, indent=1))
        self.say("training: 2 pservers + 2 trainers (python -m elasticctr_trainer local)")
        started = time.monotonic()
        self.run(
            "training",
            self.python(
                "-m",
                "elasticctr_trainer",
                "local",
                "--config",
                str(path),
                "--pservers",
                "2",
                "--trainers",
                "2",
                "--log-dir",
                str(self.logs / "training"),
            ),
            timeout=a.train_timeout,
        )
        last = read_versions(open_store(f"file://{self.work}/models"))[-1].id
        meta = json.loads((self.work / "models" / str(last) / "dense" / "meta.json").read_text())
        self.say(
            f"trained {a.passes} passes in {time.monotonic() - started:.0f}s; published "
            f"version {last}: {meta['sparse_keys']} sparse keys, trainer's held-out AUC "
            f"{meta.get('eval_auc', float('nan')):.4f}"
        )
        return last

    def generated_format(self) -> dict[str, Any]:
        summary = json.loads((self.work / "generate.json").read_text())
        form: dict[str, Any] = {"data_format": summary["format"]}
        if summary["dense_features"]:
            form["dense_features"] = summary["dense_features"]
        return form

    def serve(self, conf: Path) -> str:
        from elasticctr_common.ports import free_port

        url = f"http://127.0.0.1:{free_port()}"
        self.start(
            "serving",
            self.python(
                "-m",
                "elasticctr_serving",
                "--host",
                "127.0.0.1",
                "--port",
                url.rsplit(":", 1)[1],
                "--grpc-port",
                str(free_port()),
                "--model-uri",
                f"file://{self.work}/models",
                "--cube-conf",
                str(conf),
                "--cube-transfer-url",
                self.transfer_url,
                # No --slot-conf or --sparse-dim: each version's meta.json has the ones it
                # was trained with (a --set hyper_parameters.sparse_dim included).
                "--poll-seconds",
                "0.5",
            ),
        )
        return url

    def main(self) -> int:
        truth = self.generate()
        conf = self.start_cube()
        url = self.serve(conf)  # up before any version: it follows cube's rollouts by itself
        last = self.train()
        self.wait_http(
            f"{self.transfer_url}/status",
            f"cube to commit version {last}",
            180,
            lambda s: s.get("committed") == last,
        )
        self.say(f"cube committed version {last} on all {SHARDS} shards")
        status = self.wait_http(
            f"{url}/status", f"serving to load version {last}", 180, lambda s: s["version"] == last
        )
        switched = ", ".join(str(h["version"]) for h in status["history"])
        self.say(
            f"serving version {last} at {url} (switched to versions {switched} as cube "
            f"committed them); predicting the held-out examples"
        )
        predictions = self.work / "predictions.tsv"
        if self.heldout is None:
            self.say("no heldout/ directory beside train/: nothing to predict")
            return 0
        client = subprocess.run(
            self.python(
                "-m",
                "elasticctr_client",
                "predict",
                *sorted(str(p) for p in self.heldout.iterdir() if not p.name.startswith(".")),
                "--serving-url",
                url,
                "--output",
                str(predictions),
            ),
            env=self.env,
            cwd=self.work,
            timeout=600,
        )
        if client.returncode != 0:
            raise SystemExit(f"client predict failed ({client.returncode})")
        bayes = truth.get("heldout_bayes_auc")
        if bayes is not None:
            self.say(f"the best AUC any model could reach on these examples: {bayes:.4f}")
        if self.args.keep_running:
            self.say(f"running until Ctrl-C: serving {url}, cube-transfer {self.transfer_url}")
            # the services still running: generate and training have finished by now
            services = [p for p in self.procs.values() if p.poll() is None]
            while all(p.poll() is None for p in services):
                time.sleep(1)
        return 0


def add_data_arguments(p: argparse.ArgumentParser) -> None:
    """The demo's data and training options, on `p`. The feedback loop's warm-up
    (tools/feedback_loop.py) takes them from here too, so an option added here reaches it."""
    p.add_argument(
        "--profile",
        choices=("simple", "criteo"),
        default="simple",
        help="generated data: the simple profile, or Criteo-shaped (13 dense features, 26 "
        "slots, PaddleRec's slot format)",
    )
    p.add_argument("--seed", type=int, default=7, help="of the generated data (--profile criteo)")
    p.add_argument("--slots", type=int, default=8)
    p.add_argument("--vocab", type=int, default=100, help="feasigns per slot")
    p.add_argument("--hours", type=int, default=2)
    p.add_argument("--examples", type=int, default=30000, help="examples per hour")
    p.add_argument("--passes", type=int, default=2, help="passes = model versions")
    p.add_argument("--heldout", type=int, default=2000)
    p.add_argument("--sparse-dim", type=int, default=100003)
    p.add_argument("--train-timeout", type=float, default=900)
    own = p.add_argument_group("your own data (instead of generated data)")
    own.add_argument(
        "--data", help="directory with train/YYYYMMDD/HH/ hour directories (each with a "
        "donefile) and optionally heldout/ (evaluated per version, predicted at the end)",
    )  # fmt: skip
    own.add_argument("--slot-conf", help="slot ids, one a line (default: DATA/slot.conf)")
    own.add_argument("--start", default="20191221/00", help="first hour, YYYYMMDD/HH")
    own.add_argument("--end", help="last hour (default: --hours after 20191221/00)")
    own.add_argument(
        "--set", action="append", default=[], metavar="SECTION.KEY=JSON",
        help="a training setting by the stack's name, e.g. training.model=dnn or "
        "training.embedx_threshold=10 (docs/trainer.md lists them); runner.KEY and "
        "hyper_parameters.KEY name trainer.json's sections",
    )  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--work-dir", help="keep everything here (default: a temporary directory)")
    p.add_argument("--keep-running", action="store_true", help="leave cube and serving up")
    add_data_arguments(p)
    return p.parse_args(argv)


def main() -> int:
    return run(Demo, parse_args(), "elasticctr-demo-")


def run(kind: type[Demo], args: argparse.Namespace, prefix: str) -> int:
    """`kind(work, args).main()` in --work-dir, or else in a temporary directory whose name
    starts with `prefix`; what it started is stopped at the end (SIGTERM and Ctrl-C too)."""
    sys.path[:0] = PYTHONPATH.split(os.pathsep)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the clean-up below
    if args.work_dir:
        work = Path(args.work_dir).resolve()
        work.mkdir(parents=True, exist_ok=True)
        return _run(kind, work, args)
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        return _run(kind, Path(tmp), args)


def _is_data_file(path: Path) -> bool:
    return path.is_file() and path.name != "donefile" and not path.name.startswith((".", "_"))


def _first_lines(path: Path, count: int) -> list[str]:
    """The first non-blank lines of a data file, read as the trainer reads it (compressed
    files decompressed)."""
    from elasticctr_common.datafiles import data_lines

    lines = []
    with open(path, "rb") as stream:
        for _, line in data_lines(stream):
            if line.strip():
                lines.append(line)
            if len(lines) >= count:
                break
    return lines


def _run(kind: type[Demo], work: Path, args: argparse.Namespace) -> int:
    demo = kind(work, args)
    try:
        return demo.main()
    except KeyboardInterrupt:
        return 130
    finally:
        demo.stop_all()


if __name__ == "__main__":
    sys.exit(main())
