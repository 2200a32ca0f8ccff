"""Shared by the torch runner's tests: every test traces into its own cache directory, with no
reserve-fraction override from the environment."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _trace_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FMEST_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FMEST_ALLOCATOR_RESERVE_FRACTION", raising=False)
