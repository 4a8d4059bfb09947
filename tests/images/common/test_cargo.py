"""cargo_build: the shared build step of the project's Rust crates; its errors say what."""

from __future__ import annotations

import pytest
from elasticctr_common.cargo import CargoBuildError, cargo_build


def test_without_cargo_the_error_names_the_crate(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CargoBuildError, match="cargo is not installed: cannot build the thing"):
        cargo_build(tmp_path, "thing", "the thing")


def test_a_failed_build_shows_cargos_output(tmp_path):
    (tmp_path / "Cargo.toml").write_text('[package]\nname = "broken"\nversion = "0.1.0"\n')
    (tmp_path / "Cargo.lock").write_text(
        'version = 4\n\n[[package]]\nname = "broken"\nversion = "0.1.0"\n'
    )
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.rs").write_text('fn main() { let _x: u8 = "no"; }\n')
    with pytest.raises(CargoBuildError) as err:
        cargo_build(tmp_path, "broken", "the broken crate", offline=True)
    message = str(err.value)
    assert f"cargo build of the broken crate failed in {tmp_path}" in message
    assert "mismatched types" in message
