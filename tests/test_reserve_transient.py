"""The caching-allocator reserve as a function of the step's largest transient block (fmest
issue 21): the constants are the traced table's rule, the rule beats the tensor-peak rule
leave-one-trace-out, and the memory plugin and the planner apply it alike."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fmest import allocator as A
from fmest.physics import device_terms as dt

GIB = 1 << 30


def _table() -> dict:
    return json.loads((Path(dt.__file__).parents[1] / "data" / "allocator_reserve.json")
                      .read_text())


def test_the_constants_are_the_tables_transient_rules():
    s = _table()["summary"]
    assert dt.ALLOCATOR_RESERVE_TRANSIENT_CONSTANT_BYTES == s["rule_transient"]["constant_bytes"]
    assert dt.ALLOCATOR_RESERVE_TRANSIENT_SLOPE == s["rule_transient"]["slope"]
    e = s["rule_transient_expandable"]
    assert dt.ALLOCATOR_RESERVE_TRANSIENT_EXPANDABLE_CONSTANT_BYTES == e["constant_bytes"]
    assert dt.ALLOCATOR_RESERVE_TRANSIENT_EXPANDABLE_SLOPE == e["slope"]


def test_every_row_carries_its_transient_block():
    for r in _table()["rows"]:
        assert r["transient_block_bytes"] == pytest.approx(
            dt.transient_block_bytes(r["micro_batch_size"] * r["seq_len"],
                                     {"qwen2.5-0.5b": 151936, "qwen2.5-7b": 152064,
                                      "llama-3.2-1b": 128256, "llama-3.2-3b": 128256,
                                      "llama-3.1-8b": 128256, "smollm2-360m": 49152,
                                      "smollm2-1.7b": 49152, "llama-2-70b": 32000,
                                      "llama-2-13b": 32000, "llama-2-7b": 32000,
                                      "mistral-7b": 32000, "qwen2-7b": 152064,
                                      "qwen2.5-14b": 152064}[r["model"]]))


@pytest.mark.parametrize("name", ["rule_transient", "rule_transient_expandable"])
def test_the_transient_rule_beats_the_tensor_peak_rule_leave_one_trace_out(name):
    rule = _table()["summary"][name]
    assert rule["loo_transient"][0] < rule["loo_tensor_peak_rule"][0]


@pytest.mark.parametrize("expandable", [False, True])
def test_the_reserve_grows_with_the_block_and_keeps_the_floor(expandable):
    a = 20 * GIB
    small = dt.allocator_reserve_bytes(a, expandable, 0.0)
    big = dt.allocator_reserve_bytes(a, expandable, 8 * GIB)
    assert big > small >= A.irreducible_reserve_bytes(a, expandable)
    # below the smallest traced peak the reserve scales down with the tensors
    m = dt.ALLOCATOR_RESERVE_MIN_TRACED_BYTES
    assert dt.allocator_reserve_bytes(m / 2, expandable, GIB) < dt.allocator_reserve_bytes(
        m, expandable, GIB)


@pytest.mark.parametrize("expandable", [False, True])
def test_the_planners_device_total_mirrors_the_rule(expandable):
    from fmest.plan.vector import device_total

    alloc = np.array([2.0, 10.0, 30.0, 70.0]) * GIB
    block = np.array([0.1, 1.0, 4.0, 9.0]) * GIB
    got = device_total(alloc, np.zeros(4), 0.0, expandable, None, block)
    want = [a + dt.allocator_reserve_bytes(a, expandable, b) for a, b in zip(alloc, block,
                                                                         strict=True)]
    assert got == pytest.approx(want, rel=1e-12)


def test_the_memory_plugin_reserve_follows_the_logits():
    import fmest

    def reserve(batch: int) -> int:
        job = {"model": "llama-3.2-1b", "training": {
            "dtype": "bf16", "technique": "full", "micro_batch_size": batch, "seq_len": 2048,
            "activation_checkpointing": "full"}}
        return fmest.estimate_memory(job).components["allocator_reserve"]

    # the memory plugin applies the two-term rule (tests/test_reserve_layer.py): the logits
    # share grows by its slope x the block, the layer share by its own
    block = dt.transient_block_bytes(4 * 2048, 128256) - dt.transient_block_bytes(2048, 128256)
    assert reserve(4) - reserve(1) >= dt.ALLOCATOR_RESERVE_LAYER_TRANSIENT_SLOPE * block
