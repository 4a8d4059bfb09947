"""Building recipes in dependency order, each only when its key changed."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from . import buildah, containerd, inputs
from .fingerprint import FileHashes, Fingerprint
from .recipes import Recipe
from .run import CommandFailed, Stopwatch, say
from .store import Entry, Store

Outcome = Literal["built", "cached", "restored", "unavailable", "failed", "skipped"]
READY: tuple[Outcome, ...] = ("built", "cached", "restored")


@dataclass(frozen=True)
class Result:
    name: str
    reference: str
    outcome: Outcome
    seconds: float
    archive_bytes: int = 0
    detail: str = ""


def closure(recipes: Mapping[str, Recipe], names: Iterable[str]) -> list[Recipe]:
    """`names` and every recipe they build FROM, dependencies first."""
    by_reference = {recipe.reference: recipe for recipe in recipes.values()}
    ordered: list[Recipe] = []
    visiting: set[str] = set()

    def visit(recipe: Recipe) -> None:
        if recipe in ordered:
            return
        if recipe.name in visiting:
            raise ValueError(f"{recipe.name}: its FROM images depend on it")
        visiting.add(recipe.name)
        for reference in recipe.from_references():
            if reference in by_reference:
                visit(by_reference[reference])
        visiting.discard(recipe.name)
        ordered.append(recipe)

    for name in names:
        if name not in recipes:
            raise KeyError(f"no image named {name!r} (known: {', '.join(recipes)})")
        visit(recipes[name])
    return ordered


def build(
    recipes: Mapping[str, Recipe],
    names: Iterable[str],
    store: Store,
    force: Iterable[str] = (),
    cold: bool = False,
) -> list[Result]:
    """Build what changed; `force` names images to rebuild even when their key matches;
    `cold` rebuilds everything without buildah's layer cache (to measure cold builds)."""
    forced = set(force)
    results: dict[str, Result] = {}
    with store.locked():
        hashes = FileHashes(store.file_hashes)
        for recipe in closure(recipes, names):
            forced_here = cold or recipe.name in forced
            results[recipe.name] = _one(
                recipe, recipes, results, store, hashes, forced_here, no_cache=cold
            )
            hashes.save()
    return list(results.values())


def _one(
    recipe: Recipe,
    recipes: Mapping[str, Recipe],
    done: Mapping[str, Result],
    store: Store,
    hashes: FileHashes,
    force: bool,
    no_cache: bool = False,
) -> Result:
    clock = Stopwatch()
    name, reference = recipe.name, recipe.reference
    if recipe.unavailable:
        say(f"{name}: cannot build: {recipe.unavailable}")
        return Result(name, reference, "unavailable", 0.0, detail=recipe.unavailable)
    by_reference = {r.reference: r for r in recipes.values()}
    base_ids: dict[str, str] = {}
    for base in recipe.from_references():
        dependency = by_reference.get(base)
        if dependency is not None and done[dependency.name].outcome not in READY:
            detail = f"its base {dependency.name} was not built"
            say(f"{name}: skipped: {detail}")
            return Result(name, reference, "skipped", 0.0, detail=detail)
        base_id = buildah.image_id(base)
        if base_id is None:
            detail = f"FROM {base}: no such local image and no recipe for it"
            say(f"{name}: {detail}")
            return Result(name, reference, "failed", 0.0, detail=detail)
        base_ids[base] = base_id
    try:
        key = inputs.key(recipe, base_ids, Fingerprint(hashes))
    except (OSError, ValueError) as why:
        say(f"{name}: cannot compute its inputs: {why}")
        return Result(name, reference, "failed", clock.seconds(), detail=str(why))
    entry = store.entries().get(name)
    archive = store.archive_of(name)
    if not force and entry is not None and entry.key == key and archive.is_file():
        outcome: Outcome = "cached"
        if buildah.image_id(reference) != entry.image_id:
            # buildah's storage lost it (or the tag moved): the archive is the same image
            buildah.restore(archive, reference)
            outcome = "restored"
        result = Result(name, reference, outcome, clock.seconds(), entry.archive_bytes)
        say(f"{name}: {outcome} ({result.seconds:.1f} s, key {key[:12]}) {reference}")
        return result
    try:
        return _build(recipe, key, store, clock, no_cache)
    except (CommandFailed, OSError) as why:
        say(f"{name}: FAILED: {why}")
        return Result(name, reference, "failed", clock.seconds(), detail=str(why))


def _build(
    recipe: Recipe, key: str, store: Store, clock: Stopwatch, no_cache: bool = False
) -> Result:
    name, reference = recipe.name, recipe.reference
    say(f"{name}: building {reference}")
    containerfile, context = recipe.containerfile, recipe.context
    if recipe.recipe_dir is not None:
        context = store.context_of(name)
        shutil.rmtree(context, ignore_errors=True)
        shutil.copytree(recipe.recipe_dir, context)
        for stager in recipe.stagers:
            stager.fill(context)
        containerfile = context / "Containerfile"
    assert context is not None
    staged = clock.seconds()
    replaced = buildah.image_id(reference)
    buildah.bud(
        containerfile=containerfile,
        context=context,
        reference=reference,
        build_args=recipe.build_args,
        ignorefile=recipe.ignorefile,
        no_cache=no_cache,
    )
    built = clock.seconds()
    image_id = buildah.image_id(reference)
    if image_id is None:
        raise CommandFailed(f"buildah bud did not tag {reference}")
    if replaced is not None and replaced != image_id:
        buildah.remove_quietly(replaced)  # else every rebuild leaves a dangling image
    archive = store.archive_of(name)
    buildah.archive(reference, archive)
    seconds = clock.seconds()
    entry = Entry(
        key=key,
        reference=reference,
        image_id=image_id,
        archive=str(archive),
        archive_bytes=archive.stat().st_size,
        build_seconds=round(seconds, 1),
        built_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )
    store.save(name, entry)
    if recipe.recipe_dir is not None:
        shutil.rmtree(context, ignore_errors=True)  # staged copies; the archive is kept
    say(
        f"{name}: built in {seconds:.1f} s (stage {staged:.1f}, bud {built - staged:.1f}, "
        f"archive {seconds - built:.1f}); {_mb(entry.archive_bytes)} uncompressed"
    )
    return Result(name, reference, "built", seconds, entry.archive_bytes)


def _mb(size: int) -> str:
    return f"{size / 1e6:.0f} MB"


@dataclass(frozen=True)
class Imported:
    name: str
    reference: str
    outcome: Literal["imported", "present", "missing"]
    seconds: float
    digest: str = ""


def import_into(store: Store, names: Iterable[str], address: str, namespace: str) -> list[Imported]:
    """Load each named image's archive into containerd, unless containerd already has its
    reference at the digest an earlier import of the same archive gave it."""
    results = []
    with store.locked():
        present = containerd.images(address, namespace)
        for name in names:
            clock = Stopwatch()
            entry = store.entries().get(name)
            if entry is None or not store.archive_of(name).is_file():
                say(f"{name}: no archive: build it first (tools/images.py build {name})")
                results.append(Imported(name, "", "missing", 0.0))
                continue
            digest = entry.containerd_digest
            if digest and present.get(entry.reference) == digest:
                say(f"{name}: already in containerd at {digest[:19]} {entry.reference}")
                results.append(Imported(name, entry.reference, "present", clock.seconds(), digest))
                continue
            containerd.import_archive(address, namespace, store.archive_of(name))
            digest = containerd.images(address, namespace).get(entry.reference, "")
            if not digest:
                raise CommandFailed(f"ctr import of {name} did not create {entry.reference}")
            entry.containerd_digest = digest
            store.save(name, entry)
            say(f"{name}: imported in {clock.seconds():.1f} s at {digest[:19]} {entry.reference}")
            results.append(Imported(name, entry.reference, "imported", clock.seconds(), digest))
    return results
