"""Reading the stack config: the only module that touches pulumi.Config.

Every problem becomes one line naming the key, the value and what is allowed, e.g.
`elasticctr:trainers must be an integer >= 1, got "0"`; all lines are raised together
in one ConfigError before the program registers any resource.
"""

from __future__ import annotations

import copy
import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin

import pulumi
import yaml
from elasticctr_common.crosses import cross_problems
from elasticctr_common.slotconf import SLOT_CONF_SUFFIXES, SlotConfError, parse_slot_conf
from elasticctr_common.trainer_json import AUTO_CROSSES
from pulumi.runtime import config as runtime_config
from pydantic import BaseModel, SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from infra.config import (
    BOOLEAN_TEXT,
    INTEGER_TEXT,
    MOVED_KEYS,
    NUMBER_TEXT,
    SECRET_FIELDS,
    Problem,
    Problems,
    StackConfig,
    is_secret,
    shown,
)

NAMESPACE = "elasticctr"
PROJECT_DIR = Path(__file__).resolve().parent.parent


class ConfigError(pulumi.RunError):
    """Invalid stack config; `problems` holds one line per problem.

    A RunError: Pulumi prints the message alone, without a Python traceback."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid stack config:\n  " + "\n  ".join(problems))


@dataclass(frozen=True)
class LoadedConfig:
    stack: StackConfig
    slots: list[int]  # slot ids of slot.conf, in model input order
    slot_conf_text: str
    # training.network_module's text when it names a .py file of the project (shipped to
    # the pods in the training ConfigMap), else None
    network_text: str | None = None


def load(project_dir: Path = PROJECT_DIR) -> LoadedConfig:
    """Read, validate and return the stack config, or raise ConfigError."""
    raw, secret_keys = _read_raw()
    problems, moved = _move_keys(raw)
    problems += _misspelt_namespaces() + _unknown_keys(raw) + _plaintext_secrets(raw, secret_keys)
    known = {k: v for k, v in raw.items() if k in StackConfig.model_fields}
    stack, found, failed = _validate(known, raw)
    problems += found
    # The stack file as written, for the keys not refused already (one line per key).
    refused = {line.split(" ", 1)[0] for line in problems}
    written = _stack_file_scalars(pulumi.runtime.get_root_directory(), pulumi.get_stack())
    problems += [line for line in written if line.split(" ", 1)[0] not in refused]
    slot_conf = known.get("slot_conf") if ("slot_conf",) not in failed else None
    slots, slot_text = _read_slots(stack.slot_conf if stack else slot_conf, project_dir, problems)
    if stack is not None and slots and stack.training.crosses != AUTO_CROSSES:
        problems += [
            f"{NAMESPACE}:training.crosses {problem} (slot_conf {stack.slot_conf})"
            for problem in cross_problems(stack.training.crosses, slots)
        ]
    network = stack.training.network_module if stack else ""
    network_text = _read_network(network, project_dir, problems)
    if problems or stack is None:
        # A problem of a moved value names the key as the stack file has it.
        for new, old in moved.items():
            new_name, old_name = f"{NAMESPACE}:{new} ", f"{NAMESPACE}:{old} "
            problems = [
                old_name + line[len(new_name) :] if line.startswith(new_name) else line
                for line in problems
            ]
        raise ConfigError(problems)
    return LoadedConfig(
        stack=stack, slots=slots, slot_conf_text=slot_text, network_text=network_text
    )


Path_ = tuple[str, ...]
MAX_PASSES = 100  # each pass drops at least one value: a bound no real stack file reaches


def _validate(
    known: dict[str, Any], raw: dict[str, Any]
) -> tuple[StackConfig | None, list[str], set[Path_]]:
    """The stack config, or None; every problem line; the paths of the values found bad.

    Pydantic runs a model's checks across fields (data.end after data.start, the keys a
    cloud needs) only once each of its fields is valid, so a first pass reports those of
    valid sections only. Each further pass drops the values found bad (their defaults take
    their place) and validates again, to report the checks across fields that the bad
    values held back; a check that read a dropped value is not reported, as it may not
    hold for the value the user meant."""
    data = copy.deepcopy(known)
    lines: list[str] = []
    failed: set[Path_] = set()
    for _ in range(MAX_PASSES):
        try:
            stack = StackConfig.model_validate(data)
        except ValidationError as err:
            before = set(failed)  # what earlier passes dropped: this pass's checks read defaults
            dropped = False
            for error in err.errors():
                for path, reads, line in _problems_of(error, raw):
                    held = any(_overlaps(r, f) for r in (path, *reads) for f in before)
                    if not held and line not in lines:
                        lines.append(line)
                    dropped |= _drop(data, path, failed)
            if not dropped:
                break
            continue
        return (stack if not failed else None), lines, failed
    return None, lines, failed


def _overlaps(path: Path_, other: Path_) -> bool:
    """One path holds the other (or they are the same)."""
    shorter = min(len(path), len(other))
    return path[:shorter] == other[:shorter]


def _drop(data: dict[str, Any], path: Path_, failed: set[Path_]) -> bool:
    """Remove the deepest object key on `path` that `data` has; record it as failed."""
    node: Any = data
    deepest: tuple[dict[str, Any], str, Path_] | None = None
    for depth, part in enumerate(path):
        if isinstance(node, dict) and part in node:
            deepest = (node, part, path[: depth + 1])
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            break
    if deepest is None:
        return False
    parent, key, where = deepest
    del parent[key]
    failed.add(where)
    return True


def as_secret(value: SecretStr | None) -> pulumi.Output[str] | None:
    """A secret of the config as a Pulumi secret (None stays None)."""
    return pulumi.Output.secret(value.get_secret_value()) if value is not None else None


def _read_raw() -> tuple[dict[str, Any], set[str]]:
    """Every `elasticctr:*` key that is set, objects decoded from JSON, and the secret ones."""
    config = pulumi.Config(NAMESPACE)
    # The model's keys, plus any other key of our namespace so that a typo is reported.
    prefix = f"{NAMESPACE}:"
    present = {*runtime_config.CONFIG.get(), *runtime_config.get_config_env()}
    names = {
        *StackConfig.model_fields,
        *(k[len(prefix) :] for k in present if k.startswith(prefix)),
    }
    raw: dict[str, Any] = {}
    for name in sorted(names):
        value = config.get(name)
        if value is None:
            continue
        # `pulumi config set k v` stores strings; --path stores JSON objects. Scalars stay
        # strings here and pydantic converts them ("4" -> 4) with the field's own rules.
        if value[:1] in "{[":
            try:
                raw[name] = json.loads(value)
                continue
            except ValueError:
                pass
        raw[name] = value
    secret = {name for name in raw if runtime_config.is_config_secret(config.full_key(name))}
    return raw, secret


def _move_keys(raw: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """Each old key of MOVED_KEYS set in `raw` goes to its new place there, with a warning
    saying how to rename it; set beside its new key, it is a problem (which one is meant?).
    The problems, and {new key: old key} of the values moved."""
    problems, moved = [], {}
    for old, new in MOVED_KEYS.items():
        if old not in raw:
            continue
        section, key = new.split(".")
        target = raw.setdefault(section, {})
        if not isinstance(target, dict):
            continue  # the section itself is wrong: validation says so
        if key in target:
            problems.append(
                f"{NAMESPACE}:{old} is the old name of {NAMESPACE}:{new}, and both are set: "
                f"pulumi config rm {NAMESPACE}:{old}"
            )
            del raw[old]  # reported here, not again as an unknown key
            continue
        target[key] = raw.pop(old)
        moved[new] = old
        pulumi.log.warn(
            f"{NAMESPACE}:{old} is now {NAMESPACE}:{new} and is read as that: rename it with "
            f"`pulumi config rm {old}` and `pulumi config set --path {new} {target[key]}`"
        )
    return problems, moved


def _stack_file_scalars(root: str | None, stack: str) -> list[str]:
    """The stack file's numbers and booleans as written. YAML reads `trainers: 4.0`,
    `1_0`, `+4` and `0x10` as numbers and the engine hands the program "4", "10", "4" and
    "16": only the file shows what was typed. No file (mocks, another config source): []."""
    if not root:
        return []
    try:
        project = yaml.safe_load((Path(root) / "Pulumi.yaml").read_text(encoding="utf-8"))
        relative = Path(project.get("stackConfigDir") or ".") / f"Pulumi.{stack}.yaml"
        document = yaml.compose((Path(root) / relative).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, AttributeError):
        return []  # the engine read them, or says what is wrong with them
    config = _mapping(document).get("config")
    problems = []
    for key, node in _mapping(config).items():
        if key.startswith(f"{NAMESPACE}:"):
            name = key.split(":", 1)[1]
            problems += _written(node, MOVED_KEYS.get(name, name).split("."), str(relative))
    return problems


def _mapping(node: Any) -> dict[str, Any]:
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {k.value: v for k, v in node.value if isinstance(k, yaml.ScalarNode)}


def _written(node: Any, loc: list[str], source: str) -> list[str]:
    """Problems of the plain (unquoted) scalars under `node`, at `loc`."""
    if isinstance(node, yaml.MappingNode | yaml.SequenceNode):
        items = (
            _mapping(node).items()
            if isinstance(node, yaml.MappingNode)
            else ((str(index), item) for index, item in enumerate(node.value))
        )
        return [p for key, item in items for p in _written(item, [*loc, key], source)]
    if not isinstance(node, yaml.ScalarNode) or node.style:  # quoted: the string it is
        return []
    field, _ = _field_at(StackConfig, loc)
    annotation = field.annotation if field is not None else None
    text = node.value
    if annotation is int and not INTEGER_TEXT.fullmatch(text):
        allowed = f"an integer{_bounds(field)}"
    elif annotation is float and not NUMBER_TEXT.fullmatch(text):
        allowed = f"a number{_bounds(field)}"
    elif annotation is bool and text not in BOOLEAN_TEXT:
        allowed = "true or false"
    else:
        return []
    return [
        f"{NAMESPACE}:{'.'.join(loc)} must be {allowed}, got {text[:40]} in {source} (YAML "
        "would hand the program another value)"
    ]


def _misspelt_namespaces() -> list[str]:
    """`elasticcrt:trainers 8` would be ignored: a namespace a typo away from ours is an error."""
    present = {*runtime_config.CONFIG.get(), *runtime_config.get_config_env()}
    problems = []
    for key in sorted(present):
        namespace = key.split(":", 1)[0]
        if namespace != NAMESPACE and _typo_of(namespace.lower(), NAMESPACE):
            name = key.split(":", 1)[-1]
            problems.append(
                f"{key} is not read: the config namespace is {NAMESPACE}, got {namespace!r} "
                f"(pulumi config rm {key}; pulumi config set {NAMESPACE}:{name} ...)"
            )
    return problems


def _typo_of(word: str, target: str) -> bool:
    """Two edits or fewer (insert, delete, substitute, swap of neighbours) from `target`."""
    if word == target:
        return True
    previous2: list[int] = []
    previous = list(range(len(target) + 1))
    for i, a in enumerate(word, 1):
        current = [i]
        for j, b in enumerate(target, 1):
            cost = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a != b))
            if i > 1 and j > 1 and a == target[j - 2] and word[i - 2] == b:
                cost = min(cost, previous2[j - 2] + 1)
            current.append(cost)
        previous2, previous = previous, current
    return previous[-1] <= 2


def _unknown_keys(raw: dict[str, Any]) -> list[str]:
    allowed = ", ".join(StackConfig.model_fields)
    return [
        f"{NAMESPACE}:{key} is not a config key of this project"
        f"{_did_you_mean(key, list(StackConfig.model_fields))}; allowed: {allowed}"
        for key in raw
        if key not in StackConfig.model_fields
    ]


def _did_you_mean(name: str, siblings: list[str]) -> str:
    """ " (did you mean X?)" for an unknown key: a sibling a typo away, else the key of that
    name elsewhere in the config (`job_name` -> training.job_name), else ""."""
    close = [s for s in siblings if _typo_of(name.lower(), s)] or difflib.get_close_matches(
        name.lower(), siblings, n=1, cutoff=0.75
    )
    if close:
        return f" (did you mean {close[0]}?)"
    elsewhere = [path for path in _key_paths(StackConfig) if path.rsplit(".", 1)[-1] == name]
    if not elsewhere:
        leaves = {path.rsplit(".", 1)[-1]: path for path in _key_paths(StackConfig)}
        elsewhere = [leaves[m] for m in difflib.get_close_matches(name, leaves, n=1, cutoff=0.8)]
    return f" (did you mean {' or '.join(elsewhere[:3])}?)" if elsewhere else ""


def _key_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every key of `model` as a dotted path (objects in lists are not entered)."""
    paths = []
    for name, field in model.model_fields.items():
        paths.append(f"{prefix}{name}")
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            paths += _key_paths(field.annotation, f"{prefix}{name}.")
    return paths


def _plaintext_secrets(raw: dict[str, Any], secret_keys: set[str]) -> list[str]:
    """A secret field set without --secret would sit in plaintext in the stack file. Only
    values count: an object that holds none (`workload_keys: {training: {}}`) holds no secret."""
    problems = []
    for key, fields in SECRET_FIELDS.items():
        value = raw.get(key)
        if not isinstance(value, dict) or key in secret_keys:
            continue
        problems += [
            f"{NAMESPACE}:{path} must be set as a secret: "
            f"pulumi config set --secret --path {path} <value>"
            for field in fields
            for path in _set_leaves(_raw_at(value, field.split(".")), f"{key}.{field}")
        ]
    return problems


def _set_leaves(value: Any, path: str) -> list[str]:
    """The dotted paths of the values set under `value` (objects are walked, None is unset)."""
    if isinstance(value, dict):
        return [
            leaf for name, item in value.items() for leaf in _set_leaves(item, f"{path}.{name}")
        ]
    return [] if value is None else [path]


def _read_slots(slot_conf: Any, project_dir: Path, problems: list[str]) -> tuple[list[int], str]:
    if not isinstance(slot_conf, str) or not slot_conf:
        return [], ""
    path = project_dir / slot_conf
    if path.suffix not in SLOT_CONF_SUFFIXES:
        problems.append(
            f"{NAMESPACE}:slot_conf must be a path to a .txt or .conf file, got {shown(slot_conf)}"
        )
        return [], ""
    try:
        text = path.read_text(encoding="utf-8-sig")  # a BOM from a Windows editor is fine
        return parse_slot_conf(text, source=slot_conf), text
    except OSError as err:
        problems.append(
            f'{NAMESPACE}:slot_conf must name a readable file, got "{slot_conf}" ({err.strerror})'
        )
    except UnicodeDecodeError as err:
        problems.append(
            f"{NAMESPACE}:slot_conf must be UTF-8 text (one slot id per line), got "
            f'"{slot_conf}" with a byte that is not UTF-8 at offset {err.start} '
            "(UTF-16 or Latin-1? convert it: iconv -t UTF-8)"
        )
    except SlotConfError as err:
        problems += [f"{NAMESPACE}:slot_conf {line}" for line in str(err).splitlines()]
    return [], ""


def _read_network(module: str, project_dir: Path, problems: list[str]) -> str | None:
    """The text of training.network_module when it is a .py file of the project."""
    if not module.endswith(".py"):
        return None
    key = f"{NAMESPACE}:training.network_module"
    try:
        text = (project_dir / module).read_text(encoding="utf-8")
    except OSError as err:
        problems.append(f'{key} must name a readable file, got "{module}" ({err.strerror})')
        return None
    except UnicodeDecodeError as err:
        problems.append(
            f'{key} must be UTF-8 Python source, got "{module}" with a byte that is not UTF-8 '
            f"at offset {err.start}"
        )
        return None
    try:
        compile(text, module, "exec")
    except SyntaxError as err:
        problems.append(f'{key} "{module}" is not Python: line {err.lineno}: {err.msg}')
        return None
    return text


def _problems_of(
    error: ErrorDetails, raw: dict[str, Any]
) -> list[tuple[Path_, tuple[Path_, ...], str]]:
    """(path, paths its check read, line) of each problem of one pydantic error: the
    checks of a model may find several at once (Problems)."""
    loc = tuple(str(part) for part in error["loc"])
    cause = error.get("ctx", {}).get("error")
    found = cause.problems if isinstance(cause, Problems) else [cause]
    problems = []
    for problem in found:
        if not isinstance(problem, Problem):
            return [(loc, (), _describe(error, raw))]
        path = (*loc, *(k for k in problem.key.split(".") if k))
        reads = tuple((*loc, *read.split(".")) for read in problem.reads)
        problems.append((path, reads, f"{NAMESPACE}:{'.'.join(path)} {problem.message}"))
    return problems


def _describe(error: ErrorDetails, raw: dict[str, Any]) -> str:
    """One line for one pydantic error: key, what is allowed, the value (never a secret's)."""
    loc = [str(part) for part in error["loc"]]
    if error["type"] == "extra_forbidden":
        parent = _model_at(StackConfig, loc[:-1])
        allowed = ", ".join(parent.model_fields) if parent else "none"
        hint = _did_you_mean(loc[-1], list(parent.model_fields) if parent else [])
        return f"{NAMESPACE}:{'.'.join(loc)} is not a known key{hint}; allowed: {allowed}"
    field, annotation_hint = _field_at(StackConfig, loc)
    value = "<secret>" if annotation_hint == "secret" else shown(_raw_at(raw, loc))
    return f"{NAMESPACE}:{'.'.join(loc)} must be {_allowed(error, field)}, got {value}"


def _allowed(error: ErrorDetails, field: FieldInfo | None) -> str:
    kind = error["type"]
    ctx = error.get("ctx", {})
    noun = "an integer" if field is not None and field.annotation is int else "a number"
    bounds = _bounds(field)
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        op = {
            "greater_than_equal": ">=",
            "greater_than": ">",
            "less_than_equal": "<=",
            "less_than": "<",
        }[kind]
        limit = next(iter(v for k, v in ctx.items() if k in ("ge", "gt", "le", "lt")))
        return f"{noun} {op} {_number(limit)}"
    if kind in (
        "int_parsing",
        "int_parsing_size",
        "int_type",
        "int_from_float",
        "float_parsing",
        "float_type",
    ):
        return f"{noun}{bounds}"
    if kind in ("literal_error", "enum"):
        expected = str(ctx.get("expected", "")).replace("'", "").replace(" or ", ", ")
        return f"one of {expected}"
    if kind in ("bool_parsing", "bool_type"):
        return "true or false"
    if kind == "string_too_short":
        return "a non-empty string"
    if kind == "string_spaces":
        return "a value without spaces around it or control characters"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return "an object (set its keys with pulumi config set --path)"
    extra = field.json_schema_extra if field is not None else None
    if isinstance(extra, dict) and "allowed" in extra:
        return str(extra["allowed"])
    return error["msg"].lower().removeprefix("input should be ").removeprefix("value error, ")


def _number(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _bounds(field: FieldInfo | None) -> str:
    """The numeric range of a field, from its ge/gt/le constraints."""
    limits: dict[str, Any] = {}
    for constraint in field.metadata if field is not None else []:
        for name in ("ge", "gt", "le"):
            if getattr(constraint, name, None) is not None:
                limits[name] = _number(getattr(constraint, name))
    if "ge" in limits and "le" in limits:
        return f" from {limits['ge']} to {limits['le']}"
    if "gt" in limits and "le" in limits:
        return f" > {limits['gt']} and <= {limits['le']}"
    if "ge" in limits:
        return f" >= {limits['ge']}"
    return ""


def _model_at(model: type[BaseModel], loc: list[str]) -> type[BaseModel] | None:
    for part in loc:
        if part.isdigit():  # an item of a list of models (node pools): same model
            continue
        field = model.model_fields.get(part)
        annotation = field.annotation if field else None
        if get_origin(annotation) is list:
            annotation = get_args(annotation)[0]
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def _field_at(model: type[BaseModel], loc: list[str]) -> tuple[FieldInfo | None, str]:
    parent = _model_at(model, loc[:-1]) if loc else None
    field = parent.model_fields.get(loc[-1]) if parent and loc else None
    secret = field is not None and is_secret(field.annotation)
    return field, "secret" if secret else ""


def _raw_at(raw: dict[str, Any], loc: list[str]) -> Any:
    value: Any = raw
    for part in loc:
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return None
    return value
