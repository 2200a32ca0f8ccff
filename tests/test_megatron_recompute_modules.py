"""Megatron-Core selective ``--recompute-modules`` and the MoE permute/router fusions (issue 20):
the job fields, the config reader, and their price in the time model (recomputed GEMMs, the
attention core only when ``core_attn`` is listed, the pointwise bytes the modules rerun, the
unfused permute/router bytes)."""

from __future__ import annotations

import pytest

import fmest_time_roofline.plugin as plugin
from fmest.configs import load_configs
from fmest.convert import job_from_dict
from fmest.errors import InputError
from fmest.job import RECOMPUTE_MODULES, Training, resolve_layout
from fmest.testing import new_engine
from fmest_time_roofline import estimator
from fmest_time_roofline import formulas as F


@pytest.fixture(scope="module")
def engine():
    return new_engine((plugin, "time_roofline"))


def _job(training=None, par=None):
    base = {"model": "deepseek-ai/DeepSeek-V3",
            "training": {"seq_len": 4096, "micro_batch_size": 1, "grad_accum_steps": 8,
                         "dtype": "bf16", "stack": "megatron-core", "attention": "flash",
                         **(training or {})},
            "parallelism": {"tp": 1, "pp": 8, "ep": 32, "dp": 32, **(par or {})},
            "hardware": {"gpu": "H100-SXM-80GB", "nodes": 32}}
    return job_from_dict(base)


def _step(engine, **training):
    return engine.estimate(_job(training), quantities=("time",)).time.step_seconds


# -- the job field --------------------------------------------------------------------------
def test_field_defaults_and_validation():
    t = Training(activation_checkpointing="selective")
    assert t.selective_modules == frozenset({"core_attn"})
    t = Training(activation_checkpointing="selective", recompute_modules="mlp,mla_up_proj")
    assert t.recompute_modules == ("mlp", "mla_up_proj")
    assert t.selective_modules == frozenset({"mlp", "mla_up_proj"})
    assert Training(activation_checkpointing="full").selective_modules == frozenset()
    with pytest.raises(InputError):
        Training(recompute_modules=("mlp",))          # only with selective
    with pytest.raises(InputError):
        Training(activation_checkpointing="selective", recompute_modules=("attn",))
    assert set(RECOMPUTE_MODULES) >= {"core_attn", "moe_act", "mla_up_proj", "moe"}


# -- formulas -------------------------------------------------------------------------------
def test_linear_selection_follows_megatron_modules():
    sel = F.selective_recomputes_linear
    assert sel("q_b_proj", "attention", {"mla_up_proj"})
    assert sel("kv_b_proj", "attention", {"mla_up_proj"})
    assert not sel("q_a_proj", "attention", {"mla_up_proj"})
    assert sel("down_proj", "mlp", {"mlp"}) and not sel("down_proj", "expert", {"mlp"})
    assert sel("gate", "router", {"moe"}) and sel("up", "shared_expert", {"shared_experts"})
    assert not sel("up", "expert", {"moe_act"})     # moe_act reruns the activation only
    assert not sel("q_b_proj", "attention", {"core_attn"})


def test_unfused_permute_and_router_bytes():
    fwd, bwd = F.moe_unfused_permute_bytes(1000, 8, 7168, 2, tp=1)
    assert fwd == pytest.approx(8 * 1000 * 7168 * 2)
    assert bwd == pytest.approx(9 * 1000 * 7168 * 2)
    assert F.moe_unfused_permute_bytes(1000, 8, 7168, 2, tp=2)[0] == pytest.approx(fwd / 2)
    rf, rb = F.moe_unfused_router_bytes(1000, 256)
    assert rf == pytest.approx(7 * 1000 * 256 * 4) and rb == pytest.approx(3 * 1000 * 256 * 4)
    assert F.moe_unfused_router_bytes(0, 256) == (0.0, 0.0)


# -- the time model ---------------------------------------------------------------------------
def test_core_attn_default_matches_plain_selective(engine):
    assert _step(engine, activation_checkpointing="selective") == pytest.approx(
        _step(engine, activation_checkpointing="selective", recompute_modules=["core_attn"]))


def test_each_module_adds_its_recompute(engine):
    none = _step(engine, activation_checkpointing="none")
    base = _step(engine, activation_checkpointing="selective", recompute_modules=["moe_act"])
    assert base > none
    for extra in ("mla_up_proj", "layernorm", "mlp", "shared_experts", "core_attn", "moe"):
        more = _step(engine, activation_checkpointing="selective",
                     recompute_modules=["moe_act", extra])
        assert more > base, extra
    # the whole MoE layer costs more than its activation or its shared experts alone
    moe = _step(engine, activation_checkpointing="selective", recompute_modules=["moe"])
    assert moe > _step(engine, activation_checkpointing="selective",
                       recompute_modules=["shared_experts", "moe_act"])


def test_unfused_moe_kernels_are_slower(engine):
    fused = _step(engine)
    assert _step(engine, moe_permute_fusion=True) == pytest.approx(fused)
    assert _step(engine, moe_permute_fusion=False) > fused
    assert _step(engine, moe_router_fusion=False) > fused


def test_hfu_counts_the_listed_modules(engine):
    def hfu(**tr):
        return engine.estimate(_job(tr), quantities=("time",)).time.hfu
    up = hfu(activation_checkpointing="selective", recompute_modules=["mla_up_proj"])
    attn = hfu(activation_checkpointing="selective")
    none = hfu()
    assert up > none and attn > none


def test_step_shape_carries_modules(engine):
    job = _job({"activation_checkpointing": "selective", "recompute_modules": ["mlp"]})
    model = engine.resolve_model(job)
    shape = estimator.step_shape(job, model, resolve_layout(job))
    assert shape.selective_modules == frozenset({"mlp"})
    assert shape.moe_recomputed == 0.0


# -- the Megatron config reader ----------------------------------------------------------------
def _load(tmp_path, text):
    f = tmp_path / "args.txt"
    f.write_text(text)
    return load_configs([str(f)]).data


def test_reader_modules_and_fusions(tmp_path):
    data = _load(tmp_path, "--recompute-granularity selective --recompute-modules mla_up_proj mlp "
                 "--moe-permute-fusion --moe-router-fusion --moe-grouped-gemm\n")
    tr = data["training"]
    assert tuple(tr["recompute_modules"]) == ("mla_up_proj", "mlp")
    assert tr["moe_permute_fusion"] is True and tr["moe_router_fusion"] is True


def test_reader_modules_need_selective(tmp_path):
    data = _load(tmp_path, "--recompute-granularity full --recompute-modules mlp\n")
    assert "recompute_modules" not in data["training"]


def test_reader_moe_layer_recompute(tmp_path):
    data = _load(tmp_path, "--moe-layer-recompute\n")
    assert data["training"]["activation_checkpointing"] == "selective"
    assert tuple(data["training"]["recompute_modules"]) == ("core_attn", "moe")


def test_nemo_yaml_modules(tmp_path):
    f = tmp_path / "cfg.yaml"
    f.write_text("model:\n  tensor_model_parallel_size: 1\n  recompute_granularity: selective\n"
                 "  recompute_modules: [moe_act, layernorm]\n  moe_router_fusion: false\n"
                 "trainer:\n  precision: bf16-mixed\n")
    tr = load_configs([str(f)]).data["training"]
    assert tuple(tr["recompute_modules"]) == ("moe_act", "layernorm")
    assert tr["moe_router_fusion"] is False


def test_a_hydra_style_module_list_and_the_advice_to_checkpoint_fully(tmp_path):
    """Megatron-Bridge overrides write the list as ``[a,b]``: every name is read; and the fit
    advice's "--grad-checkpoint full" drops the modules (Megatron reads them only under
    selective) instead of building a job the input door refuses."""
    from fmest import api, to_job
    from fmest.configs import load_configs

    f = tmp_path / "run.sh"
    f.write_text("python run_recipe.py model.recompute_granularity=selective \\\n"
                 "    model.recompute_modules=[core_attn,mlp,layernorm,moe_act,moe]\n")
    t = load_configs([str(f)]).data["training"]
    assert t["recompute_modules"] == ["core_attn", "mlp", "layernorm", "moe_act", "moe"]
    job = to_job({"model": "mistralai/Mixtral-8x7B-v0.1",
                  "training": {"stack": "megatron-core", "activation_checkpointing": "selective",
                               "recompute_modules": ["mlp"], "seq_len": 8192,
                               "micro_batch_size": 2},
                  "hardware": {"gpu": "H100-SXM"}})
    report = api.estimate_jobs([(job, None)])
    changes = report.to_dict()["memory"]["to_make_it_fit"]
    assert changes, "a Mixtral on one H100 does not fit"
    for change in changes:
        if "--grad-checkpoint" in change["flags"]:
            assert change["flags"][change["flags"].index("--grad-checkpoint") + 1] == "full"
