"""The reserve the caching allocator cannot give back (fmest issue 22).

``release_cached_blocks`` (pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp @
eb42ad6eca0ce61e7c581212b4bf32f991425571) frees only segments that hold no live block, and with
expandable segments unmaps only whole free pages, so at the peak part of the reserve stays.
``scripts/derive_allocator_reserve.py --floor`` measured it in the replays of the reserve table's
traces (core/fmest/data/allocator_reserve.json ``floor``); the analytic reserve's cap at the
device stops at that floor (memory_theory ``assemble``; the planner's ``memory_bytes``). The
allocator rules themselves are checked by hand in tests/test_allocator.py.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import attrs
import numpy as np
import pytest

from fmest import allocator as A
from fmest.physics.device_terms import allocator_reserve_bytes

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "core" / "fmest" / "data" / "allocator_reserve.json"
GIB = 2**30


def _script():
    spec = importlib.util.spec_from_file_location(
        "derive_allocator_reserve", ROOT / "scripts" / "derive_allocator_reserve.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _floor() -> dict:
    return json.loads(TABLE.read_text())["floor"]


def test_the_floor_table_is_whole_and_consistent():
    floor = _floor()
    rows = floor["rows"]
    assert {r["alloc_conf"] for r in rows} == {"default", "expandable_segments:True"}
    assert len(rows) == 2 * len(_script().GRID)
    for r in rows:
        # nothing fits below the allocated peak; at the unlimited reserved peak nothing is
        # ever released, so the bisection's answer lies between them
        assert r["max_memory_allocated"] <= r["min_capacity"] <= r["max_memory_reserved"]
        # a full release keeps at least the live blocks, and no more than was reserved
        assert r["requested_at_peak"] <= r["held_at_peak"] <= r["max_memory_reserved"]
        assert r["held_at_next_miss"] >= r["held_at_peak"]
        assert r["floor_bytes"] == r["min_capacity"] - r["tracker_peak_bytes"]
        assert r["command"].startswith("python scripts/derive_allocator_reserve.py --floor")
    # the summary is what the script computes from the rows (no hand edits)
    assert json.loads(json.dumps(_script().summarize_floor(rows))) == floor["summary"]


def test_the_constants_are_the_tables_rules():
    s = _floor()["summary"]
    assert A.ALLOCATOR_FLOOR_CONSTANT_BYTES == s["rule"]["constant_bytes"]
    assert A.ALLOCATOR_FLOOR_FRACTION == s["rule"]["fraction"]
    assert A.ALLOCATOR_FLOOR_EXPANDABLE_CONSTANT_BYTES == s["rule_expandable"]["constant_bytes"]
    assert A.ALLOCATOR_FLOOR_EXPANDABLE_FRACTION == s["rule_expandable"]["fraction"]


@pytest.mark.parametrize("expandable", [False, True])
def test_the_floor_stays_below_the_reserve_on_every_device_size(expandable):
    # the floor is a part of the reserve: for any per-GPU peak up to the largest GPUs' memory
    for gib in (0.5, 2, 4.6, 10, 40, 80, 141, 192):
        a = gib * GIB
        assert 0 < A.irreducible_reserve_bytes(a, expandable) < allocator_reserve_bytes(
            a, expandable)
    # expandable segments give back whole pages: a smaller floor than whole segments
    assert A.irreducible_reserve_bytes(40 * GIB, True) < A.irreducible_reserve_bytes(40 * GIB)
    assert A.irreducible_reserve_bytes(0) == 0


# -- the cap in memory_theory's assemble --------------------------------------------------------

@pytest.fixture(scope="module")
def setup_and_peak():
    import fmest
    from fmest.convert import job_from_dict
    from fmest_memory_theory import estimator as E

    job = job_from_dict({"model": "Llama-3.1-8B", "training": {"technique": "lora",
                                                               "micro_batch_size": 1,
                                                               "seq_len": 2048}})
    ctx = fmest._engine(None).context(job)  # type: ignore[attr-defined]
    setup = E.job_setup(job, ctx)
    peak = E.estimate_bytes(job, ctx)
    return E, setup, peak


def _total_at(E, setup, capacity: float) -> tuple[int, float, float]:
    """(total bytes, allocated, context) of the setup's peak on a device of ``capacity``."""
    from fmest_memory_theory.estimator import pipeline_stages, stage_peak

    s = attrs.evolve(setup, capacity_bytes=capacity)
    stages = pipeline_stages(s.model.num_layers, s.layout.pp, s.parallelism.pp_schedule,
                             s.training.grad_accum_steps, s.parallelism.pp_virtual_stages)
    best = max((stage_peak(s, st) for st in stages), key=lambda p: p.allocated)
    est = E.assemble(s, best)
    return est.total_bytes, best.allocated, est.components["cuda_context"]


def test_the_reserve_is_capped_at_the_device_but_not_below_the_floor(setup_and_peak):
    E, setup, _ = setup_and_peak
    total, alloc, ctx = _total_at(E, setup, 0.0)  # no device: the full reserve
    held = total - alloc - ctx
    expandable = setup.stack is not None and setup.stack.profile.expandable_segments
    floor = A.irreducible_reserve_bytes(alloc, expandable)
    assert 0 < floor < held
    # room for the whole reserve: unchanged
    assert _total_at(E, setup, alloc + ctx + held + GIB)[0] == total
    # room between the floor and the reserve: the allocator releases its cache, the peak is
    # the device (P(fit) 0.5 at the point estimate)
    cap = alloc + ctx + (floor + held) / 2
    assert _total_at(E, setup, cap)[0] == round(cap)
    # room below the floor: segments holding live blocks cannot be released, it does not fit
    cap = alloc + ctx + floor / 2
    got = _total_at(E, setup, cap)[0]
    assert got > cap and got == pytest.approx(alloc + ctx + floor, abs=1)
    # tensors alone over the device: the whole reserve, the peak a device large enough holds
    cap = alloc / 2
    assert _total_at(E, setup, cap)[0] == total


@pytest.mark.parametrize("expandable", [False, True])
def test_the_planner_mirror_caps_the_same_way(expandable):
    from fmest.plan.vector import device_total

    # fmest.plan.vector.memory_bytes ends in device_total: the same cap as assemble, on arrays
    alloc = np.full(5, 30.0 * GIB)
    context = np.full(5, 0.6 * GIB)
    held = allocator_reserve_bytes(30.0 * GIB, expandable)
    floor = A.irreducible_reserve_bytes(30.0 * GIB, expandable)
    room = np.array([held + GIB, (floor + held) / 2, floor / 2, -10.0 * GIB, 0.0])
    caps = alloc + context + room
    caps[-1] = 0.0  # no device: uncapped
    want = alloc + context + np.array([held, (floor + held) / 2, floor, held, held])
    got = device_total(alloc, context, caps, np.full(5, expandable))
    assert got == pytest.approx(want, rel=1e-12)
    # a scalar capacity (the planner's per-GPU-type call) and none at all
    assert device_total(alloc[:1], context[:1], float(caps[2]), expandable)[0] == \
        pytest.approx(want[2], rel=1e-12)
    assert device_total(alloc[:1], context[:1])[0] == pytest.approx(
        30.0 * GIB + 0.6 * GIB + allocator_reserve_bytes(30.0 * GIB), rel=1e-12)
