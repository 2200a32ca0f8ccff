"""The price index (fmest_cost_cloud.index): the rows a full scan of the registries finds, in
the same order, built once per set of registries."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("fmest_cost_cloud", reason="pip install -e plugins/cost_cloud")

import fmest_cost_cloud.plugin as cost_plugin  # noqa: E402
from fmest.testing import new_engine  # noqa: E402
from fmest_cost_cloud.cost import rentable_gpus, rows_for_gpu  # noqa: E402
from fmest_cost_cloud.index import build_price_index, price_index  # noqa: E402


@pytest.fixture
def registries():
    return new_engine(cost_plugin).registries


def _scan(registries, gpu_name):
    """What the cost estimate did before the index: resolve every row's GPU, keep matches."""
    return [(q, p) for q, p in registries.prices.with_sources()
            if (spec := registries.gpus.find(q.gpu)) is not None and spec.name == gpu_name]


def test_rows_per_gpu_equal_a_full_scan_in_registration_order(registries):
    gpus = rentable_gpus(registries)
    assert len(gpus) > 5
    for name in gpus:
        assert rows_for_gpu(registries, name) == _scan(registries, name)
    assert sum(len(rows_for_gpu(registries, name)) for name in gpus) \
        == sum(1 for q in registries.prices.values() if registries.gpus.find(q.gpu) is not None)


def test_a_gpu_nobody_rents_has_no_rows(registries):
    assert rows_for_gpu(registries, "no-such-gpu") == []


def test_rentable_gpus_are_the_sorted_resolved_names(registries):
    resolved = {registries.gpus.find(q.gpu).name for q in registries.prices.values()
                if registries.gpus.find(q.gpu) is not None}
    assert rentable_gpus(registries) == sorted(resolved)


def test_index_is_built_once_per_registries(registries):
    assert price_index(registries) is price_index(registries)
    other = new_engine(cost_plugin).registries
    assert price_index(other) is not price_index(registries)


def test_callers_cannot_change_the_kept_index(registries):
    name = rentable_gpus(registries)[0]
    rows = rows_for_gpu(registries, name)
    rows.clear()
    rentable_gpus(registries).clear()
    assert rows_for_gpu(registries, name) and rentable_gpus(registries)


def test_stand_in_registries_are_indexed_without_the_cache(registries):
    # a duck-typed stand-in (cannot be weakly referenced) still gets a correct answer
    stand_in = SimpleNamespace(prices=registries.prices, gpus=registries.gpus)
    assert price_index(stand_in) == build_price_index(registries)
