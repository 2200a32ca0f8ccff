"""DeepSpeed ZeRO IPG reduce buffers as deepspeedai/DeepSpeed edaa7221 allocates them (issue 21).

Hand-derived from the code (memory_theory ``_bucket_bytes``,
``fmest.default_plugins.parallelism.zero_reduce_buffer_elements``):

* ZeRO-1/2 (``deepspeed/runtime/zero/stage_1_and_2.py`` ``setup_buckets``): ``buf_0`` of
  ``reduce_bucket_size`` elements in the bf16 parameter dtype with ``contiguous_gradients``,
  plus ``buf_1`` with ``overlap_comm`` (default off at stages 1-2,
  ``deepspeed/runtime/zero/config.py`` ``overlap_comm_valid``).
* ZeRO-3 (``deepspeed/runtime/zero/stage3.py`` ``_setup_for_real_optimizer``): one buffer of
  ``reduce_bucket_size`` (default 5e8) whatever ``overlap_comm`` says: 1e9 bytes at bf16.
* The ZeRO optimizer, and so its buffers, exists on one rank too; DDP/ZeRO-0 has no such
  buffer.
"""

from __future__ import annotations

import numpy as np
import pytest

import fmest_memory_theory.estimator as estimator
import fmest_memory_theory.plugin as plugin
from fmest.convert import job_from_dict
from fmest.default_plugins.parallelism import zero_reduce_buffer_elements
from fmest.testing import new_engine

BF16 = 2


@pytest.fixture(scope="module")
def memory_engine():
    return new_engine((plugin, "memory_theory"))


def _bucket(eng, *, stage, gpus=8, stack="deepspeed", **zero):
    job = job_from_dict({
        "model": "Llama-2-7b-hf", "training": {"precision": "master", "stack": stack},
        "parallelism": {"zero_stage": stage, **zero},
        "hardware": {"gpu": "H100-SXM-80GB", "gpus_per_node": gpus, "nodes": 1}})
    setup = estimator.job_setup(job, eng.context(job))
    (whole,) = estimator.pipeline_stages(32, 1, "1f1b", 1, 1)
    state = estimator.model_state_terms(setup, estimator.stage_params(setup, whole))
    return estimator._bucket_bytes(setup, state)


def test_zero2_one_buffer_without_overlap_comm(memory_engine):
    # buf_0 only: 2e8 elements x 2 bytes (bf16), not capped by the model's size
    assert _bucket(memory_engine, stage=2, zero_reduce_bucket_elems=200_000_000,
                   zero_overlap_comm=False) == 200_000_000 * BF16


def test_zero2_double_buffer_with_overlap_comm(memory_engine):
    # buf_0 + buf_1: 2 x 2e8 x 2 bytes
    assert _bucket(memory_engine, stage=2, zero_reduce_bucket_elems=200_000_000,
                   zero_overlap_comm=True) == 2 * 200_000_000 * BF16


def test_zero2_default_is_one_buffer_of_5e8(memory_engine):
    assert _bucket(memory_engine, stage=2) == 500_000_000 * BF16


def test_zero2_without_contiguous_gradients_has_no_buffer(memory_engine):
    assert _bucket(memory_engine, stage=2, zero_contiguous_gradients=False) == 0


def test_zero3_default_one_buffer_whatever_overlap(memory_engine):
    # overlap_comm defaults to true at stage 3, and stage3.py still allocates one buffer
    assert _bucket(memory_engine, stage=3) == 500_000_000 * BF16 == 1e9
    assert _bucket(memory_engine, stage=3, zero_overlap_comm=True,
                   zero_reduce_bucket_elems=10_000_000) == 10_000_000 * BF16


def test_one_rank_zero_keeps_its_buffer_ddp_has_none(memory_engine):
    # dp = 1: DeepSpeedZeroOptimizer still builds its gradient hooks and setup_buckets runs
    # (no dp check in stage_1_and_2.py); DDP/ZeRO-0 on one GPU has no bucket at all
    assert _bucket(memory_engine, stage=2, gpus=1) == 500_000_000 * BF16
    assert _bucket(memory_engine, stage=0, gpus=1, stack="pytorch") == 0


def test_pipeline_turns_off_overlap_and_offload_forces_contiguous():
    from fmest.default_plugins.parallelism import builtin_strategies
    from fmest.job import Parallelism

    strategies = {s.name: s for s in builtin_strategies()}
    zero1 = strategies["zero1"]
    on = Parallelism(zero_overlap_comm=True, zero_contiguous_gradients=False)
    # PipelineModule: overlap_comm disabled (engine.py _configure_zero_optimizer)
    assert zero_reduce_buffer_elements(zero1, Parallelism(zero_overlap_comm=True),
                                       pipeline=True, offload_optimizer=False) == 500_000_000
    # contiguous_gradients or cpu_offload (stage_1_and_2.py)
    assert zero_reduce_buffer_elements(zero1, on, pipeline=False,
                                       offload_optimizer=False) == 0
    assert zero_reduce_buffer_elements(zero1, on, pipeline=False,
                                       offload_optimizer=True) == 2 * 500_000_000
    # a strategy without DeepSpeed's buffer ignores the zero_* fields
    assert zero_reduce_buffer_elements(strategies["fsdp_full_shard"], on,
                                       pipeline=False, offload_optimizer=False) == 0


@pytest.fixture(scope="module")
def engine():
    return new_engine(entrypoints=True)


def test_planner_bucket_term_agrees_with_estimator(engine):
    """The planner's bucket array (``_sharding_arrays``) against the estimator's
    ``_bucket_bytes`` on configurations drawn from the space, as tests/test_plan_vector.py
    draws them, for a job that sets every DeepSpeed buffer field."""
    from fmest import to_job
    from fmest.plan.planner import Constraints, _sharding_arrays, config_job, evaluate_space

    job = to_job({"model": "meta-llama/Llama-3.1-8B", "workload": {"dataset_tokens": 1e9},
                  "parallelism": {"zero_reduce_bucket_elems": 123_000_000,
                                  "zero_overlap_comm": True},
                  "options": {"fit_confidence": 0.5}})
    res, _, _, _, ctx = evaluate_space(job, Constraints(gpus="H100-SXM", max_gpus=16,
                                                        objective="time"), engine=engine)
    names = [name for name, _ in ctx["shardings"]]
    zero = np.isin(res["hidx"], [names.index(n) for n in ("zero1", "zero2", "zero3")
                                 if n in names])
    assert zero.any()
    rows = np.flatnonzero(zero)
    pick = np.random.default_rng(0).choice(rows, size=min(20, rows.size), replace=False)
    sel = {k: np.asarray(v)[pick] for k, v in res.items() if np.ndim(v) and len(v) == len(zero)}
    planned = _sharding_arrays(sel, 8, ctx)["bucket_elements"]
    seen = set()
    for n, i in enumerate(pick):
        j = config_job(job, res, int(i), ctx["shardings"], method="theory")
        setup = estimator.job_setup(j, engine.context(j))
        stage = estimator.pipeline_stages(8, 1, "1f1b", 1, 1)[0]
        state = estimator.model_state_terms(setup, estimator.stage_params(setup, stage))
        assert planned[n] * setup.act_bytes == estimator._bucket_bytes(setup, state), (
            j.parallelism, planned[n])
        seen.add(planned[n])
    assert seen <= {123_000_000, 2 * 123_000_000}
