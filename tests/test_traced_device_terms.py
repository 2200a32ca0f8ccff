"""The traced memory answer applies the analytic plugin's device/allocator terms (issue 21):
the transient rule on the trace's own largest freed block, the pad-to-longest growth, the
capacity cap with its irreducible floor. No torch needed."""

from __future__ import annotations

import pytest

pytest.importorskip("fmest_torch_runner")

from fmest.allocator import irreducible_reserve_bytes  # noqa: E402
from fmest.convert import job_from_dict  # noqa: E402
from fmest.engine import Engine  # noqa: E402
from fmest.physics.device_terms import allocator_reserve_bytes  # noqa: E402
from fmest_torch_runner import traced  # noqa: E402
from fmest_torch_runner.fake_trace import largest_freed_block  # noqa: E402

GIB = 1 << 30


def test_largest_freed_block_ignores_storages_still_alive():
    events = [("m", 1, 100), ("m", 2, 5000), ("m", 3, 300), ("f", 3), ("f", 1)]
    assert largest_freed_block(events) == 300
    assert largest_freed_block([("m", 1, 10)]) == 0


def test_scaled_window_uses_the_transient_rule_of_theory():
    inp = traced.ReserveInputs(transient=2 * GIB)
    a = 20 * GIB
    terms = traced.gpu_side_terms(a, world_size=1, nodes=1, inputs=inp)
    assert terms["allocator_reserve"] == round(allocator_reserve_bytes(a, False, 2 * GIB))


def test_padded_growth_adds_a_fraction_of_the_transient_bytes():
    base = traced.gpu_side_terms(10 * GIB, world_size=1, nodes=1,
                                 inputs=traced.ReserveInputs(ratio=1.1), transient=4 * GIB)
    grown = traced.gpu_side_terms(10 * GIB, world_size=1, nodes=1,
                                  inputs=traced.ReserveInputs(ratio=1.1, padded_growth=0.25),
                                  transient=4 * GIB)
    assert grown["allocator_reserve"] - base["allocator_reserve"] == GIB


def test_reserve_capped_at_the_room_left_never_below_the_floor():
    ctx = traced.gpu_side_terms(0, world_size=1, nodes=1)["cuda_context"]
    a = 70 * GIB
    inp = traced.ReserveInputs(ratio=1.2, capacity=80 * GIB)
    r = traced.gpu_side_terms(a, world_size=1, nodes=1, inputs=inp)["allocator_reserve"]
    assert r == 80 * GIB - ctx - a  # the room, below the uncapped 14 GiB
    tight = traced.ReserveInputs(ratio=1.2, capacity=a + ctx + 1)
    r = traced.gpu_side_terms(a, world_size=1, nodes=1, inputs=tight)["allocator_reserve"]
    assert r == round(irreducible_reserve_bytes(a))
    over = traced.ReserveInputs(ratio=1.2, capacity=a / 2)  # tensors alone past the device
    assert traced.gpu_side_terms(a, world_size=1, nodes=1,
                                 inputs=over)["allocator_reserve"] == round(0.2 * a)


def _job(**workload) -> dict:
    return {"model": "qwen2.5-0.5b",
            "training": {"seq_len": 2048, "micro_batch_size": 2, "technique": "lora",
                         "stack": "hf-trainer"},
            "workload": workload, "hardware": {"gpu": "A100-SXM-80GB"}}


@pytest.mark.parametrize("workload", [{}, {"avg_seq_len": 600.0},
                                      {"avg_seq_len": 900.0, "seq_len_std": 300.0}])
def test_padded_growth_matches_memory_theory(workload):
    from fmest.transforms import transforms_of
    from fmest_memory_theory import estimator as E  # type: ignore[import-not-found]

    engine = Engine()
    job = job_from_dict(_job(**workload))
    ctx = engine.context(job)
    stack = transforms_of(job, ctx).stack
    assert traced.padded_growth_of(job, stack) == E.padded_growth_of(job, stack)
    if workload:
        assert traced.padded_growth_of(job, stack) > 0
