"""Megatron-Core CUDA graphs and token drop / drop-and-pad as job settings (issue 20): the job
fields, the Megatron reader, the time effect (captured host ops, no dispatcher sync, padded
expert rows), the planner's mirror and the evidence mapper."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fmest_time_roofline.plugin as plugin
from fmest.configs import load_configs
from fmest.convert import job_from_dict
from fmest.errors import InputError
from fmest.job import CUDA_GRAPH_SCOPES, Training
from fmest.plan import vector
from fmest.testing import new_engine
from fmest_time_roofline import formulas as F


@pytest.fixture(scope="module")
def engine():
    return new_engine((plugin, "time_roofline"))


def _job(**training):
    return job_from_dict({
        "model": "Qwen/Qwen3-30B-A3B",
        "training": {"seq_len": 4096, "micro_batch_size": 1, "grad_accum_steps": 8,
                     "dtype": "bf16", "stack": "megatron-core", "attention": "flash",
                     **training},
        "parallelism": {"tp": 1, "pp": 1, "ep": 8, "dp": 8},
        "hardware": {"gpu": "B200-SXM-180GB", "nodes": 1}})


def _step(engine, **training):
    return engine.estimate(_job(**training), quantities=("time",)).time.step_seconds


def test_fields_and_validation():
    t = Training(cuda_graph_scope="attn,moe_router,moe_preprocess",
                 moe_expert_capacity_factor=1.0, moe_pad_to_capacity=True)
    assert t.cuda_graph_scope == ("attn", "moe_router", "moe_preprocess")
    assert t.moe_drop_and_pad
    assert not Training(moe_expert_capacity_factor=1.0).moe_drop_and_pad
    assert Training().cuda_graph_scope is None
    assert {"attn", "moe", "moe_router", "moe_preprocess", "full"} <= set(CUDA_GRAPH_SCOPES)
    with pytest.raises(InputError):
        Training(cuda_graph_scope=("router",))
    with pytest.raises(InputError):
        Training(cuda_graph_scope=("moe", "moe_router"))
    with pytest.raises(InputError):
        Training(moe_pad_to_capacity=True)              # needs a capacity factor
    with pytest.raises(InputError):
        Training(moe_expert_capacity_factor=0.0)


def test_reader(tmp_path):
    f = tmp_path / "args.txt"
    f.write_text("--cuda-graph-impl transformer_engine --cuda-graph-scope attn moe_router "
                 "moe_preprocess --moe-expert-capacity-factor 1.25 "
                 "--moe-pad-expert-input-to-capacity --moe-token-drop-policy probs\n")
    tr = load_configs([str(f)]).data["training"]
    assert tuple(tr["cuda_graph_scope"]) == ("attn", "moe_router", "moe_preprocess")
    assert tr["moe_expert_capacity_factor"] == 1.25 and tr["moe_pad_to_capacity"] is True
    f.write_text("--enable-cuda-graph\n--moe-expert-capacity-factor -1\n")
    tr = load_configs([str(f)]).data["training"]
    assert tuple(tr["cuda_graph_scope"]) == ("full",)          # empty list = whole layer
    assert "moe_expert_capacity_factor" not in tr                # negative = dropless
    f.write_text("--cuda-graph-scope attn\n")                     # impl none: no effect
    assert "cuda_graph_scope" not in load_configs([str(f)]).data["training"]


def test_profile_and_capacity_formulas():
    ops, sync, eager = F.moe_layer_host_profile(None, drop_and_pad=False)
    assert sync and eager and ops == F.MEGATRON_MOE_LAYER_HOST_OPS
    ops, sync, eager = F.moe_layer_host_profile(("attn", "moe_router", "moe_preprocess"),
                                                drop_and_pad=False)
    assert sync and eager and ops["forward"] == 137 - 120 + 1
    ops, sync, eager = F.moe_layer_host_profile(("full",), drop_and_pad=True)
    assert not sync and not eager and ops["forward"] == ops["backward"] == 1
    assert F.moe_layer_host_profile(None, drop_and_pad=True, dispatcher="deepep")[1]
    assert F.moe_capacity_row_factor(4096, 8, 128, None, False) == 1.0
    assert F.moe_capacity_row_factor(4096, 8, 128, 1.5, True) == pytest.approx(1.5)
    assert F.moe_capacity_row_factor(100, 8, 128, 1.0, True) == math.ceil(6.25) / 6.25
    assert F.moe_capacity_row_factor(4096, 8, 128, 0.5, False) == 0.5
    # one function for both: the planner's arrays read the plugin's (fmest.physics.moe_host)
    assert vector.moe_layer_host_profile is F.moe_layer_host_profile
    for scope in (None, ("attn",), ("attn", "moe_router", "moe_preprocess"), ("full",)):
        for pad in (False, True):
            assert vector.moe_layer_host_profile(scope, drop_and_pad=pad) \
                == F.moe_layer_host_profile(scope, drop_and_pad=pad)


def test_time_direction_and_size(engine):
    base = _step(engine)
    graphs = _step(engine, cuda_graph_scope=["attn", "moe_router", "moe_preprocess"])
    whole = _step(engine, cuda_graph_scope=["full"], moe_expert_capacity_factor=1.0,
                  moe_pad_to_capacity=True)
    padded = _step(engine, moe_expert_capacity_factor=2.0, moe_pad_to_capacity=True)
    assert whole < graphs <= base
    # F = 2 pads every expert to twice its balanced rows: more expert GEMM time
    assert padded > _step(engine, moe_expert_capacity_factor=1.0, moe_pad_to_capacity=True)
    # the whole layer captured: no MoE host wait is left
    t = engine.estimate(_job(cuda_graph_scope=["full"], moe_expert_capacity_factor=1.0,
                             moe_pad_to_capacity=True), quantities=("time",)).time
    assert not any("MoE dispatcher host syncs" in n for n in t.notes)


def test_vector_mirror_drops_the_wait():
    cfg = dict(layers=48.0, pp=np.array([1.0]), moe_layers=48.0, fwd_share=1 / 3,
               num_experts=128.0, ep=np.array([8.0]), ckpt_full=np.array([False]))
    gpu_mb = np.array([48 * 1e-3])
    plain = vector.moe_sync_wait_seconds(cfg, gpu_mb)
    whole = vector.moe_sync_wait_seconds(
        {**cfg, "cuda_graph_scope": ("full",), "moe_drop_and_pad": True}, gpu_mb)
    assert plain[0] > 0 and whole[0] == 0.0


def test_mapper_reads_stated_settings():
    import benchmarks.measured as measured

    got = measured._megatron_graphs_and_drop(
        "megatron-moe-modelzoo-qwen3", "cuda graphs partial (attn, router, preprocess) per command")
    assert got == {"cuda_graph_scope": ("attn", "moe_router", "moe_preprocess")}
    got = measured._megatron_graphs_and_drop(
        "megatron-bridge-perf-25.09", "model_table_name=qwen3_30b_a3b (tokendrop); moe")
    assert got == {"moe_expert_capacity_factor": 1.0, "moe_pad_to_capacity": True}
    assert measured._megatron_graphs_and_drop("x", "cumulative ladder step 6: cuda graphs") == {}
