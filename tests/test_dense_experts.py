"""transformers' Llama 4 MoE runs every expert on every token (``Llama4TextMoe``: the input
repeated once per expert, scaled by the router scores, one bmm over all experts; axolotl's
linearized experts keep that dispatch), so a stack that runs the model's transformers code
computes and keeps all experts' work; stacks with their own MoE code route top-k
(``StackProfile.model_code``; fmest.models.spec.with_dense_experts)."""

from __future__ import annotations

import fmest
from fmest.engine import Engine
from fmest.models.presets import load_preset
from fmest.models.spec import with_dense_experts

SCOUT = "meta-llama/Llama-4-Scout-17B-16E"


def _ctx(stack):
    engine = Engine()
    job = fmest.to_job({"model": SCOUT, "hardware": {"gpu": "H100-SXM-80GB"},
                        "training": {"technique": "qlora", "seq_len": 2048, "stack": stack,
                                     "activation_checkpointing": "full"}})
    return engine, job, engine.context(job)


def test_the_preset_says_its_transformers_code_is_dense():
    spec = load_preset(SCOUT)
    assert spec.expert_dispatch == "dense" and spec.num_experts == 16
    assert load_preset("mistralai/Mixtral-8x7B-v0.1").expert_dispatch == "routed"
    dense = with_dense_experts(spec)
    experts = [lin for lin in dense.linears if lin.kind == "expert"]
    assert experts and all(lin.active_copies == lin.copies == 16 for lin in experts)
    # the parameters are the same; only what each token passes through changes
    assert dense.param_counts().total == spec.param_counts().total
    assert with_dense_experts(dense) is dense


def test_transformers_stacks_run_every_expert_own_code_routes():
    _, _, hf = _ctx("hf-trainer")
    _, _, titan = _ctx("torchtitan")
    hf_experts = [lin for lin in hf.model.linears if lin.kind == "expert"]
    titan_experts = [lin for lin in titan.model.linears if lin.kind == "expert"]
    assert all(lin.active_copies == 16 for lin in hf_experts)
    assert all(lin.active_copies == 1 for lin in titan_experts)
    assert any("all 16 experts on every token" in w for w in hf.warnings)
    assert not any("experts on every token" in w for w in titan.warnings)


def test_dense_experts_cost_time_and_memory():
    engine, job, _ = _ctx("hf-trainer")
    dense = engine.estimate(job)
    _, routed_job, _ = _ctx("torchtitan")
    routed = engine.estimate(routed_job)
    # 16 experts' GEMMs instead of one: the step is several times longer
    assert dense.time.step_seconds > 2.0 * routed.time.step_seconds
    # the recomputed layer's working set holds every expert's input copy and outputs
    assert dense.memory.total_bytes > routed.memory.total_bytes
