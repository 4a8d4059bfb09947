"""trainer.json (docs/architecture.md): a `runner` part (I/O, mode, passes) and a
`hyper_parameters` part (the model). The Pulumi program writes it (components/training.py,
`TrainerConfig.to_json`), the trainer image reads it (`load_config`); the demo, the
benchmarks and the tests write and read it with the same types. Unknown keys are an
error, so a typo is never silently ignored. Every default is written once, here: the stack
model (infra/config.py) takes its training defaults from these classes.
"""

from __future__ import annotations

import json
import math
import types
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Literal, Union, get_args, get_origin, get_type_hints

from .contract import DATA_DIR, HOUR_FORMAT
from .crosses import cross_problems
from .feedback import PARTITION_MINUTES, parse_partition
from .lines import FORMATS, DenseFeature, LineFormat, dense_feature_problems

Mode = Literal["offline", "online"]
# The built-in networks (elasticctr_trainer/networks.py), or "custom": the module that
# `network_module` names.
Model = Literal["wide_deep", "dnn", "deepfm", "dcn", "custom"]
DataFormat = Literal["elasticctr", "paddlerec"]
# Paddle's SparseNaiveSGDRule steps by the sum of an id's gradients in a push, one step's
# worth an example; SparseAdaGradSGDRule by their mean over the id's shows in it, so an id
# that many examples of a push share learns that many times slower (docs/trainer.md).
SparseOptimizer = Literal["sgd", "adagrad"]
# What the network sees of a dense feature x: x itself, or sign(x) * ln(1 + |x|).
DenseTransform = Literal["none", "signed_log1p"]
MODES: tuple[str, ...] = get_args(Mode)
MODELS: tuple[str, ...] = get_args(Model)
SPARSE_OPTIMIZERS: tuple[str, ...] = get_args(SparseOptimizer)
DENSE_TRANSFORMS: tuple[str, ...] = get_args(DenseTransform)


# Networks whose dense parameters are the same when there are no dense features: the DNN's
# layers alone (wide_deep and deepfm add parameters only for dense features). A checkpoint
# of one restores into another; any other change of network does not.
_SHARED_WITHOUT_DENSE = ("dnn", "wide_deep", "deepfm")
# What dense_parameters says for them: running stacks record it (the guard), so it stays
# the same when a network joins the group.
DNN_LAYERS_ONLY = "dnn layers only"


def dense_parameters(model: str, network_module: str, dense_features: bool) -> str:
    """What the network adds to the names and shapes of the dense parameters: for two
    settings with the same dense features (data.dense_features is watched on its own),
    equal exactly when a checkpoint of one restores into the other. Tested against the
    networks as Paddle builds them (test_trainer_networks.py)."""
    if model in _SHARED_WITHOUT_DENSE and not dense_features:
        return DNN_LAYERS_ONLY
    if model == "custom":
        return f"custom ({network_module})"
    return model


class ConfigError(ValueError):
    """trainer.json is invalid; the message names the key."""


@dataclass(frozen=True)
class Runner:
    train_data_uri: str
    start_date_hr: str
    slot_conf: str
    model_uri: str
    checkpoint_uri: str
    mode: Mode = "offline"  # offline: train START..END `passes` times; online: one pass per hour
    # The data's time partitions: 60 reads hour directories YYYYMMDD/HH; N < 60 (dividing
    # an hour) reads N-minute ones YYYYMMDD/HHMM, as the feedback joiner writes them.
    partition_minutes: int = 60
    end_date_hr: str | None = None  # required offline; online stops after it when set
    passes: int = 1
    max_bad_line_fraction: float = 0.01
    # A version is refused when a dense weight or embedding value reaches this (modelcheck.py)
    max_abs_weight: float = 10.0
    mlflow_experiment: str = "elasticctr"
    eval_data_uri: str | None = None  # trainer 0 evaluates and saves predictions per version
    work_dir: str = DATA_DIR  # local scratch: staged data, checkpoint shards
    thread_num: int = 1  # Paddle dataset reader/trainer threads per trainer
    online_poll_seconds: float = 60.0  # also offline, while waiting for the data
    # Offline: how long to wait for END's donefile before training the hours that are ready.
    data_wait_seconds: float = 3600.0
    sync_timeout_seconds: float = 3600.0  # how long a trainer waits for its peers
    # The publish gate (needs eval_data_uri): a version whose held-out AUC is below the
    # serving version's by more than this is kept (uploaded, no donefile line), not published.
    publish_margin: float = 0.002
    publish_every_version: bool = False  # true: no gate, every version that passes its check
    # The data's line format (elasticctr_common.lines): ElasticCTR's line, or PaddleRec's
    # slot format (which can carry hyper_parameters.dense_features).
    data_format: DataFormat = "elasticctr"


AUTO_CROSSES: Final = "auto"  # hyper_parameters.crosses: chosen from the data


@dataclass(frozen=True)
class HyperParameters:
    sparse_dim: int = 1000001
    embedding_dim: int = 9
    fc_sizes: list[int] = field(default_factory=lambda: [400, 400, 400])
    learning_rate: float = 0.0001  # dense Adam
    batch_size: int = 32
    # The sparse table's update rule and its rates for the ids' own weights (embed_w) and
    # their vectors (embedx); None: by optimizer (SPARSE_RATES). An unset optimizer is
    # sgd for a new model, and for a job resuming a checkpoint the one it was trained with
    # (the table's rows depend on it): checkpoint.resolve_model.
    sparse_optimizer: SparseOptimizer | None = None
    sparse_learning_rate: float | None = None
    embedx_learning_rate: float | None = None
    sparse_initial_range: float = 0.0001
    model: Model = "wide_deep"  # a built-in network (networks.py) or "custom"
    # model "custom": the user's network, a Python file (path ending .py) or an importable
    # module name, with `build(inputs) -> logit` (networks.py, docs/trainer.md).
    network_module: str | None = None
    # Dense features of PaddleRec's slot format, [{"name": ..., "dim": ...}], in the order
    # the network gets them; each line must carry every one in full.
    dense_features: list[DenseFeature] = field(default_factory=list)
    # Pairs of slot.conf's slots, each crossed into one more sparse input (elasticctr_common
    # .crosses): [[101, 102], ...], [] for none, or "auto" (the default, measured on the
    # quality matrix): trainer 0 of a new model chooses them from the data
    # (elasticctr_trainer.auto_crosses), a resumed model keeps its own. Part of the model's
    # layout (a checkpoint records them).
    crosses: list[list[int]] | Literal["auto"] = "auto"
    # Applied in the model's graph (so the exported model applies it too): counts and other
    # heavy-tailed values squashed before the first layer. Unset, like sparse_optimizer:
    # NEW_MODEL_DENSE_TRANSFORM for a new model, a resumed one keeps its own (checkpoint
    # .with_resolved_model).
    dense_transform: DenseTransform | None = None
    # The CTR accessor (model.py): an id's score is (shows - clicks) * nonclk_coeff + clicks *
    # click_coeff; with both 1 it counts shows. Below embedx_threshold an id has only its
    # per-id weight (embed_w), no embedding vector. After every pass the scores decay by
    # show_click_decay_rate and ids scoring below delete_threshold are deleted: what a
    # rare id learnt in one pass is forgotten before the next, so passes over the same data
    # cannot memorise the long tail (docs/trainer.md, "Model quality", measured there).
    # None: by mode (delete_threshold_for): offline passes repeat their data, online ones
    # never do, and deleting there would forget every rare id at each small partition.
    embedx_threshold: int = 50
    nonclk_coeff: float = 1.0
    click_coeff: float = 1.0
    show_click_decay_rate: float = 1.0
    delete_threshold: float | None = None
    dense_l2: float = 0.0  # L2 regularisation of the FC weights

    def sparse_rule(self) -> tuple[SparseOptimizer, float, float]:
        """(optimizer, embed_w's rate, embedx's rate) as the job uses them: unset rates by
        optimizer; with adagrad the vectors' rate is the weights' unless set (as it always
        was). The optimizer must be resolved (checkpoint.resolve_model)."""
        if self.sparse_optimizer is None:
            raise ValueError("hyper_parameters.sparse_optimizer: unset (resolved at start)")
        weights, vectors = SPARSE_RATES[self.sparse_optimizer]
        weight_rate = self.sparse_learning_rate or weights
        if self.sparse_optimizer == "adagrad" and self.sparse_learning_rate is not None:
            vectors = self.sparse_learning_rate
        return self.sparse_optimizer, weight_rate, self.embedx_learning_rate or vectors

    def dense_rule(self) -> DenseTransform:
        """dense_transform as the job uses it: it must be resolved (checkpoint.resolve_model)."""
        if self.dense_transform is None:
            raise ValueError("hyper_parameters.dense_transform: unset (resolved at start)")
        return self.dense_transform

    def deletion(self) -> float:
        """delete_threshold as the job uses it: parse_config sets an unset one by mode."""
        if self.delete_threshold is None:
            raise ValueError("hyper_parameters.delete_threshold: unset (parse_config sets it)")
        return self.delete_threshold


@dataclass(frozen=True)
class TrainerConfig:
    runner: Runner
    hyper_parameters: HyperParameters

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        """trainer.json's text; checked as the trainer checks it, so the program never
        writes a file the image refuses."""
        data = self.to_dict()
        parse_config(data)
        return json.dumps(data, indent=2)


def parse_hour(text: str) -> datetime:
    """A date-hour YYYYMMDD/HH (an hour directory's name, data.start/end)."""
    try:
        return datetime.strptime(text, HOUR_FORMAT)
    except ValueError:
        raise ValueError(f"expected YYYYMMDD/HH, got {text!r}") from None


PLURALS = {int: "integers", float: "numbers", str: "strings"}


def _type_problem(annotation: Any, value: Any) -> str:
    """What `value` should have been for a field of type `annotation` ("" if it is one).
    JSON has one number type: 1.5 is no batch size, and true is no integer."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        options = get_args(annotation)
        if value is None and type(None) in options:
            return ""
        problems = [_type_problem(kind, value) for kind in options if kind is not type(None)]
        return "" if "" in problems else " or ".join(problems)
    if origin is Literal:
        choices = get_args(annotation)
        return "" if value in choices else " or ".join(map(str, choices))
    if origin is list:
        [item] = get_args(annotation)
        good = isinstance(value, list) and not any(_type_problem(item, v) for v in value)
        return "" if good else f"a list of {_plural(item)}"
    if annotation is bool:
        return "" if isinstance(value, bool) else "true or false"
    if annotation is int:
        return "" if isinstance(value, int) and not isinstance(value, bool) else "an integer"
    if annotation is float:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return "" if number and math.isfinite(value) else "a finite number"
    if annotation is str:
        return "" if isinstance(value, str) else "a string"
    return ""


def _plural(annotation: Any) -> str:
    if get_origin(annotation) is list:
        return f"lists of {_plural(get_args(annotation)[0])}"
    return PLURALS[annotation]


def _build(cls: type, section: str, data: Any) -> tuple[Any, list[str]]:
    """The `cls` of section `data`, or None and the problems of its keys."""
    if not isinstance(data, dict):
        return None, [f"{section}: expected an object"]
    hints = get_type_hints(cls)
    unknown = sorted(set(data) - set(hints))
    problems = [f"{section}: unknown key(s) {', '.join(unknown)}"] if unknown else []
    missing = [f.name for f in fields(cls) if f.name not in data and f.init and _required(f)]
    problems += [f"{section}.{name}: required" for name in missing]
    for key, value in data.items():
        if key in hints and (expected := _type_problem(hints[key], value)):
            problems.append(f"{section}.{key}: expected {expected}, got {json.dumps(value)[:60]}")
    return (None, problems) if problems else (cls(**data), [])


def _required(spec: Any) -> bool:
    return bool(spec.default is MISSING and spec.default_factory is MISSING)


def parse_config(data: Any) -> TrainerConfig:
    if not isinstance(data, dict):
        raise ConfigError("trainer.json: expected an object with runner and hyper_parameters")
    unknown = sorted(set(data) - {"runner", "hyper_parameters"})
    if unknown:
        raise ConfigError(f"trainer.json: unknown key(s) {', '.join(unknown)}")
    runner, problems = _build(Runner, "runner", data.get("runner"))
    hyper_data = data.get("hyper_parameters", {})
    if isinstance(hyper_data, dict) and "dense_features" in hyper_data:
        hyper_data = {**hyper_data, "dense_features": _dense_features(hyper_data["dense_features"])}
    hyper, more = _build(HyperParameters, "hyper_parameters", hyper_data)
    if problems or more:
        raise ConfigError("\n".join(problems + more))
    _check(runner, hyper)
    if hyper.delete_threshold is None:
        hyper = replace(hyper, delete_threshold=delete_threshold_for(runner.mode))
    return TrainerConfig(runner, hyper)


# What delete_threshold is when not set: shows a pass an id needs to be kept. Offline, the
# measured remedy for memorised rare ids (docs/trainer.md, "Model quality"); online, where
# every example is trained on once, nothing to memorise: ids are never deleted (the table
# is bounded by sparse_dim).
DELETE_THRESHOLD_BY_MODE: dict[str, float] = {"offline": 1000.0, "online": 0.0}


# The sparse rates when not set, (embed_w, embedx), by optimizer: sgd's measured on the
# quality matrix (docs/trainer.md, "Model quality"), adagrad's what it always had.
SPARSE_RATES: dict[str, tuple[float, float]] = {"sgd": (0.01, 0.01), "adagrad": (0.05, 0.05)}
# The optimizer of a new model when none is set.
NEW_MODEL_SPARSE_OPTIMIZER: SparseOptimizer = "sgd"
# The dense transform of a new model when none is set (measured: docs/trainer.md, "Dense
# features").
NEW_MODEL_DENSE_TRANSFORM: DenseTransform = "signed_log1p"


def delete_threshold_for(mode: str) -> float:
    return DELETE_THRESHOLD_BY_MODE[mode]


def _dense_features(data: Any) -> list[DenseFeature]:
    key = "hyper_parameters.dense_features"
    if not isinstance(data, list):
        raise ConfigError(f'{key}: expected a list of {{"name": ..., "dim": ...}}')
    features = []
    for item in data:
        if isinstance(item, DenseFeature):
            features.append(item)
            continue
        if not isinstance(item, dict) or set(item) != {"name", "dim"}:
            raise ConfigError(f'{key}: expected {{"name": ..., "dim": ...}}, got {item!r}')
        if not isinstance(item["name"], str) or type(item["dim"]) is not int:
            raise ConfigError(f"{key}: name must be a string and dim an integer, got {item!r}")
        features.append(DenseFeature(item["name"], item["dim"]))
    problems = dense_feature_problems(features)
    if problems:
        raise ConfigError(f"{key}: {'; '.join(problems)}")
    return features


def _check(runner: Runner, hyper: HyperParameters) -> None:
    if runner.mode not in MODES:
        raise ConfigError(f"runner.mode: expected {' or '.join(MODES)}, got {runner.mode!r}")
    minutes = runner.partition_minutes
    if type(minutes) is not int or minutes not in PARTITION_MINUTES:
        allowed = ", ".join(map(str, PARTITION_MINUTES))
        raise ConfigError(
            f"runner.partition_minutes: must divide an hour ({allowed}), got {minutes!r}"
        )
    for key in ("start_date_hr", "end_date_hr"):
        value = getattr(runner, key)
        if value is not None:
            try:
                parse_partition(value, minutes)
            except ValueError as err:
                raise ConfigError(f"runner.{key}: {err}") from None
    if runner.mode == "offline" and runner.end_date_hr is None:
        raise ConfigError("runner.end_date_hr: required in offline mode")
    if runner.end_date_hr is not None and parse_partition(
        runner.end_date_hr, minutes
    ) < parse_partition(runner.start_date_hr, minutes):
        raise ConfigError("runner.end_date_hr: before runner.start_date_hr")
    if runner.passes < 1:
        raise ConfigError(f"runner.passes: must be >= 1, got {runner.passes}")
    if runner.mode == "online" and runner.passes != 1:
        raise ConfigError(
            "runner.passes: online mode trains each partition once (one pass per partition)"
        )
    if not 0 <= runner.max_bad_line_fraction <= 1:
        raise ConfigError(
            "runner.max_bad_line_fraction: must be within [0, 1], got "
            f"{runner.max_bad_line_fraction}"
        )
    if not runner.max_abs_weight > 0:
        raise ConfigError(f"runner.max_abs_weight: must be > 0, got {runner.max_abs_weight}")
    if runner.data_wait_seconds < 0:
        raise ConfigError(f"runner.data_wait_seconds: must be >= 0, got {runner.data_wait_seconds}")
    if not runner.online_poll_seconds > 0:
        raise ConfigError(
            f"runner.online_poll_seconds: must be > 0, got {runner.online_poll_seconds}"
        )
    if runner.thread_num < 1:
        raise ConfigError(f"runner.thread_num: must be >= 1, got {runner.thread_num}")
    if hyper.sparse_dim < 2:
        raise ConfigError(
            f"hyper_parameters.sparse_dim: must be >= 2 (key 0 is padding), got {hyper.sparse_dim}"
        )
    # A table row is embed_w and embedding_dim - 1 embedding columns: 1 leaves none.
    if hyper.embedding_dim < 2:
        raise ConfigError(
            f"hyper_parameters.embedding_dim: must be >= 2, got {hyper.embedding_dim}"
        )
    if not hyper.learning_rate > 0:
        raise ConfigError(f"hyper_parameters.learning_rate: must be > 0, got {hyper.learning_rate}")
    for key in ("sparse_learning_rate", "embedx_learning_rate"):
        if getattr(hyper, key) is not None and not getattr(hyper, key) > 0:
            raise ConfigError(
                f"hyper_parameters.{key}: must be > 0 (or unset: by sparse_optimizer), got "
                f"{getattr(hyper, key)}"
            )
    if hyper.sparse_initial_range < 0:
        raise ConfigError(
            f"hyper_parameters.sparse_initial_range: must be >= 0, got {hyper.sparse_initial_range}"
        )
    if not runner.sync_timeout_seconds > 0:
        raise ConfigError(
            f"runner.sync_timeout_seconds: must be > 0, got {runner.sync_timeout_seconds}"
        )
    if not hyper.fc_sizes or any(size < 1 for size in hyper.fc_sizes):
        raise ConfigError(
            f"hyper_parameters.fc_sizes: must be a non-empty list of positive sizes, got "
            f"{json.dumps(hyper.fc_sizes)}"
        )
    if hyper.batch_size < 1:
        raise ConfigError(f"hyper_parameters.batch_size: must be >= 1, got {hyper.batch_size}")
    if hyper.model not in MODELS:
        raise ConfigError(f"hyper_parameters.model: expected one of {MODELS}, got {hyper.model!r}")
    if hyper.model == "custom" and not hyper.network_module:
        raise ConfigError(
            "hyper_parameters.network_module: required with model custom (a .py file or a "
            "module name whose build(inputs) returns the click logit)"
        )
    if hyper.model != "custom" and hyper.network_module is not None:
        raise ConfigError(
            f"hyper_parameters.network_module: only with model custom, got "
            f"{hyper.network_module!r} with model {hyper.model}"
        )
    if runner.data_format not in FORMATS:
        raise ConfigError(
            f"runner.data_format: expected one of {FORMATS}, got {runner.data_format!r}"
        )
    if hyper.dense_features and runner.data_format != "paddlerec":
        raise ConfigError(
            "hyper_parameters.dense_features: need runner.data_format paddlerec (ElasticCTR "
            "lines have no place for dense features)"
        )
    cross_errors = [] if hyper.crosses == AUTO_CROSSES else cross_problems(hyper.crosses)
    if cross_errors:
        raise ConfigError(f"hyper_parameters.crosses: {'; '.join(cross_errors)}")
    for key in ("embedx_threshold", "nonclk_coeff", "click_coeff", "delete_threshold", "dense_l2"):
        if getattr(hyper, key) is not None and getattr(hyper, key) < 0:
            raise ConfigError(f"hyper_parameters.{key}: must be >= 0, got {getattr(hyper, key)}")
    if not 0 < hyper.show_click_decay_rate <= 1:
        raise ConfigError(
            "hyper_parameters.show_click_decay_rate: must be within (0, 1], "
            f"got {hyper.show_click_decay_rate}"
        )
    if runner.publish_margin < 0:
        raise ConfigError(f"runner.publish_margin: must be >= 0, got {runner.publish_margin}")


def line_format(config: TrainerConfig) -> LineFormat:
    """How the job's data lines are written."""
    return LineFormat(config.runner.data_format, tuple(config.hyper_parameters.dense_features))


def load_config(path: str | Path) -> TrainerConfig:
    """trainer.json at `path`; a ConfigError whose lines each name the file, then the key,
    the value and what is allowed."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigError(f"{path}: cannot be read ({err.strerror or err})") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (a byte at offset {err.start})") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: not JSON ({err})") from None
    try:
        return parse_config(data)
    except ConfigError as err:
        raise ConfigError("\n".join(f"{path}: {line}" for line in str(err).splitlines())) from None


_RUNNER_KEYS = frozenset(f.name for f in fields(Runner))


def section_of(key: str) -> str:
    """The trainer.json section a stack's `training.KEY` goes to: the runner's when it has
    a field of that name, else the model's. The program and the demo map by this rule."""
    return "runner" if key in _RUNNER_KEYS else "hyper_parameters"


def apply_settings(data: dict[str, Any], settings: list[str]) -> dict[str, Any]:
    """trainer.json `data` with `section.key=JSON` settings applied (the demo's and the
    benchmark's --set), each checked as trainer.json is: a bad one names itself. Section
    `training` is the stack's: each key goes where the program would put it."""
    for item in settings:
        key, sep, text = item.partition("=")
        section, dot, name = key.partition(".")
        if not sep or not dot or section not in ("training", "runner", "hyper_parameters"):
            raise ConfigError(
                f"{item!r}: expected training.KEY=JSON (the stack's training section), "
                "runner.KEY=JSON or hyper_parameters.KEY=JSON"
            )
        if section == "training":
            section = section_of(name)
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text  # a bare string: --set hyper_parameters.model=dnn
        data.setdefault(section, {})[name] = value
    parse_config(data)
    return data
