#!/usr/bin/env python3
"""Every image the stack runs, built here without pulling anything, and loaded into
containerd (docs/images.md).

    tools/images.py build [NAME...] [--registry R] [--tag NAME=TAG]... [--force NAME]... [--cold]
    tools/images.py import --address SOCKET [--namespace k8s.io] [--stack STACK] [NAME...]
    tools/images.py list [--registry R] [--tag NAME=TAG]... [--json]

--stack STACK names the project images as stacks/Pulumi.<STACK>.yaml does (and checks that
its MinIO, Hadoop and Volcano images are the stand-ins built here); `import --stack` builds
what is missing first: `import --stack local` is all the local cluster needs.

NAME: a base stand-in (debian, python, rust, mlflow-base), a project image (trainer, cube,
serving, client, mlflow) or a runtime stand-in (pause, minio, hadoop, vc-scheduler,
vc-controller-manager, vc-webhook-manager). `build` with no NAME builds them all, bases as
needed; `import` with no NAME loads every image the cluster runs (not the bases).
Archives and the build index live in ${ELASTICCTR_CACHE:-~/.cache/elasticctr}/images/.

Library (for the cluster tooling and the tests; run with the project's venv):

    import images  # tools/ on sys.path, or load this file by path
    recipes = images.catalog(images.Options(registry="localhost/elasticctr"))
    images.build(recipes)                       # -> [Result], each built/cached/...
    images.import_into("/run/containerd/containerd.sock", images.RUNTIME_IMAGES)
    images.recipe_for(recipes, "apache/hadoop:3.4.1")  # what builds an image a stack names
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # `tools.imagekit` and `infra.config` by their names
    sys.path.insert(0, str(REPO_ROOT))

from tools.imagekit import build as _build  # noqa: E402
from tools.imagekit.build import READY, Imported, Result  # noqa: E402
from tools.imagekit.recipes import (  # noqa: E402
    PROJECT_IMAGES,
    Options,
    Recipe,
    catalog,
    default_tags,
    recipe_for,
    volcano_chart_values,
)
from tools.imagekit.run import Stopwatch, say  # noqa: E402
from tools.imagekit.stack import StackImagesError, stack_options  # noqa: E402
from tools.imagekit.store import Store  # noqa: E402

__all__ = [
    "READY",
    "RUNTIME_IMAGES",
    "Imported",
    "Options",
    "Recipe",
    "Result",
    "build",
    "catalog",
    "default_tags",
    "import_into",
    "recipe_for",
    "volcano_chart_values",
]

# What the cluster runs (containerd needs these; the bases are only FROM of builds).
RUNTIME_IMAGES = (
    *PROJECT_IMAGES,
    "pause",
    "minio",
    "hadoop",
    "prometheus",
    "vc-scheduler",
    "vc-controller-manager",
    "vc-webhook-manager",
)


def build(
    recipes: dict[str, Recipe],
    names: Iterable[str] = (),
    force: Iterable[str] = (),
    store: Store | None = None,
    cold: bool = False,
) -> list[Result]:
    """Build `names` (all when empty) and their bases; unchanged images take seconds.
    `cold`: rebuild all of them from nothing (no key or layer cache), to measure."""
    return _build.build(recipes, list(names) or list(recipes), store or Store(), force, cold)


def import_into(
    address: str,
    names: Iterable[str] = RUNTIME_IMAGES,
    namespace: str = "k8s.io",
    store: Store | None = None,
) -> list[Imported]:
    """Load built images into the containerd at `address`; skips what it already has."""
    return _build.import_into(store or Store(), names, address, namespace)


def _tags(pairs: Sequence[str]) -> dict[str, str]:
    tags = {}
    for pair in pairs:
        name, sep, tag = pair.partition("=")
        if not sep or not tag:
            raise SystemExit(f"--tag wants NAME=TAG, got {pair!r}")
        tags[name] = tag
    return tags


def _options(args: argparse.Namespace) -> Options:
    options = Options(
        registry=args.registry,
        tags=_tags(args.tag),
        minio_bin_dir=args.minio_bin_dir,
        prometheus_bin_dir=args.prometheus_bin_dir,
        volcano_bin_dir=args.volcano_bin_dir,
    )
    if args.stack:
        try:
            return stack_options(args.stack, options)
        except StackImagesError as why:
            raise SystemExit(f"error: {why}") from None
    return options


def _list(recipes: dict[str, Recipe], as_json: bool) -> None:
    entries = Store().entries()
    rows = []
    for recipe in recipes.values():
        entry = entries.get(recipe.name)
        rows.append(
            {
                "name": recipe.name,
                "kind": recipe.kind,
                "reference": recipe.reference,
                "stands_in_for": recipe.stands_in_for,
                "built": entry is not None and entry.reference == recipe.reference,
                "size_mb": round(entry.archive_bytes / 1e6) if entry else None,
                "last_build_s": entry.build_seconds if entry else None,
                "unavailable": recipe.unavailable,
            }
        )
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    for row in rows:
        size = f"{row['size_mb']} MB, built in {row['last_build_s']} s" if row["built"] else "-"
        note = f"  (unavailable: {row['unavailable']})" if row["unavailable"] else ""
        print(f"{row['name']:<22} {row['kind']:<8} {row['reference']:<62} {size}{note}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # What names the images: given to `build` and `list` (import reads the build index).
    naming = argparse.ArgumentParser(add_help=False)
    defaults = Options()
    naming.add_argument("--registry", default=defaults.registry, help="project images' registry")
    naming.add_argument(
        "--tag", action="append", default=[], metavar="NAME=TAG", help="a project image's tag"
    )
    naming.add_argument("--minio-bin-dir", type=Path, help="dir with minio and mc")
    naming.add_argument("--prometheus-bin-dir", type=Path, help="dir with prometheus and promtool")
    naming.add_argument("--volcano-bin-dir", type=Path, help="dir with the vc-* binaries")
    naming.add_argument("--stack", help="name the images as stacks/Pulumi.<STACK>.yaml does")
    commands = parser.add_subparsers(dest="command", required=True)
    build_cmd = commands.add_parser("build", parents=[naming], help="build (all by default)")
    build_cmd.add_argument("names", nargs="*", metavar="NAME")
    build_cmd.add_argument(
        "--force", action="append", default=[], metavar="NAME", help="rebuild even if unchanged"
    )
    build_cmd.add_argument(
        "--cold", action="store_true", help="rebuild all from nothing (no layer cache): timings"
    )
    import_cmd = commands.add_parser(
        "import", parents=[naming], help="load built images into containerd"
    )
    import_cmd.add_argument("--address", required=True, help="containerd's socket")
    import_cmd.add_argument("--namespace", default="k8s.io")
    import_cmd.add_argument("names", nargs="*", metavar="NAME")
    list_cmd = commands.add_parser("list", parents=[naming], help="images, references, sizes")
    list_cmd.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    clock = Stopwatch()
    if args.command == "list":
        _list(catalog(_options(args)), args.json)
        return 0
    if args.command == "build":
        results = build(catalog(_options(args)), args.names, args.force, cold=args.cold)
        bad = [r for r in results if r.outcome in ("failed", "unavailable", "skipped")]
        say(
            f"build: {len(results) - len(bad)} ready, {len(bad)} not "
            f"({', '.join(r.name for r in bad) or 'none'}) in {clock.seconds():.1f} s"
        )
        return 1 if bad else 0
    names = args.names or RUNTIME_IMAGES
    if args.stack:  # a stack's naming: build (or find cached) what it names, then import
        results = build(catalog(_options(args)), names)
        unbuilt = [r.name for r in results if r.outcome in ("failed", "unavailable", "skipped")]
        if unbuilt:
            say(f"import: not built: {', '.join(unbuilt)}")
            return 1
    imported = import_into(args.address, names, args.namespace)
    missing = [r.name for r in imported if r.outcome == "missing"]
    say(f"import: {len(imported) - len(missing)} in containerd in {clock.seconds():.1f} s")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
