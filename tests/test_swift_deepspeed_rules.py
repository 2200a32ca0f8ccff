"""The ms-swift / DeepSpeed rules of fmest issues 20-22, each against a hand calculation from
the code it reads.

* benchmarks/measured.py rule 4: ``quant bits=8`` on ms-swift's ``int8 (gptq)`` rows ->
  ``training.quantization_bits`` 8 (ms-swift swift/llm/utils/model.py at
  46922151e06cdfc110882e182757674f12352f2c: the ``qwen-*-chat-int8`` registrations pass
  ``gptq_bits=8`` to ``_check_gptq_model`` -> ``GPTQConfig(bits=8)``), so the quantized
  linears hold 8-bit bytes instead of the 4-bit ones of the int4 rows.
* memory_theory ``_zero_step_grad_copy``: DeepSpeed's ZeRO optimizers flatten each group's
  (ZeRO-3: each sub-group's, ``sub_group_size`` 1e9) gradient partition and cast it to fp32 at
  the step (deepspeedai/DeepSpeed edaa7221 ``stage_1_and_2.py`` ``step``, ``stage3.py``
  ``_prepare_fp32_grad_for_sub_group``): ``(grad bytes + 4) x elements`` at the cast.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fmest.convert import job_from_dict
from fmest.models.presets import load_preset
from fmest.testing import new_engine
from fmest_memory_theory import formulas as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import measured  # noqa: E402

GiB = 1024 ** 3
INT8_ROW = "r1-swift-qwen-7b-chat-gptq-lora-int8-gptq-l2048-b1-fa1-gc1-r8-default-ga16-mem"
INT4_ROW = "r1-swift-qwen-7b-chat-gptq-lora-int4-gptq-l2048-b1-fa1-gc1-r8-default-ga16-mem"
BF16_ROW = "r1-swift-qwen-7b-chat-lora-bf16-l2048-b1-fa1-gc1-r8-default-ga16-mem"


@pytest.fixture(scope="module")
def engine():
    return new_engine(entrypoints=True)


@pytest.fixture(scope="module")
def rows():
    return {r["id"]: r for r in measured.load_rows("memory")}


def _memory(engine, job: dict):
    est = engine.estimate_memory(job_from_dict(job)).chosen
    assert est is not None
    return est


# -- rule 4: the GPTQ bit width reaches the job ----------------------------------------------

def test_gptq_int8_row_carries_8_bits(rows):
    int8, _ = measured.row_to_job(rows[INT8_ROW])
    int4, _ = measured.row_to_job(rows[INT4_ROW])
    bf16, _ = measured.row_to_job(rows[BF16_ROW])
    assert int8["training"]["technique"] == int4["training"]["technique"] == "qlora"
    assert int8["training"]["quantization_bits"] == 8
    assert int4["training"]["quantization_bits"] == 4
    assert "quantization_bits" not in bf16["training"]   # LoRA in bf16: no quantized base


def test_gptq_int8_weight_bytes_by_hand(engine, rows):
    """Qwen-7B (hidden 4096, 32 layers, MLP 11008, vocab 151936, untied head): q/k/v/o are
    4096 x 4096 and gate/up/down 4096 x 11008 per layer; 8-bit: one byte per weight plus one
    fp32 scale per output row; 4-bit with double quantization: 0.5 + 1/64 + 4/(64*256) bytes
    per weight; everything else (embeddings, head, norms) stays bf16."""
    layers, h, f = 32, 4096, 11008
    q_params = layers * (4 * h * h + 3 * h * f)
    assert q_params == 6_476_005_376
    row_scales = layers * 4 * (4 * h + 2 * f + h)          # out rows of q,k,v,o,gate,up,down
    rest = load_preset("Qwen/Qwen-7B").param_counts().total - q_params
    int8, _ = measured.row_to_job(rows[INT8_ROW])
    int4, _ = measured.row_to_job(rows[INT4_ROW])
    w8 = _memory(engine, int8).components["weights"]
    w4 = _memory(engine, int4).components["weights"]
    assert w8 == pytest.approx(q_params * 1 + row_scales + rest * 2, rel=1e-9)
    nf4_dq = 0.5 + 1 / 64 + 4 / (64 * 256)
    assert w4 == pytest.approx(q_params * nf4_dq + rest * 2, rel=1e-9)
    # AutoGPTQ 0.5.1 packs 8-bit GPTQ at 1 + 2/128 (fp16 scales) + 1/128 (int32/4 zeros per
    # 128-group) bytes per weight: within 2.3 % of the 8-bit bytes fmest counts
    gptq8 = q_params * (1 + 2 / 128 + 1 / 128) + rest * 2
    assert abs(w8 / gptq8 - 1) < 0.023


# -- memory_theory: DeepSpeed's ZeRO step gradient copy ---------------------------------------

def test_zero_step_grad_copy_formula():
    assert F.DEEPSPEED_SUB_GROUP_ELEMENTS == 1_000_000_000   # config.py sub_group_size 1e9
    # bf16 gradients: the flat bf16 copy (2) and its fp32 cast (4) coexist at the cast
    assert F.zero_step_grad_copy_bytes(10.0, 2.0) == 60.0
    # fp32 gradients: .to(fp32) returns the flat copy itself
    assert F.zero_step_grad_copy_bytes(10.0, 4.0) == 40.0
    # ZeRO-3 sub-groups cap the elements
    assert F.zero_step_grad_copy_bytes(3e9, 2.0, sub_group_elements=1e9) == 6e9
    assert F.zero_step_grad_copy_bytes(5e8, 2.0, sub_group_elements=1e9) == 3e9


def _full(zero: int, dp: int = 1, **training) -> dict:
    return {"model": "Qwen/Qwen-1_8B",
            "training": {"dtype": "bf16", "seq_len": 256, "micro_batch_size": 1,
                         "grad_accum_steps": 8, "activation_checkpointing": "full",
                         "attention": "flash", "stack": "deepspeed", **training},
            "parallelism": {"dp": dp, "zero_stage": zero},
            "hardware": {"gpu": "A100-SXM-80GB", "gpus_per_node": dp, "nodes": 1}}


def test_zero3_sub_group_copy_on_qwen_readme_full_parameter(engine):
    """Qwen's README full-parameter run (finetune/ds_config_zero3.json: ZeRO-3, no offload,
    sub_group_size 1e9) on one GPU: the 1.84e9-parameter partition is stepped in sub-groups
    of 1e9, so 6 bytes x 1e9 at the cast (DeepSpeed's FusedAdam adds no temporaries)."""
    est = _memory(engine, _full(3))
    assert est.components["optimizer_temporaries"] == pytest.approx(6e9, rel=1e-12)


def test_zero3_sub_group_size_caps_the_copy(engine):
    """``zero_optimization.sub_group_size`` (``parallelism.zero3_sub_group_elems``, the DeepSpeed
    config reader's mapping): a 1e8 sub-group casts 6 bytes x 1e8 at a time, not x 1e9; ZeRO-2
    has no sub-groups, so the field changes nothing there."""
    job = _full(3)
    job["parallelism"]["zero3_sub_group_elems"] = 100_000_000
    est = _memory(engine, job)
    assert est.components["optimizer_temporaries"] == pytest.approx(6e8, rel=1e-12)
    two = _full(2, dp=2)
    base = _memory(engine, two).components["optimizer_temporaries"]
    two["parallelism"]["zero3_sub_group_elems"] = 100_000_000
    assert _memory(engine, two).components["optimizer_temporaries"] == base


def test_zero2_copy_is_the_partition(engine):
    n = load_preset("Qwen/Qwen-1_8B").param_counts().total
    est = _memory(engine, _full(2, dp=2))
    assert est.components["optimizer_temporaries"] == pytest.approx(6 * n / 2, rel=1e-9)


def test_zero1_without_fp32_buffer_and_with_it(engine):
    """ZeRO-1 runs the same ``stage_1_and_2.py`` step; under fmest's deepspeed stack bf16
    gradients of unsharded ZeRO-0/1 live in an fp32 flat buffer (stacks.toml ``fp32_grads``),
    stepped in place: no copy."""
    n = load_preset("Qwen/Qwen-1_8B").param_counts().total
    eager = _memory(engine, _full(1, dp=2, stack="pytorch", optimizer_impl="fused",
                                  precision="master"))
    assert eager.components["optimizer_temporaries"] == pytest.approx(6 * n / 2, rel=1e-9)
    ds = _memory(engine, _full(1, dp=2))
    assert ds.components.get("optimizer_temporaries", 0.0) == 0.0


def test_zero_copy_gone_with_optimizer_offload(engine):
    job = _full(3)
    job["parallelism"]["cpu_offload"] = "optimizer"
    assert _memory(engine, job).components.get("optimizer_temporaries", 0.0) == 0.0


def test_qwen_readme_full_parameter_row_uses_zero3_no_offload(rows):
    """The row's job says what finetune/ds_config_zero3.json says (offload_optimizer and
    offload_param ``device: none``): ZeRO-3, no CPU offload, 8 micro-batches per step."""
    job, _ = measured.row_to_job(rows["r1-qwen-1-8b-full-parameter-l256-mem"])
    assert job["parallelism"]["zero_stage"] == 3
    assert "cpu_offload" not in job["parallelism"]
    assert job["training"]["grad_accum_steps"] == 8 and job["training"]["micro_batch_size"] == 1


# -- GPTQ bases (``training.quantization_method`` gptq, read when the job has the field) -------

def _gptq_job(engine, job: dict, method: str):
    """The job with ``training.quantization_method``: core's ``Training`` may not have the
    field yet (the plugins and benchmarks/measured.py read it with a fallback to ``bnb``), so
    a subclass carries it here."""
    import attrs

    from fmest import job as J

    base = job_from_dict(job)
    if "quantization_method" in {f.name for f in attrs.fields(J.Training)}:
        return attrs.evolve(base, training=attrs.evolve(base.training,
                                                        quantization_method=method))

    @attrs.frozen(kw_only=True)
    class TrainingWithMethod(J.Training):
        quantization_method: str = "bnb"

    fields = {f.name: getattr(base.training, f.name) for f in attrs.fields(J.Training)}
    return attrs.evolve(base, training=TrainingWithMethod(**fields, quantization_method=method))


def test_gptq_unpack_bytes_by_hand():
    from fmest_time_roofline import formulas as T

    # 4-bit: qweight 0.5, shift w4, .to(int8) r4 w1, and r1 w1, sub r1 w1, mul r1 w2, matmul r2
    assert T.gptq_dequant_bytes_per_param(4) == 0.5 + 4 + 5 + 2 + 2 + 3 + 2 == 18.5
    # 8-bit: int16 intermediates
    assert T.gptq_dequant_bytes_per_param(8) == 1 + 4 + 6 + 4 + 4 + 4 + 2 == 25.0


def test_gptq_dequant_traffic_per_micro_batch(engine, rows):
    """Qwen's README Q-LoRA (GPTQ Int4, full checkpointing): 18.5 bytes per quantized weight
    unpacked twice per micro-batch (forward and recompute), against bitsandbytes' 4.6 bytes
    three times (forward, backward, recompute)."""
    from fmest_time_roofline.estimator import device_rates, matmul_times, step_shape

    job, _ = measured.row_to_job(rows["r1-qwen-7b-q-lora-l256-mem"])
    job["training"].pop("quantization_method", None)
    q_params = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
    got = {}
    for method in ("bnb", "gptq"):
        j = _gptq_job(engine, job, method)
        ctx = engine.context(j)
        stack = ctx.transforms.stack if ctx.transforms is not None else None
        rates = device_rates(j, ctx.gpu, stack)
        shape = step_shape(j, ctx.model, ctx.layout)
        got[method] = matmul_times(j, ctx.model, shape, rates, stack).dequant_bytes
    assert got["gptq"] == pytest.approx(18.5 * 2 * q_params, rel=1e-9)
    assert got["bnb"] == pytest.approx(4.6 * 3 * q_params, rel=1e-9)


def test_gptq_keeps_the_recomputed_layers_unpacked_weights(engine, rows):
    """Memory: the recomputed layer's unpacked 16-bit weights (one Qwen-7B layer: 202,375,168
    weights x 2 bytes, fp16 run) and the int32 + int8 unpacking buffers of the largest
    quantized weight (Qwen v1's fused c_attn, 4096 x 12288 x 5 bytes) replace bitsandbytes' one
    dequantized weight (4096 x 12288 x 2) in the backward working set of a layer."""
    from fmest_memory_theory import estimator as E

    job, _ = measured.row_to_job(rows["r1-qwen-7b-q-lora-l8192-mem"])
    job["training"].pop("quantization_method", None)
    work = {}
    for method in ("bnb", "gptq"):
        j = _gptq_job(engine, job, method)
        setup = E.job_setup(j, engine.context(j))
        (stage,) = E.pipeline_stages(setup.model.num_layers, 1, "1f1b", 8, 1)
        params = E.stage_params(setup, stage)
        state = E.model_state_terms(setup, params)
        buffers = E.framework_buffer_terms(setup, params, state, stage)
        work[method] = E.activation_terms(setup, params, state, buffers, stage).work_layer
    extra = 202_375_168 * 2 + 4096 * 12288 * (5 - 2)
    assert work["gptq"] - work["bnb"] == pytest.approx(extra, rel=1e-9)
