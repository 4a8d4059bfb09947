"""Fast checks of the trainer's plain-Python parts: trainer.json, the role environment,
hour directories, the SequenceFile writer, markers between trainers, AUC, the model check."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from elasticctr_common.seqfile import SYNC_INTERVAL, SequenceFileWriter
from elasticctr_common.seqfile import read_sequence_file as shared_reader
from elasticctr_common.storage import open_store
from elasticctr_common.trainer_json import ConfigError, parse_config
from elasticctr_trainer import BAD_DATA_EXIT_CODE
from elasticctr_trainer.hours import hour_range, ready_hours, wait_for_hours
from elasticctr_trainer.metrics import auc, auc_from_histograms, expected_auc
from elasticctr_trainer.modelcheck import check_model
from elasticctr_trainer.roles import RoleError, role_from_env
from elasticctr_trainer.sync import PassSync, SyncTimeout

from tests.support.trainer import read_sequence_file, trainer_env
from tests.support.trainer_json import RUNNER


def test_architecture_example_config_parses_with_defaults():
    config = parse_config({"runner": {**RUNNER, "passes": 1}, "hyper_parameters": {}})
    assert config.runner.mode == "offline" and config.runner.max_bad_line_fraction == 0.01
    assert config.hyper_parameters.embedding_dim == 9
    assert config.hyper_parameters.fc_sizes == [400, 400, 400]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"runner": {**RUNNER, "pases": 2}}, "runner: unknown key(s) pases"),
        ({"runner": {**RUNNER, "mode": "batch"}}, "runner.mode: expected offline or online"),
        ({"runner": {**RUNNER, "end_date_hr": None}}, "runner.end_date_hr: required in offline"),
        ({"runner": {**RUNNER, "start_date_hr": "2019-12-21"}}, "runner.start_date_hr: expected"),
        ({"runner": {**RUNNER, "end_date_hr": "20191220/23"}}, "runner.end_date_hr: before"),
        ({"runner": {**RUNNER, "max_bad_line_fraction": 2}}, "runner.max_bad_line_fraction"),
        ({"runner": {**RUNNER, "mode": "online", "passes": 2}}, "runner.passes: online mode"),
        ({"runner": {**RUNNER, "max_abs_weight": 0}}, "runner.max_abs_weight: must be > 0"),
        ({"hyper_parameters": {"sparse_dim": 1}}, "hyper_parameters.sparse_dim"),
        ({"hyper_parameters": {"fc_sizes": []}}, "hyper_parameters.fc_sizes"),
        ({"hyper_parameters": {"dim": 8}}, "hyper_parameters: unknown key(s) dim"),
    ],
)
def test_config_errors_name_the_key(change, message):
    data = {"runner": RUNNER, "hyper_parameters": {}, **change}
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_config(data)


CLUSTER = {
    "PADDLE_PSERVERS_IP_PORT_LIST": "job-pserver-0.job:30240,job-pserver-1.job:30240",
    "PADDLE_TRAINERS_NUM": "3",
    "PADDLE_PORT": "30240",
    "POD_IP": "10.1.2.3",
}


def test_cluster_roles_come_from_the_task_index_and_host_names():
    trainer = role_from_env({**CLUSTER, "TRAINING_ROLE": "TRAINER", "VC_TASK_INDEX": "2"})
    assert (trainer.is_server, trainer.index, trainer.trainers) == (False, 2, 3)
    server = role_from_env({**CLUSTER, "TRAINING_ROLE": "PSERVER", "VC_TASK_INDEX": "1"})
    assert (server.is_server, server.index, server.port, server.bind_host) == (
        True, 1, 30240, "10.1.2.3",
    )  # fmt: skip
    assert server.pserver_endpoints[1] == "job-pserver-1.job:30240"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TRAINING_ROLE": "TRAINER", "VC_TASK_INDEX": "0"}, "PADDLE_PSERVERS_IP_PORT_LIST is not"),
        ({**CLUSTER, "VC_TASK_INDEX": "0"}, "TRAINING_ROLE is not set"),
        ({**CLUSTER, "TRAINING_ROLE": "WORKER"}, "TRAINING_ROLE='WORKER'"),
        ({**CLUSTER, "TRAINING_ROLE": "TRAINER"}, "neither PADDLE_TRAINER_ID nor VC_TASK_INDEX"),
        ({**CLUSTER, "TRAINING_ROLE": "TRAINER", "VC_TASK_INDEX": "3"}, "VC_TASK_INDEX=3 but"),
        (
            {**CLUSTER, "TRAINING_ROLE": "TRAINER", "VC_TASK_INDEX": "1", "PADDLE_TRAINER_ID": "0"},
            "PADDLE_TRAINER_ID and VC_TASK_INDEX disagree",
        ),
        ({**CLUSTER, "TRAINING_ROLE": "PSERVER", "VC_TASK_INDEX": "2"}, "only 2 pservers"),
        (
            {**CLUSTER, "TRAINING_ROLE": "PSERVER", "VC_TASK_INDEX": "0", "PADDLE_PORT": "1"},
            "PADDLE_PORT=1 but",
        ),
        (
            {**CLUSTER, "PADDLE_PSERVERS_IP_PORT_LIST": "a:1,a", "TRAINING_ROLE": "PSERVER"},
            "'a' is not host:port",
        ),
        ({**CLUSTER, "PADDLE_TRAINERS_NUM": "0", "TRAINING_ROLE": "TRAINER"}, "must be >= 1"),
    ],
)
def test_missing_or_inconsistent_env_names_the_variable(env, message):
    with pytest.raises(RoleError, match=message):
        role_from_env(env)


def test_offline_hours_skip_missing_donefiles(tmp_path):
    data = open_store(f"file://{tmp_path}")
    for hour in ("20191231/23", "20200101/01"):
        data.write_text(f"{hour}/donefile", "")
    assert hour_range("20191231/23", "20200101/01") == ["20191231/23", "20200101/00", "20200101/01"]
    assert ready_hours(data, "20191231/23", "20200101/01") == (
        ["20191231/23", "20200101/01"], ["20200101/00"],
    )  # fmt: skip


def test_online_waits_for_each_hour_in_turn(tmp_path):
    data = open_store(f"file://{tmp_path}")
    data.write_text("20191221/00/donefile", "")
    sleeps = []

    def sleep(seconds):  # the donefile of hour 01 appears while the trainer waits
        sleeps.append(seconds)
        data.write_text("20191221/01/donefile", "")

    hours = list(wait_for_hours(data, "20191221/00", "20191221/01", 5.0, sleep))
    assert hours == ["20191221/00", "20191221/01"] and sleeps == [5.0]


def test_sequence_file_round_trip_with_sync_markers():
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 2**64 - 1, 500, dtype=np.uint64, endpoint=True)
    values = rng.standard_normal((500, 9)).astype(np.float32)
    out = io.BytesIO()
    SequenceFileWriter(out).write_arrays(keys, values)
    data = out.getvalue()
    sync = data[80:96]  # after magic, two class names, flags and metadata count
    per_sync = -(-SYNC_INTERVAL // 44)  # like Paddle's writer: after 2000 bytes of key+value
    assert data.count(b"\xff\xff\xff\xff" + sync) == 500 // per_sync
    read_keys, read_values = read_sequence_file(data)
    np.testing.assert_array_equal(read_keys, keys)
    np.testing.assert_array_equal(read_values, values)


def test_sequence_file_is_readable_by_the_cube_builder_reader():
    keys = np.array([1, 2**63 + 5], dtype=np.uint64)
    values = np.arange(18, dtype=np.float32).reshape(2, 9)
    out = io.BytesIO()
    SequenceFileWriter(out).write_arrays(keys, values)
    read_keys, read_values = shared_reader(out.getvalue(), dim=9)
    np.testing.assert_array_equal(read_keys, keys)
    np.testing.assert_array_equal(read_values, values)


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def joined_pair(store, trainers: int = 2) -> tuple[PassSync, list[PassSync]]:
    """Trainer 0 and the others after the join handshake, run in threads on the real clock."""
    zero = PassSync(store, timeout=30, poll_seconds=0.01)
    others = [PassSync(store, timeout=30, poll_seconds=0.01) for _ in range(1, trainers)]

    def join(sync: PassSync, trainer: int) -> None:
        sync.join(trainer)
        sync.joined(trainer)  # (a trainer pulls the dense parameters in between)

    threads = [
        threading.Thread(target=join, args=(sync, i)) for i, sync in enumerate(others, start=1)
    ]
    for thread in threads:
        thread.start()
    zero.welcome(trainers)
    for thread in threads:
        thread.join(timeout=30)
    return zero, others


def test_join_gives_every_trainer_trainer_0s_attempt(tmp_path):
    store = open_store(f"file://{tmp_path}")
    zero, others = joined_pair(store, trainers=3)
    assert zero.attempt and all(o.attempt == zero.attempt for o in others)
    zero.publish_result(1, {"ok": True, "version": 1})
    assert [o.wait_result(1)["version"] for o in others] == [1, 1]


def test_a_welcome_left_by_an_earlier_attempt_is_not_taken(tmp_path):
    store = open_store(f"file://{tmp_path}")
    store.write_text("join/welcome.json", json.dumps({"attempt": "old", "nonces": {"1": "x"}}))
    clock = FakeClock()
    late = PassSync(store, timeout=3, clock=clock, sleep=clock.sleep)
    with pytest.raises(SyncTimeout, match="joining: no welcome from trainer 0"):
        late.join(1)
    assert late.attempt is None


def test_markers_of_another_attempt_are_ignored(tmp_path):
    store = open_store(f"file://{tmp_path}")
    zero, (one,) = joined_pair(store)
    store.write_text("pass-1/result.json", json.dumps({"ok": True, "attempt": "earlier"}))
    clock = FakeClock()
    one.clock, one.sleep, one.timeout = clock, clock.sleep, 3
    with pytest.raises(SyncTimeout, match="pass 1: trainer 0's result"):
        one.wait_result(1)
    zero.publish_result(1, {"ok": True, "version": 4})
    assert one.wait_result(1)["version"] == 4


def test_a_marker_of_this_attempt_counts_however_old_it_is(tmp_path):
    """A trainer that finished its pass long before trainer 0 started is not taken for a
    leftover of an earlier attempt (the clock rule it replaces waited an hour for it)."""
    store = open_store(f"file://{tmp_path}")
    zero, (one,) = joined_pair(store)
    one.clock = lambda: 5.0  # written "long ago"
    one.trainer_done(1, 1, {"reports": []})
    zero.trainer_done(1, 0, {"reports": []})
    assert len(zero.wait_trainers(1, 2)) == 2


def test_a_failed_pass_waits_for_the_others_to_acknowledge(tmp_path):
    store = open_store(f"file://{tmp_path}")
    zero, (one,) = joined_pair(store)
    clock = FakeClock()
    zero.clock, zero.sleep = clock, clock.sleep
    assert zero.wait_acknowledged(1, 2, timeout=2) == [1]
    one.acknowledge(1, 1)
    assert zero.wait_acknowledged(1, 2, timeout=2) == []


def test_auc_from_histograms_matches_exact_auc():
    rng = np.random.default_rng(0)
    labels = rng.random(20000) < 0.3
    scores = np.clip(rng.normal(0.4 + 0.2 * labels, 0.2), 0, 1)
    buckets = np.minimum((scores * 4096).astype(int), 4096)
    pos = np.bincount(buckets[labels], minlength=4097)
    neg = np.bincount(buckets[~labels], minlength=4097)
    assert auc_from_histograms(pos, neg) == pytest.approx(auc(labels, scores), abs=2e-3)


def test_expected_auc_is_the_mean_auc_over_clicks_drawn_from_the_probabilities():
    # Three instances: every labelling enumerated, each weighted by its probability and
    # its AUC counted where both classes are present, against the closed form.
    p = np.array([0.9, 0.2, 0.5])
    s = np.array([0.7, 0.1, 0.7])  # a tie between the first and the third
    pairs = [(i, j) for i in range(3) for j in range(3) if i != j]
    ordered = {(i, j): 1.0 if s[i] > s[j] else 0.5 if s[i] == s[j] else 0.0 for i, j in pairs}
    numerator = sum(p[i] * (1 - p[j]) * ordered[i, j] for i, j in pairs)
    denominator = sum(p[i] * (1 - p[j]) for i, j in pairs)
    assert expected_auc(p, s) == pytest.approx(numerator / denominator)
    # Scores that rank as the probabilities do are the Bayes ranking: no permutation of
    # them does better, and reversing it gives one minus its value.
    rng = np.random.default_rng(3)
    p = rng.beta(1, 20, 5000)
    best = expected_auc(p, p)
    assert expected_auc(p, np.log(p)) == pytest.approx(best)
    assert expected_auc(p, -p) == pytest.approx(1 - best)
    assert expected_auc(p, p + rng.normal(0, 0.02, p.size)) < best
    # Against clicks drawn many times, the AUC averages to it.
    drawn = [auc(rng.random(p.size) < p, p) for _ in range(200)]
    assert np.mean(drawn) == pytest.approx(best, abs=0.003)
    assert np.isnan(expected_auc(np.zeros(4), np.arange(4.0)))  # no clicks at all
    with pytest.raises(ValueError, match="differ in shape"):
        expected_auc(p, p[:-1])


@pytest.mark.parametrize("package", ["elasticctr_trainer", "elasticctr_serving"])
def test_zlib_survives_importing_paddle(package):
    """Paddle 2.6.2 shadows zlib's symbols: the image packages load Python's zlib first."""
    code = (
        f"import {package}, paddle, gzip, zlib\n"
        "assert gzip.decompress(gzip.compress(b'x' * 100000)) == b'x' * 100000\n"
        "assert zlib.decompress(zlib.compress(b'y' * 100000)) == b'y' * 100000\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]


def good_model() -> dict:
    rng = np.random.default_rng(1)
    return {
        "dense": {"fc_0.w_0": rng.normal(0, 0.1, (8, 4)), "fc_0.b_0": np.zeros(4)},
        "keys": np.array([3, 7, 11], dtype=np.uint64),
        "embeddings": rng.normal(0, 0.5, (3, 9)).astype(np.float32),
        "table_shows": 42.0,
        "predictions": rng.random(10),
        "max_abs_weight": 10.0,
    }


def test_a_sane_model_passes_the_check():
    assert check_model(**good_model()) == []


def test_an_embedding_at_the_sparse_rules_clamp_is_refused():
    """What a key seen only in show-0 lines ended as: every value at -10."""
    model = good_model()
    model["embeddings"][1] = -10.0
    (problem,) = check_model(**model)
    assert "embeddings of 1 keys reach |value| >= 10 (the sparse rule's clamp): 7: 10" in problem


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda m: m["dense"]["fc_0.w_0"].__setitem__((0, 0), np.nan),
            "dense parameter fc_0.w_0: 1 NaN",
        ),
        (
            lambda m: m["dense"]["fc_0.b_0"].__setitem__(2, 12.5),
            "dense parameter fc_0.b_0: |value| up to 12.5",
        ),
        (
            lambda m: m["embeddings"].__setitem__((2, 4), np.inf),
            "embeddings of 1 keys have NaN or infinite values (11)",
        ),
        (
            lambda m: m.__setitem__("table_shows", float("nan")),
            "the table's show counts sum to nan",
        ),
        (lambda m: m["predictions"].__setitem__(0, np.nan), "evaluation predictions: 1 NaN"),
        (lambda m: m.__setitem__("max_abs_weight", 1.0), "keys reach |value| >= 1:"),
    ],
)
def test_a_broken_model_is_refused_with_the_reason(damage, message):
    model = good_model()
    damage(model)
    assert any(message in p for p in check_model(**model)), check_model(**model)


def test_online_follows_minute_partitions_and_skips_what_will_not_come(tmp_path):
    data = open_store(f"file://{tmp_path}")
    data.write_text("20191221/2350/donefile", "")
    skipped: list[list[str]] = []
    sleeps = []

    def sleep(seconds):  # the joiner closes 23:55, then 00:05 of the next day (00:00 never)
        sleeps.append(seconds)
        if len(sleeps) == 1:
            data.write_text("20191221/2355/donefile", "")
        else:
            data.write_text("20191222/0005/donefile", "")

    parts = list(
        wait_for_hours(
            data, "20191221/23", "20191222/0005", 1.0, sleep, minutes=5, skipped=skipped.append
        )
    )
    # START given as an hour is that hour's first partition (23:00): 23:50 is ready and
    # later, so 23:00..23:45 are skipped at once; 00:00 is skipped once 00:05 is ready.
    assert parts == ["20191221/2350", "20191221/2355", "20191222/0005"]
    assert skipped == [
        [f"20191221/23{m:02d}" for m in range(0, 50, 5)],
        ["20191222/0000"],
    ]
    assert len(sleeps) == 2


def test_online_hours_skip_an_hour_once_a_later_one_is_ready(tmp_path):
    data = open_store(f"file://{tmp_path}")
    data.write_text("20191221/02/donefile", "")
    hours = list(wait_for_hours(data, "20191221/00", "20191221/02", 5.0, lambda s: None))
    assert hours == ["20191221/02"]


@pytest.mark.parametrize(
    ("hyper", "problem"),
    [
        ({"batch_size": 1.5}, "hyper_parameters.batch_size: expected an integer, got 1.5"),
        ({"batch_size": "abc"}, 'hyper_parameters.batch_size: expected an integer, got "abc"'),
        ({"batch_size": 0}, "hyper_parameters.batch_size: must be >= 1, got 0"),
    ],
)
@pytest.mark.parametrize("command", ["run", "local"])
def test_a_bad_trainer_json_ends_the_job_with_one_line(tmp_path, hyper, problem, command):
    """The image's side of trainer.json's types (the program's: tests/infra/test_config.py):
    a trainer given a bad value logs one line naming the file, the key, the value and what
    is allowed, and exits with the code that ends the Volcano Job (a restart would meet it
    again), with no traceback."""
    config = tmp_path / "trainer.json"
    config.write_text(json.dumps({"runner": RUNNER, "hyper_parameters": hyper}))
    done = subprocess.run(
        [sys.executable, "-m", "elasticctr_trainer", command, "--config", str(config)],
        capture_output=True, text=True, env=trainer_env(), timeout=120,
    )  # fmt: skip
    assert done.returncode == BAD_DATA_EXIT_CODE, done.stderr
    assert "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert line.endswith(f" ERROR trainer.json {config}: {problem}"), line


def test_generate_writes_the_default_stacks_slots_unless_told(tmp_path):
    """Data generated with the defaults fits a stack with the default slot_conf
    (stacks/slot.txt): the same slot ids, and every line uses only those."""
    from elasticctr_common.slotconf import read_slot_conf

    from tests.support.trainer import REPO

    done = subprocess.run(
        [sys.executable, "-m", "elasticctr_trainer", "generate", "--out", f"file://{tmp_path}",
         "--hours", "1", "--examples-per-hour", "200", "--files-per-hour", "1", "--heldout",
         "0"],
        capture_output=True, text=True, env=trainer_env(), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    stack_slots = read_slot_conf(REPO / "stacks" / "slot.txt")
    assert json.loads(done.stdout.splitlines()[-1])["slots"] == stack_slots
    store = open_store(f"file://{tmp_path}")
    assert read_slot_conf(tmp_path / "slot.conf") == stack_slots
    [part] = [p for p in store.list("train/20191221/00") if p.startswith("part")]
    used = {
        int(token.split(":")[1])
        for line in store.read_text(f"train/20191221/00/{part}").splitlines()
        for token in line.split()[2:]
    }
    assert used and used <= set(stack_slots)


@pytest.mark.parametrize(
    ("out", "says"),
    [
        ("file://data", "'data' is read as a host here; pass file:///<absolute directory>"),
        ("data", "data: not a storage URI; pass file:///<absolute directory>"),
    ],
)
def test_generate_refuses_an_out_that_is_not_an_absolute_place(tmp_path, out, says):
    """`--out file://data` once wrote into the current directory ("data" is the URI's host);
    now it, and a relative path, are one usage line, and nothing is written."""
    done = subprocess.run(
        [sys.executable, "-m", "elasticctr_trainer", "generate", "--out", out, "--hours", "1"],
        capture_output=True, text=True, env=trainer_env(), timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error: generate: --out {out}: ") and says in line, line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("mode", "hyper", "after_passes"),
    [
        # The offline default deletes between passes, which repeat the data; not after the
        # last, whose checkpoint the online job resumes on new data.
        ("offline", {}, [True, True, False]),
        ("offline", {"delete_threshold": 0}, [False, False, False]),
        ("offline", {"delete_threshold": 0, "show_click_decay_rate": 0.9}, [True, True, False]),
        ("online", {}, [False, False, False]),  # deletes nothing, decays nothing
        ("online", {"show_click_decay_rate": 0.9}, [True, True, True]),
        ("online", {"delete_threshold": 5}, [True, True, True]),
    ],
)
def test_the_table_shrinks_after_a_pass_only_when_more_of_the_same_data_follows(
    mode, hyper, after_passes
):
    from elasticctr_trainer.trainer import shrinks_after

    runner = {**RUNNER, "mode": mode, **({"passes": 3} if mode == "offline" else {})}
    config = parse_config({"runner": runner, "hyper_parameters": hyper})
    assert [shrinks_after(config, pass_id) for pass_id in (1, 2, 3)] == after_passes


@pytest.mark.parametrize(
    ("mode", "passes", "hyper", "last", "shrinks"),
    [
        # `passes` raised after the job finished: its last pass's table was kept whole.
        ("offline", 3, {}, {"pass_id": 2, "table_shrunk": False}, True),
        # Resumed after a crash between passes: that table was shrunk already.
        ("offline", 3, {}, {"pass_id": 2, "table_shrunk": True}, False),
        # Lines written before the record: every pass shrank.
        ("offline", 3, {}, {"pass_id": 2}, False),
        # Nothing left to train, or nothing to shrink with.
        ("offline", 2, {}, {"pass_id": 2, "table_shrunk": False}, False),
        (
            "offline",
            3,
            {"delete_threshold": 0, "show_click_decay_rate": 1},
            {"pass_id": 2, "table_shrunk": False},
            False,
        ),
        # The online job resuming the offline one trains new data.
        ("online", 3, {}, {"pass_id": 2, "table_shrunk": False}, False),
    ],
)
def test_an_offline_job_resumed_from_a_whole_table_shrinks_it_before_repeating_the_data(
    mode, passes, hyper, last, shrinks
):
    from elasticctr_trainer.checkpoint import Checkpoint
    from elasticctr_trainer.trainer import shrinks_at_resume

    runner = {**RUNNER, "mode": mode, **({"passes": passes} if mode == "offline" else {})}
    config = parse_config({"runner": runner, "hyper_parameters": hyper})
    line = json.dumps({"hour": None, "version": 2, "pservers": 1, "trainers": 1, **last})
    assert shrinks_at_resume(config, Checkpoint.from_line(line)) is shrinks
