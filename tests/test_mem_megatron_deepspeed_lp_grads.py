"""Megatron-DeepSpeed bf16 (DeepSpeed BF16_Optimizer under the PipelineEngine) keeps the bf16
``param.grad`` of every parameter beside the fp32 accumulator (stacks.toml ``lp_grads_kept``,
deepspeedai/DeepSpeed @56c522386878df2513ccb548de76b50191ae3af7)."""

from fmest.convert import job_from_dict
from fmest.engine import Engine
from fmest.stacks import load_profiles


def _job(stack: str, dtype: str = "bf16") -> dict:
    return {"model": "bigscience/bloom-7b1",
            "training": {"dtype": dtype, "technique": "full", "seq_len": 2048,
                         "micro_batch_size": 1, "grad_accum_steps": 8,
                         "activation_checkpointing": "full", "stack": stack},
            "parallelism": {"dp": 2, "tp": 1, "pp": 1, "zero_stage": 1},
            "hardware": {"gpu": "A100-SXM-80GB", "gpus_per_node": 2, "nodes": 1}}


def _grads(job: dict) -> float:
    mem = Engine().estimate(job_from_dict(job), quantities=("memory",)).memory
    return mem.components["gradients"]


def test_profile_flag_and_source():
    prof = {p.name: p for p in load_profiles()}["megatron-deepspeed"]
    assert prof.lp_grads_kept and "56c522386878" in prof.sources["lp_grads_kept"]


def test_bf16_grads_are_fp32_plus_bf16():
    g = _grads(_job("megatron-deepspeed"))
    g_core = _grads(_job("megatron-core"))  # fp32 main_grad only (param.grad freed by hooks)
    assert abs(g / g_core - 1.5) < 1e-6


def test_fp16_unchanged():
    # fp16 runs DeepSpeed's ZeRO/FP16 optimizer: compute-dtype gradients only
    g = _grads(_job("megatron-deepspeed", "fp16"))
    g_core = _grads(_job("megatron-core", "fp16"))
    assert g <= g_core * 1.0001
