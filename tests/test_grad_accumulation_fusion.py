"""Megatron-Core gradient accumulation fusion (``training.grad_accumulation_fusion``, stacks.toml
``wgrad_accumulation_fused``): the weight-gradient GEMM accumulates into the fp32 main gradient
in place (TE ``fuse_wgrad_accumulation``), so accumulated micro-batches add no read-add-write
of the gradient buffer to the step; ``--no-gradient-accumulation-fusion`` brings it back."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fmest import to_job
from fmest.stacks import wgrad_accumulation_fused

ROOT = Path(__file__).resolve().parents[1]


def _job(**training):
    tr = {"stack": "megatron-core", "seq_len": 4096, "micro_batch_size": 1,
          "grad_accum_steps": 16, "dtype": "bf16"}
    tr.update(training)
    return to_job({"model": "meta-llama/Llama-2-7b-hf", "training": tr,
                   "parallelism": {"dp": 8}, "hardware": {"gpu": "H100-SXM", "gpus_per_node": 8}})


@pytest.fixture(scope="module")
def engine():
    from fmest.testing import new_engine

    return new_engine(entrypoints=True)


def _membound(engine, job) -> float:
    return engine.estimate(job, quantities=("time",)).time.breakdown["memory_bound"]


def test_fused_accumulation_drops_the_read_add_write(engine):
    fused = _membound(engine, _job())
    unfused = _membound(engine, _job(grad_accumulation_fusion=False))
    params, accum, hbm = 6_738_415_616, 16, None
    report = engine.estimate(_job(), quantities=("time",))
    hbm = report.context.gpu.hbm_bytes_per_s
    from fmest.physics.time_constants import HBM_EFFICIENCY

    # 3 x fp32 main grads x local params x (m - 1), at achievable HBM bandwidth
    expected = 3 * 4 * params * (accum - 1) / (hbm * HBM_EFFICIENCY)
    assert unfused - fused == pytest.approx(expected, rel=0.01)


def test_rule_reads_the_job_then_the_stack():
    assert wgrad_accumulation_fused(_job().training, None) is False
    from fmest.stacks import resolve_builtin_stack

    job = _job()
    assert wgrad_accumulation_fused(job.training, resolve_builtin_stack(job))
    off = _job(grad_accumulation_fusion=False)
    assert not wgrad_accumulation_fused(off.training, resolve_builtin_stack(off))
    hf = _job(stack="hf-trainer")
    assert not wgrad_accumulation_fused(hf.training, resolve_builtin_stack(hf))


def test_megatron_arguments_are_read(tmp_path):
    from fmest.configs import load_configs

    f = tmp_path / "args"
    f.write_text("--tensor-model-parallel-size 2 --bf16 --no-gradient-accumulation-fusion\n")
    data = load_configs([str(f)]).data
    value = data["training"]["grad_accumulation_fusion"]
    assert value is False


def test_megatron_2021_rows_are_unfused():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import measured

    rows = [r for r in measured.load_rows("throughput")
            if r["source"] == "megatron-lm-readme-ptdp-2021"]
    assert rows
    job, _ = measured.row_to_job(rows[0])
    assert job["training"]["grad_accumulation_fusion"] is False


def test_fp8_weights_cast_once_per_step_under_megatron_core(engine):
    """Transformer Engine caches each fp8 weight and its transpose from the first micro-batch
    (stacks.toml fp8_weight_cast_per_step): with m micro-batches the weight casts of m - 1
    go; the activations' casts stay."""
    import fmest_time_roofline.estimator as E  # type: ignore[import-not-found]
    from fmest.transforms import transforms_of

    def cast_bytes(accum: int, stack: str = "megatron-core") -> float:
        job = _job(dtype="fp8", grad_accum_steps=accum, stack=stack)
        ctx = engine.context(job)
        stack_r = transforms_of(job, ctx).stack
        shape = E.step_shape(job, ctx.model, ctx.layout, stack_r)
        rates = E.device_rates(job, ctx.gpu, stack_r, ctx.model, E.kernel_seq_len(shape))
        return E.matmul_times(job, ctx.model, shape, rates, stack_r).fp8_cast_bytes

    one, four = cast_bytes(1), cast_bytes(4)
    model = engine.context(_job()).model
    weights = sum(lin.in_features * lin.out_features * lin.layers for lin in model.linears
                  if lin.kind != "head")
    # 1 byte per element (TE writes only the fp8 copy), three casts per weight
    assert one - four == pytest.approx(3 * weights * (1 - 1 / 4), rel=1e-6)
    # a stack without the cache casts every micro-batch
    assert cast_bytes(1, "torchtitan") == pytest.approx(cast_bytes(4, "torchtitan"))
