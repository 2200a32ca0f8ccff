"""Preference objectives (fmest.objectives): what DPO/KTO/ORPO steps hold and run, derived by
hand from TRL's trainers (dpo_trainer.py / kto_trainer.py at the commit the module cites), and
the config readers that set them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fmest import objectives as O
from fmest.convert import job_from_dict
from fmest.engine import Engine
from fmest.errors import InputError

CORPUS = Path(__file__).parent / "data" / "configs" / "corpus"
L7 = "meta-llama/Llama-2-7b-hf"


def _memory(**training):
    job = job_from_dict({"model": L7, "hardware": {"gpu": "A100-80GB", "gpus_per_node": 1},
                         "training": training})
    return Engine().estimate(job).memory


def test_resolution_follows_trl():
    # TRL: a PEFT model without ref_model uses the adapter-disabled policy; full training a copy
    assert O.resolved_reference("dpo", "auto", "lora") == "adapter"
    assert O.resolved_reference("dpo", "auto", "qlora") == "adapter"
    assert O.resolved_reference("dpo", "auto", "full") == "copy"
    assert O.resolved_reference("kto", "precomputed", "full") == "precomputed"
    assert O.resolved_reference("orpo", "auto", "full") == "none"
    assert O.resolved_reference("lm", "auto", "full") == "none"
    assert O.sequences_per_sample("dpo") == 2 and O.sequences_per_sample("kto") == 1
    # DPO: one reference pass over the pair; KTO: the policy's KL pass, then the reference over
    # the completions and the KL completions; precomputed: only KTO's KL pass remains
    assert O.forward_only_calls("dpo", "copy") == (2,)
    assert O.forward_only_calls("kto", "adapter") == (1, 1, 1)
    assert O.forward_only_calls("kto", "precomputed") == (1,)
    assert O.forward_only_calls("dpo", "precomputed") == ()
    assert O.forward_only_calls("simpo", "none") == ()


@pytest.mark.parametrize("training, words", [
    ({"reference_model": "copy"}, "objective with a reference model"),
    ({"objective": "orpo", "reference_model": "adapter"}, "objective with a reference model"),
    ({"objective": "dpo", "reference_model": "adapter"}, "needs technique lora or qlora"),
])
def test_impossible_pairs_are_refused_by_field(training, words):
    with pytest.raises(InputError) as err:
        job_from_dict({"model": L7, "training": training})
    assert err.value.field == "training.reference_model"
    assert words in str(err.value)


def test_unknown_objective_names_the_accepted_ones():
    with pytest.raises(InputError) as err:
        job_from_dict({"model": L7, "training": {"objective": "ppo"}})
    assert err.value.field == "training.objective"
    assert "dpo" in str(err.value)


def test_dpo_copy_holds_the_reference_weights_and_twice_the_activations():
    lm = _memory(seq_len=1024, activation_checkpointing="full")
    dpo = _memory(seq_len=1024, activation_checkpointing="full", objective="dpo")
    # the frozen copy: the policy's weights again, in their storage dtype
    assert dpo.components["reference_weights"] == dpo.components["weights"]
    # chosen + rejected: twice the tokens through the policy (linear in tokens under full AC)
    lm2 = _memory(seq_len=1024, activation_checkpointing="full", micro_batch_size=2)
    assert dpo.total_bytes > lm.total_bytes
    for name in ("activations", "logits_and_loss"):
        if lm2.components.get(name):
            assert dpo.components[name] == pytest.approx(lm2.components[name], rel=1e-9)


def test_reference_forward_is_the_pair_logits_plus_hidden_states():
    # forward phase: the reference pass's logits (2 x seq x vocab, bf16) and hidden in/out
    dpo = _memory(seq_len=1024, objective="dpo", technique="lora")
    est = dpo
    phases = est.phase_peaks_bytes
    assert "forward" in phases
    lm = _memory(seq_len=1024, objective="dpo", technique="lora", reference_model="precomputed")
    vocab, hidden = 32000, 4096
    extra = 2 * 1024 * (vocab + 2 * hidden) * 2
    # the precomputed variant has no reference pass: the forward phases differ by that term
    # (plus the allocator reserve on it)
    diff = dpo.phase_peaks_bytes["forward"] - lm.phase_peaks_bytes["forward"]
    assert extra <= diff <= extra * 1.25
    assert "reference_weights" not in dpo.components    # the adapter-disabled policy


def test_zero3_shards_the_reference_copy_like_the_policy():
    job = job_from_dict({"model": L7, "hardware": {"gpu": "A100-80GB", "gpus_per_node": 8},
                         "parallelism": {"zero_stage": 3},
                         "training": {"objective": "dpo", "activation_checkpointing": "full"}})
    mem = Engine().estimate(job).memory
    assert mem.components["reference_weights"] == mem.components["weights"]
    assert mem.components["weights"] < 6.8e9 * 2 / 8 * 1.01


def test_pairwise_tokens_and_time():
    eng = Engine()
    base = {"model": L7, "hardware": {"gpu": "A100-80GB", "gpus_per_node": 1},
            "training": {"seq_len": 1024, "technique": "lora"}}
    lm = eng.estimate(job_from_dict(base))
    simpo = eng.estimate(job_from_dict({**base, "training": {**base["training"],
                                                             "objective": "simpo"}}))
    # a sample is a pair: twice the tokens per step, about twice the step (no reference pass)
    ratio = simpo.time.step_seconds / lm.time.step_seconds
    assert 1.6 < ratio < 2.2
    tokens = simpo.tokens.tokens_per_second * simpo.time.step_seconds
    assert tokens == pytest.approx(2 * lm.tokens.tokens_per_second * lm.time.step_seconds)


def test_traced_method_declines_preference_objectives():
    from fmest_torch_runner.from_job import _check_runnable
    from fmest_torch_runner.runner import Unsupported

    job = job_from_dict({"model": "Qwen/Qwen2.5-0.5B", "training": {"objective": "dpo"}})
    spec = Engine().resolve_model(job)
    with pytest.raises(Unsupported, match="objective 'dpo'"):
        _check_runnable(job, spec, "fake")


def test_cli_flags_and_summary_line(capsys):
    from fmest.cli import main

    rc = main(["estimate", "--model", L7, "--gpu", "A100-80GB", "--training-objective", "kto",
               "--technique", "lora"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "step     kto: 1 sequence(s) per sample with gradients, 3 more per sample" in out
    assert "the policy with its adapters disabled" in out
    rc = main(["estimate", "--model", L7, "--gpu", "A100-80GB", "--training-objective", "dpo",
               "--reference-model", "precomputed", "--format", "json"])
    got = json.loads(capsys.readouterr().out)
    assert got["job"]["training"]["reference_model"] == "precomputed"
    assert "reference_weights" not in got["memory"]["components"]


@pytest.mark.parametrize("path, model, objective, reference", [
    ("llama-factory/examples/train_lora/qwen3_lora_dpo.yaml", "Qwen/Qwen3-4B", "dpo",
     "adapter"),
    ("llama-factory/examples/train_lora/qwen3_lora_kto.yaml", "Qwen/Qwen3-4B", "kto",
     "adapter"),
    ("axolotl/examples/qwen2/dpo.yaml", L7, "dpo", "copy"),
    ("axolotl/examples/llama-3/qlora-1b-kto.yaml", L7, "kto", "adapter"),
    ("axolotl/examples/mistral/orpo/mistral-qlora-orpo.yml", L7, "orpo", "auto"),
    ("alignment-handbook/recipes/zephyr-141b-A35b/orpo/config_full.yaml", None, "orpo", "auto"),
    ("alignment-handbook/recipes/pref_align_scan/dpo/config_openhermes.yaml", None, "dpo",
     "copy"),
    ("openrlhf/examples/scripts/train_dpo_llama.sh", L7, "dpo", "copy"),
    ("ms-swift/examples/megatron/multimodal/dense/dpo.sh", None, "dpo", "copy"),
    ("torchtune/recipes/configs/llama3_1/8B_lora_dpo.yaml", None, "dpo", "adapter"),
])
def test_readers_set_the_objective(path, model, objective, reference):
    from fmest.configs import load_configs

    training = load_configs([str(CORPUS / path)]).data.get("training", {})
    assert training.get("objective") == objective
    assert training.get("reference_model", "auto") == reference
