"""Loading the archives into containerd with its own client, `ctr`."""

from __future__ import annotations

from pathlib import Path

from .run import run


def images(address: str, namespace: str) -> dict[str, str]:
    """Reference -> manifest digest of every image containerd has in `namespace`."""
    out = run(["ctr", "-a", address, "-n", namespace, "images", "ls"], capture=True)
    found = {}
    for line in out.splitlines()[1:]:  # the first line is the header
        columns = line.split()
        if len(columns) >= 3:
            found[columns[0]] = columns[2]
    return found


def import_archive(address: str, namespace: str, archive: Path) -> None:
    """Import and unpack (into the default snapshotter, what the CRI plugin runs from)."""
    run(["ctr", "-a", address, "-n", namespace, "images", "import", archive], nice=True)
