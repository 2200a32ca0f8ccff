"""Partial activation checkpointing (issues 20/21): ``training.checkpoint_fraction`` -- full
checkpointing of a share of the transformer blocks -- through the job, the flag, the bounds,
the readers (Megatron ``--recompute-method block``, torchtitan ``selective_ac_option = "N"``),
the memory plugin (saved activations), the time plugin (recompute) and the planner's mirror.

Hand-derived expectations: with a share f of the L blocks checkpointed, saved activations are
``f L x (layer input) + (1 - f) L x (everything a layer saves)``, so they are linear in f,
equal full checkpointing at f = 1 and tend to no checkpointing as f -> 0; the recompute's FLOPs
and bytes are f x full checkpointing's."""

from __future__ import annotations

import pytest

import fmest_memory_theory.plugin as memory_plugin
import fmest_time_roofline.estimator as time_estimator
import fmest_time_roofline.plugin as time_plugin
from fmest import bounds
from fmest.cli import main
from fmest.configs import load_configs
from fmest.convert import job_from_dict
from fmest.errors import InputError
from fmest.job import Training
from fmest.plan.vector import recompute_share
from fmest.testing import new_engine

MODEL = "Llama-2-7b-hf"


def _job(checkpointing="full", fraction=None, **training):
    tr = {"activation_checkpointing": checkpointing, "seq_len": 2048, "micro_batch_size": 2,
          **training}
    if fraction is not None:
        tr["checkpoint_fraction"] = fraction
    return job_from_dict({"model": MODEL, "training": tr,
                          "parallelism": {"fsdp": "full_shard", "dp": 8},
                          "hardware": {"gpu": "H100-SXM-80GB"}})


def _activations(job) -> float:
    decision = new_engine((memory_plugin, "memory_theory")).estimate_memory(job)
    assert decision.chosen is not None, decision.failures
    return decision.chosen.components["activations"]


def _time(job):
    return new_engine((time_plugin, "time_roofline")).estimate(
        job, quantities=("time", "tokens"))


# -- the job field and its doors ---------------------------------------------------------------

@pytest.mark.parametrize("bad", [0, 0.0, -0.5, 1.5, float("nan")])
def test_fraction_outside_zero_one_is_refused_naming_the_field(bad):
    with pytest.raises(InputError) as err:
        Training(activation_checkpointing="full", checkpoint_fraction=bad)
    assert "checkpoint_fraction" in str(err.value)


def test_recompute_share():
    assert Training().recompute_share == 0.0
    assert Training(activation_checkpointing="full").recompute_share == 1.0
    assert Training(activation_checkpointing="full",
                    checkpoint_fraction=0.25).recompute_share == 0.25
    assert Training(activation_checkpointing="selective",
                    checkpoint_fraction=0.25).recompute_share == 0.0


def test_fraction_without_full_checkpointing_warns_ignored():
    model = new_engine().resolve_model(job_from_dict({"model": MODEL}))
    warnings = bounds.check_oddities(_job("selective", 0.5), model)
    assert len(warnings) == 1 and warnings[0].startswith("training.checkpoint_fraction: ignored")
    assert bounds.check_oddities(_job("full", 0.5), model) == ()


def test_cli_flag_sets_the_field_and_refuses_out_of_range(capsys):
    import json
    rc = main(["estimate", "--format", "json", "--model", MODEL, "--grad-checkpoint", "full",
               "--checkpoint-fraction", "0.5", "--dp", "8", "--fsdp", "full_shard"],
              engine=new_engine(entrypoints=True))
    out = capsys.readouterr().out
    assert rc == 0, out
    assert json.loads(out)["job"]["training"]["checkpoint_fraction"] == 0.5
    with pytest.raises(SystemExit):
        main(["estimate", "--model", MODEL, "--checkpoint-fraction", "1.5"])


# -- memory ------------------------------------------------------------------------------------

def test_fraction_one_is_full_checkpointing():
    assert _activations(_job("full", 1.0)) == pytest.approx(_activations(_job("full")))


def test_activations_lie_between_none_and_full_and_are_linear_in_the_fraction():
    none, full = _activations(_job("none")), _activations(_job("full"))
    acts = {f: _activations(_job("full", f)) for f in (1e-6, 0.25, 0.5, 0.75)}
    assert full < acts[0.75] < acts[0.5] < acts[0.25] < none
    # linear in f below 1 (each checkpointed block trades its saved tensors for its input)
    step = acts[0.25] - acts[0.5]
    assert acts[0.5] - acts[0.75] == pytest.approx(step, rel=1e-3)
    assert acts[1e-6] - acts[0.25] == pytest.approx(step, rel=1e-3)
    # f -> 0 is no checkpointing's saved activations
    assert acts[1e-6] == pytest.approx(none, rel=1e-4)


# -- time --------------------------------------------------------------------------------------

def test_recompute_time_is_proportional_to_the_fraction():
    steps = {f: _time(_job("none" if f == 0 else "full", f or None)).time.step_seconds
             for f in (0, 0.5, 1)}
    assert steps[0] < steps[0.5] < steps[1]
    # the step is linear in the recomputed share up to the overlap terms: the half-checkpointed
    # step sits at the midpoint within 2 % of the recompute's cost
    extra = steps[1] - steps[0]
    assert steps[0.5] - steps[0] == pytest.approx(extra / 2, abs=0.02 * extra)


def test_matmul_recompute_scales_with_the_fraction():
    engine = new_engine((time_plugin, "time_roofline"))
    job_full, job_q = _job("full"), _job("full", 0.25)
    model = engine.resolve_model(job_full)

    ctx = engine.context(job_full)
    shape_full = time_estimator.step_shape(job_full, model, ctx.layout)
    shape_q = time_estimator.step_shape(job_q, model, ctx.layout)
    assert shape_full.recompute_share == 1.0 and shape_q.recompute_share == 0.25
    rates = time_estimator.device_rates(job_full, ctx.gpu, None, model,
                                        time_estimator.kernel_seq_len(shape_full))
    full = time_estimator.matmul_times(job_full, model, shape_full, rates)
    quarter = time_estimator.matmul_times(job_q, model, shape_q, rates)
    assert full.forward == pytest.approx(quarter.forward)
    assert quarter.recompute == pytest.approx(0.25 * full.recompute)


def test_hardware_flops_count_the_recomputed_share():
    full, half, none = (_time(_job(ck, f)).time for ck, f in
                        (("full", None), ("full", 0.5), ("none", None)))
    # HFU = hardware FLOPs / (step x GPUs x peak): hardware FLOPs = HFU x step, per unit peak
    hw = {name: t.hfu * t.step_seconds for name, t in (("full", full), ("half", half),
                                                       ("none", none))}
    assert full.flops_per_step == half.flops_per_step == none.flops_per_step
    assert hw["half"] - hw["none"] == pytest.approx((hw["full"] - hw["none"]) / 2, rel=1e-6)


# -- the planner's mirror ----------------------------------------------------------------------

def test_planner_recompute_share():
    import numpy as np
    cfg = {"ckpt_full": np.array([True, False, True])}
    assert list(recompute_share(cfg)) == [1.0, 0.0, 1.0]
    cfg["ckpt_share"] = 0.5
    assert list(recompute_share(cfg)) == [0.5, 0.0, 0.5]


# -- readers -----------------------------------------------------------------------------------

def _read(tmp_path, name, text):
    f = tmp_path / name
    f.write_text(text)
    m = load_configs([str(f)])
    return m.data.get("training", {}), m


_MEGATRON = ("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size "
             "11008 --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 "
             "--global-batch-size 8 --bf16 --pipeline-model-parallel-size 2 ")


def test_megatron_block_method_is_n_over_layers_per_stage(tmp_path):
    """megatron/core/recompute.py: block checkpoints the first N of the stage's layers."""
    t, _ = _read(tmp_path, "a.txt", _MEGATRON + "--recompute-granularity full "
                 "--recompute-method block --recompute-num-layers 4")
    assert t["activation_checkpointing"] == "full"
    assert t["checkpoint_fraction"] == pytest.approx(4 / 16)


def test_megatron_block_over_every_layer_and_uniform_are_full(tmp_path):
    t, _ = _read(tmp_path, "b.txt", _MEGATRON + "--recompute-granularity full "
                 "--recompute-method block --recompute-num-layers 16")
    assert t["activation_checkpointing"] == "full" and "checkpoint_fraction" not in t
    t, _ = _read(tmp_path, "c.txt", _MEGATRON + "--recompute-granularity full "
                 "--recompute-method uniform --recompute-num-layers 1")
    assert t["activation_checkpointing"] == "full" and "checkpoint_fraction" not in t


def test_megatron_method_without_full_granularity_is_ignored(tmp_path):
    t, m = _read(tmp_path, "d.txt", _MEGATRON + "--recompute-granularity selective "
                 "--recompute-num-layers 4")
    assert t["activation_checkpointing"] == "selective" and "checkpoint_fraction" not in t


_TITAN = '[model]\nname = "llama3"\nflavor = "8b"\n'


@pytest.mark.parametrize("section, ckpt, fraction", [
    ('[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "4"\n', "full", 0.25),
    ('[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "op"\n', "selective",
     None),
    ('[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "1"\n', "full", None),
    ('[activation_checkpoint]\nmode = "full"\n', "full", None),
    ('[activation_checkpoint]\nmode = "none"\n', "none", None),
    # job_config.py defaults: mode "selective", selective_ac_option "2" (every 2nd block)
    ("", "full", 0.5),
])
def test_torchtitan_layer_sac_is_one_over_n(tmp_path, section, ckpt, fraction):
    t, _ = _read(tmp_path, "t.toml", _TITAN + section)
    assert t["activation_checkpointing"] == ckpt
    assert t.get("checkpoint_fraction") == (None if fraction is None else pytest.approx(fraction))
