"""Reading the stack config: the only module that touches pulumi.Config.

Every problem becomes one line naming the key, the value and what is allowed, e.g.
`elasticctr:trainers must be an integer >= 1, got "0"`; all lines are raised together
in one ConfigError before the program registers any resource.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin

import pulumi
from elasticctr_common.slotconf import SlotConfError, parse_slot_conf
from pulumi.runtime import config as runtime_config
from pydantic import BaseModel, SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from infra.config import SECRET_FIELDS, Problem, StackConfig

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


def load(project_dir: Path = PROJECT_DIR) -> LoadedConfig:
    """Read, validate and return the stack config, or raise ConfigError."""
    raw, secret_keys = _read_raw()
    problems = _misspelt_namespaces() + _unknown_keys(raw) + _plaintext_secrets(raw, secret_keys)
    known = {k: v for k, v in raw.items() if k in StackConfig.model_fields}
    stack: StackConfig | None = None
    try:
        stack = StackConfig.model_validate(known)
    except ValidationError as err:
        problems += [_describe(error, raw) for error in err.errors()]
    slots, slot_text = _read_slots(
        stack.slot_conf if stack else known.get("slot_conf"), project_dir, problems
    )
    if problems or stack is None:
        raise ConfigError(problems)
    return LoadedConfig(stack=stack, slots=slots, slot_conf_text=slot_text)


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
        f"{NAMESPACE}:{key} is not a config key of this project; allowed: {allowed}"
        for key in raw
        if key not in StackConfig.model_fields
    ]


def _plaintext_secrets(raw: dict[str, Any], secret_keys: set[str]) -> list[str]:
    """A secret field set without --secret would sit in plaintext in the stack file."""
    problems = []
    for key, fields in SECRET_FIELDS.items():
        value = raw.get(key)
        if not isinstance(value, dict) or key in secret_keys:
            continue
        problems += [
            f"{NAMESPACE}:{key}.{field} must be set as a secret: "
            f"pulumi config set --secret --path {key}.{field} <value>"
            for field in fields
            if _at(value, field) is not None
        ]
    return problems


def _at(value: Any, path: str) -> Any:
    """The value at a dotted path inside `value` (None where any step is missing)."""
    for step in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(step)
    return value


def _read_slots(slot_conf: Any, project_dir: Path, problems: list[str]) -> tuple[list[int], str]:
    if not isinstance(slot_conf, str) or not slot_conf:
        return [], ""
    path = project_dir / slot_conf
    if path.suffix != ".txt":
        problems.append(f'{NAMESPACE}:slot_conf must be a path to a .txt file, got "{slot_conf}"')
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


def _describe(error: ErrorDetails, raw: dict[str, Any]) -> str:
    """One line for one pydantic error: key, what is allowed, the value (never a secret's)."""
    loc = [str(part) for part in error["loc"]]
    ctx = error.get("ctx", {})
    cause = ctx.get("error")
    if isinstance(cause, Problem):
        loc = loc + [k for k in cause.key.split(".") if k]
        return f"{NAMESPACE}:{'.'.join(loc)} {cause.message}"
    if error["type"] == "extra_forbidden":
        parent = _model_at(StackConfig, loc[:-1])
        allowed = ", ".join(parent.model_fields) if parent else "none"
        return f"{NAMESPACE}:{'.'.join(loc)} is not a known key; allowed: {allowed}"
    field, annotation_hint = _field_at(StackConfig, loc)
    shown = (
        "<secret>" if annotation_hint == "secret" else json.dumps(_raw_at(raw, loc), default=str)
    )
    return f"{NAMESPACE}:{'.'.join(loc)} must be {_allowed(error, field)}, got {shown}"


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
    if kind in ("int_parsing", "int_type", "int_from_float", "float_parsing", "float_type"):
        return f"{noun}{bounds}"
    if kind in ("literal_error", "enum"):
        expected = str(ctx.get("expected", "")).replace("'", "").replace(" or ", ", ")
        return f"one of {expected}"
    if kind in ("bool_parsing", "bool_type"):
        return "true or false"
    if kind == "string_too_short":
        return "a non-empty string"
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
    is_secret = field is not None and SecretStr in getattr(
        field.annotation, "__args__", (field.annotation,)
    )
    return field, "secret" if is_secret else ""


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
