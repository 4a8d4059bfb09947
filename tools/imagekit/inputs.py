"""The key of a recipe: everything its image is built from."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from .fingerprint import Fingerprint, read_ignore_file
from .recipes import Recipe


def copy_sources(containerfile: Path) -> list[str]:
    """Context paths the Containerfile's COPY/ADD instructions read (not `--from` stages):
    only these can change the image, whatever else lies in the context."""
    sources: list[str] = []
    text = re.sub(r"\\\n", " ", containerfile.read_text())
    for line in text.splitlines():
        match = re.match(r"\s*(COPY|ADD)\s+(.*)", line, re.IGNORECASE)
        if not match:
            continue
        rest = match.group(2).strip()
        args = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
        if any(arg.startswith("--from") for arg in args):
            continue
        paths = [arg for arg in args if not arg.startswith("--")]
        sources += paths[:-1]  # the last one is the destination
    return sources


def key(recipe: Recipe, base_ids: Mapping[str, str], fp: Fingerprint) -> str:
    fp.text("reference", recipe.reference)
    fp.text("build-args", json.dumps(dict(recipe.build_args), sort_keys=True))
    for reference, image_id in sorted(base_ids.items()):
        fp.text(f"base:{reference}", image_id)
    fp.file("Containerfile", recipe.containerfile)
    if recipe.recipe_dir is not None:
        # The recipe folder's files the build reads (not its README); the other sources
        # are what the stagers bring.
        for source in copy_sources(recipe.containerfile):
            path = recipe.recipe_dir / source
            if path.is_dir():
                fp.tree(f"recipe/{source}", path)
            elif path.is_file():
                fp.file(f"recipe/{source}", path)
        for stager in recipe.stagers:
            stager.fingerprint(fp)
    else:
        assert recipe.context is not None
        ignore = read_ignore_file(recipe.ignorefile) if recipe.ignorefile else []
        if recipe.ignorefile is not None:
            fp.file("ignorefile", recipe.ignorefile)
        for source in copy_sources(recipe.containerfile):
            path = recipe.context / source
            if path.is_dir():
                fp.tree(f"context/{source}", path, _below(source, ignore))
            else:
                fp.file(f"context/{source}", path)
    return fp.hexdigest()


def _below(source: str, ignore: list[str]) -> list[str]:
    """Ignore patterns (relative to the context) re-rooted at `source`."""
    prefix = source.strip("/") + "/"
    rooted = []
    for pattern in ignore:
        if pattern.startswith("**/"):
            rooted.append(pattern)
        elif pattern.startswith(prefix):
            rooted.append(pattern[len(prefix) :])
        elif prefix.startswith(pattern + "/") or pattern == source.strip("/"):
            rooted.append("**")  # the whole source is ignored
    return rooted
