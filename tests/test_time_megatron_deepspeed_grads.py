"""Megatron-DeepSpeed gradient handling read from DeepSpeed's code (issue 20).

* bf16: DeepSpeed's BF16_Optimizer folds every micro-batch's fresh bf16 gradients into its
  fp32 copy (``update_hp_grads``: ``hp.add_(lp.grad.to(fp32))``), the first micro-batch
  included: 18 bytes per trainable parameter per micro-batch
  (deepspeedai/DeepSpeed @56c522386878df2513ccb548de76b50191ae3af7
  deepspeed/runtime/pipe/engine.py ``_exec_backward_pass``, bf16_optimizer.py), not autograd's
  3 x 4 bytes on all but the first micro-batch.
* the PipelineEngine reduces gradients once after the last micro-batch (``_exec_reduce_grads``),
  so the stack does not overlap the data-parallel reduction with backward.

Expected values come from those definitions, not from the engine's output.
"""

from __future__ import annotations

import copy

import pytest

import fmest_time_roofline.estimator as E
from fmest import to_job
from fmest.testing import new_engine
from fmest.transforms import transforms_of
from fmest_time_roofline import formulas as F


@pytest.fixture(scope="module")
def engine():
    return new_engine(entrypoints=True)


JOB = {"model": "meta-llama/Llama-2-7b-hf",
       "training": {"stack": "megatron-deepspeed", "dtype": "bf16", "seq_len": 2048,
                    "micro_batch_size": 1, "grad_accum_steps": 1,
                    "activation_checkpointing": "full"},
       "parallelism": {"tp": 2, "pp": 1, "dp": 1},
       "hardware": {"gpu": "A100-80GB", "gpus_per_node": 2, "nodes": 1}}


def _job(**training):
    spec = copy.deepcopy(JOB)
    spec["training"].update(training)
    return to_job(spec)


def test_bf16_optimizer_bytes_apply_to_bf16_full_training_only(engine):
    def own(job):
        ctx = engine.estimate(job, quantities=("time",)).context
        return E.hp_grad_accum_bytes(job.training, transforms_of(job, ctx).stack)

    # read 2 (bf16 grad) + write/read 4 + 4 (fp32 cast) + read/write 4 + 4 (fp32 accumulator)
    assert own(_job()) == 2 + 4 + 4 + 4 + 4
    assert own(_job(dtype="fp16")) == 0.0          # fp16 grads accumulate in autograd
    assert own(_job(technique="lora")) == 0.0
    assert own(_job(stack="megatron-core")) == 0.0


def test_bf16_accumulation_runs_on_every_micro_batch(engine):
    # every per-micro-batch part scales with the micro-batch count, the hp-grad fold included
    # (under autograd's rule the first micro-batch would skip the read-add-write)
    one = engine.estimate(_job(grad_accum_steps=1), quantities=("time",)).time.breakdown
    four = engine.estimate(_job(grad_accum_steps=4), quantities=("time",)).time.breakdown
    assert four["memory_bound"] == pytest.approx(4 * one["memory_bound"], rel=1e-9)
    # and it costs 18 bytes per local trainable parameter per micro-batch at HBM speed
    bf16 = engine.estimate(_job(), quantities=("time",))
    params = E.local_trainable_params(bf16.context.model, _job().training,
                                      E.step_shape(_job(), bf16.context.model,
                                                   bf16.context.layout))
    hbm = bf16.context.gpu.hbm_bytes_per_s
    assert one["memory_bound"] >= F.memory_bound_seconds(18.0 * params, hbm)


def test_megatron_deepspeed_does_not_overlap_the_gradient_reduction(engine):
    job = _job()
    ctx = engine.estimate(job, quantities=("time",)).context
    stack = transforms_of(job, ctx).stack
    assert not stack.overlaps("dp_reduce")
