"""Fixtures of the fm-training-estimator drop-in's tests: one engine per module over the installed
plugins, and a private cache folder (a lookup CSV large enough trains a model cached under
$FMEST_CACHE_DIR: keep it out of the user's cache)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def engine():
    from fmest.testing import new_engine

    return new_engine(entrypoints=True)


@pytest.fixture(scope="module", autouse=True)
def _private_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FMEST_CACHE_DIR", str(tmp_path_factory.mktemp("fmest-cache")))
        yield
