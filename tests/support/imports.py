"""What the project's Python modules import, read from their syntax trees (nothing is run).

The layout rules (README, "path" table) are checked on this: which module a file imports
and which of its names it uses, whether by `from m import name`, `import m` then `m.name`,
or a relative import.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Where imports resolve from, as the project runs its code: the repository root (`infra`,
# `components`, `tools.imagekit`, `tests.support`), each image's folder (its packages by
# their top-level names), bench/ (its scripts import each other by name).
SOURCE_ROOTS = (ROOT, *sorted(p for p in (ROOT / "images").iterdir() if p.is_dir()), ROOT / "bench")

# The product and its chores: everything that is not the test harness.
PRODUCT_FOLDERS = ("components", "infra", "images", "tools", "bench", "policy")


@dataclass(frozen=True, order=True)
class Use:
    """`module`'s `name` used at `line` (`name` is None for a bare `import module`)."""

    line: int
    module: str
    name: str | None


def python_files(*folders: str) -> list[Path]:
    """The .py files under the folders of ROOT (none from caches or virtual environments)."""
    return sorted(
        path
        for folder in folders
        for path in (ROOT / folder).rglob("*.py")
        if not {".venv", "__pycache__", "target", "node_modules"} & set(path.parts)
    )


@functools.cache
def module_file(module: str) -> Path | None:
    """The project's file (or package folder) that `module` names, if it is the project's."""
    parts = module.split(".")
    for root in SOURCE_ROOTS:
        base = root.joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py", base):
            if candidate.exists() and (candidate.is_dir() or candidate.suffix == ".py"):
                return candidate
    return None


def module_name(path: Path) -> str:
    """The dotted name `path` is imported as (from the innermost source root holding it)."""
    root = max((r for r in SOURCE_ROOTS if path.is_relative_to(r)), key=lambda r: len(r.parts))
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(path: Path, node: ast.ImportFrom) -> str:
    """The module a (possibly relative) `from ... import` names."""
    if not node.level:
        return node.module or ""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def uses(path: Path, source: str | None = None) -> Iterator[Use]:
    """Every module `path` imports, and each name it takes from one of the project's modules.

    `source`: the text to read instead of the file's (the file need not exist)."""
    text = path.read_text(encoding="utf-8") if source is None else source
    tree = ast.parse(text, filename=str(path))
    bound: dict[str, str] = {}  # local name -> the project module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Use(node.lineno, alias.name, None)
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    bound[top] = top
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(path, node)
            for alias in node.names:
                yield Use(node.lineno, module, alias.name)
                submodule = f"{module}.{alias.name}"
                if module_file(submodule) is not None:
                    bound[alias.asname or alias.name] = submodule
    bound = {local: module for local, module in bound.items() if module_file(module) is not None}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            dotted = _dotted(node.value)
            if dotted is None:
                continue
            head, _, rest = dotted.partition(".")
            if head not in bound:
                continue
            module = ".".join(p for p in (bound[head], rest) if p)
            if module_file(module) is not None:
                yield Use(node.lineno, module, node.attr)


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(path: Path, source: str | None = None) -> list[Use]:
    """The private names of the project's other modules that `path` uses."""
    own = module_name(path)
    return sorted(
        use
        for use in uses(path, source)
        if use.name is not None
        and is_private(use.name)
        and use.module != own
        and module_file(use.module) is not None
    )


def harness_uses(path: Path, source: str | None = None) -> list[Use]:
    """The modules under tests/ other than tests/support that `path` imports (each `Use`
    names the module itself: `from tests.x import y`, where y is a module, names tests.x.y)."""
    found = []
    for use in uses(path, source):
        module = use.module
        if use.name is not None and module_file(f"{module}.{use.name}") is not None:
            module = f"{module}.{use.name}"
        if module.split(".")[0] == "tests" and module.split(".")[:2] != ["tests", "support"]:
            found.append(Use(use.line, module, None))
    return sorted(set(found))
