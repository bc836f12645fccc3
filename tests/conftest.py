"""Shared fixtures. Real public data lives in ../shared/data beside the repo; it is never copied in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("PREFDATA_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder of real public datasets; tests that need it skip with a clear reason without it."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder {SHARED_DATA} is absent (set PREFDATA_SHARED_DATA to its path)")
    return SHARED_DATA


@pytest.fixture()
def store_root(tmp_path, monkeypatch) -> Path:
    """A fresh, empty dataset store for one test."""
    root = tmp_path / "store"
    monkeypatch.setenv("PREFDATA_STORE", str(root))
    return root
