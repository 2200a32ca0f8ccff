"""PEFT ``modules_to_save`` beside LoRA (``training.lora_modules_to_save``): a trainable copy of
the embedding and/or the output head, priced in memory (copy, gradient, optimizer states and
temporaries in the module's dtype), time (the head's weight gradient, the embedding's dense
gradient, the optimizer over the copies) and the trainable count; read from axolotl, TRL and
ms-swift configs, from the evidence rows that state it, and from ``--lora-modules-to-save``."""

from __future__ import annotations

import pytest

import fmest_memory_theory.plugin as memory_plugin
import fmest_time_roofline.plugin as time_plugin
from fmest.configs import load_configs
from fmest.convert import job_from_dict
from fmest.errors import InputError
from fmest.physics.counting import modules_to_save_params, trainable_params
from fmest.testing import new_engine

PLUGINS = ((memory_plugin, "memory_theory"), (time_plugin, "time_roofline"))
GIB = 2**30


def _job(saved=(), technique="lora", **training):
    return job_from_dict({"model": "qwen2.5-0.5b",
                          "training": {"technique": technique, "seq_len": 512,
                                       "lora_modules_to_save": list(saved), **training},
                          "hardware": {"gpu": "A100-SXM-80GB"}})


def test_names_are_read_as_embedding_and_head_and_others_refused():
    assert _job(["embed_tokens", "lm_head", "wte"]).training.lora_modules_to_save == \
        ("embedding", "head")
    assert _job(["model.embed_tokens"]).training.lora_modules_to_save == ("embedding",)
    with pytest.raises(InputError) as err:
        _job(["norm"])
    assert "training.lora_modules_to_save" in str(err.value) and "lm_head" in str(err.value)


def test_trainable_count_adds_a_vocab_by_hidden_copy_per_module():
    eng = new_engine(*PLUGINS)
    model = eng.context(_job()).model
    plain, both = _job(), _job(["embedding", "head"])
    matrix = model.vocab_size * model.hidden_size
    assert modules_to_save_params(model, both.training) == 2 * matrix
    assert trainable_params(model, both.training) == \
        trainable_params(model, plain.training) + 2 * matrix
    # full fine-tuning already trains them: nothing added, and a warning names the field
    full = _job(["head"], technique="full")
    assert modules_to_save_params(model, full.training) == 0
    warnings = eng.estimate(full).warnings
    assert any(w.startswith("training.lora_modules_to_save: ignored") for w in warnings)


def test_memory_prices_copy_gradient_and_states_in_the_module_dtype():
    """bf16 LoRA under autocast: each copy keeps bf16 weights and gradients, and torch's AdamW
    gives its two states the parameter's dtype (2 + 2 + 2 x 2 bytes a parameter), the update's
    temporaries too; the head copy exists although qwen2.5-0.5b ties it to the embedding."""
    eng = new_engine(*PLUGINS)
    model = eng.context(_job()).model
    matrix = model.vocab_size * model.hidden_size
    plain_m = eng.estimate(_job(optimizer="adamw")).memory
    both_m = eng.estimate(_job(["embedding", "head"], optimizer="adamw")).memory
    plain, both = plain_m.components, both_m.components
    assert both["weights"] - plain["weights"] == pytest.approx(2 * matrix * 2, rel=1e-6)
    assert both["optimizer_states"] - plain["optimizer_states"] == \
        pytest.approx(2 * matrix * 2 * 2, rel=1e-6)
    # at the step: copies, their gradients and states (2 + 2 + 4) and the update's temporaries
    step = both_m.metrics["allocated_bytes_optimizer"] - plain_m.metrics["allocated_bytes_optimizer"]
    assert step >= 2 * matrix * 8
    one = eng.estimate(_job(["head"], optimizer="adamw")).memory.components
    assert one["weights"] - plain["weights"] == pytest.approx(matrix * 2, rel=1e-6)


def test_time_adds_the_head_weight_gradient_and_the_optimizer_over_the_copies():
    eng = new_engine(*PLUGINS)
    plain = eng.estimate(_job()).time.breakdown
    head = eng.estimate(_job(["head"])).time.breakdown
    emb = eng.estimate(_job(["embedding"])).time.breakdown
    assert head["compute"] > plain["compute"]            # the head's weight-gradient GEMM
    assert emb["compute"] == pytest.approx(plain["compute"])
    assert emb["memory_bound"] > plain["memory_bound"]   # the embedding's dense gradient
    assert head["optimizer_step"] > 10 * plain["optimizer_step"]


def test_cli_flag_and_config_readers(tmp_path):
    ax = tmp_path / "ax.yaml"
    ax.write_text("base_model: Qwen/Qwen2.5-0.5B\nadapter: lora\nlora_r: 8\nsequence_len: 512\n"
                  "micro_batch_size: 1\nlora_modules_to_save: [embed_tokens, lm_head, norm]\n")
    m = load_configs([str(ax)], force_format="axolotl")
    assert m.data["training"]["lora_modules_to_save"] == ["embed_tokens", "lm_head"]
    assert any("lora_modules_to_save" in w and "norm" in w for w in m.not_modelled)
    trl = tmp_path / "trl.yaml"
    trl.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nuse_peft: true\nlora_r: 8\n"
                   "lora_modules_to_save: [lm_head]\nmax_length: 512\n")
    m = load_configs([str(trl)], force_format="trl")
    assert m.data["training"]["lora_modules_to_save"] == ["lm_head"]


def test_ms_swift_script(tmp_path):
    sh = tmp_path / "train.sh"
    sh.write_text("swift sft \\\n    --model Qwen/Qwen2.5-0.5B \\\n    --train_type lora \\\n"
                  "    --modules_to_save embed_tokens lm_head \\\n    --max_length 512\n")
    m = load_configs([str(sh)])
    assert m.data["training"]["lora_modules_to_save"] == ["embed_tokens", "lm_head"]
    assert not any("modules_to_save" in w for w in m.not_modelled)
