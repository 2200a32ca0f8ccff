"""KempnerForge stack profile (stacks.toml ``kempnerforge``): fields read from its code."""

from fmest.convert import job_from_dict
from fmest.engine import Engine
from fmest.stacks import load_profiles

GIB = 2**30


def _job(stack: str, tp: int, dp: int, fsdp: bool) -> dict:
    par = {"dp": dp, "tp": tp, "pp": 1, "cp": 1}
    if fsdp:
        par["fsdp"] = "full_shard"
    return {"model": "meta-llama/Meta-Llama-3-8B",
            "training": {"dtype": "bf16", "technique": "full", "optimizer": "adamw",
                         "seq_len": 4096, "micro_batch_size": 4, "grad_accum_steps": 2,
                         "activation_checkpointing": "full", "stack": stack},
            "parallelism": par,
            "hardware": {"gpu": "H200-SXM-141GB", "gpus_per_node": dp * tp, "nodes": 1}}


def _mem(job: dict):
    return Engine().estimate(job_from_dict(job), quantities=("memory",)).memory


def test_profile_fields_have_sources():
    prof = {p.name: p for p in load_profiles()}["kempnerforge"]
    for name in ("tp_logits_replicated", "loss_in_compute_dtype", "no_sync_grad_bytes",
                 "auto_precision", "optimizer_impl", "fsdp_no_sync_accumulation"):
        assert name in prof.sources, name
    assert prof.tp_logits_replicated and prof.loss_in_compute_dtype
    assert prof.no_sync_grad_bytes == 4.0 and prof.auto_precision == "pure"


def test_tp_logits_not_divided_by_tp():
    one = _mem(_job("kempnerforge", tp=1, dp=1, fsdp=False)).components["logits_and_loss"]
    four = _mem(_job("kempnerforge", tp=4, dp=1, fsdp=False)).components["logits_and_loss"]
    assert abs(one - four) < 0.01 * one   # replicated: same full-vocabulary tensors


def test_no_sync_accumulates_fp32_unsharded_grads():
    mem = _mem(_job("kempnerforge", tp=1, dp=4, fsdp=True))
    # 8.03 B parameters x 4 bytes of unsharded fp32 gradient held between micro-batches
    assert mem.components["framework_buffers"] > 29 * GIB
    assert mem.components["weights"] < 4 * GIB   # pure bf16, sharded over 4
