"""Fixed places in the repository."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
IMAGES_DIR = REPO_ROOT / "images"
STANDINS_DIR = REPO_ROOT / "tools" / "standins"
