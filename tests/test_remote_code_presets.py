"""Remote-code presets (Qwen v1, ChatGLM2/3, Baichuan2) are built from their own modules
(``fmest.models.hf._qwen1``, ``_chatglm``, ``_baichuan``; docs/models.md "Remote-code models"):
the fused q/k/v projection is one linear, so the LoRA targets their fine-tuning scripts name are
accepted and a fused adapter is counted once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fmest.errors import InputError
from fmest.job import Training
from fmest.models.hf import spec_from_hf_config
from fmest.models.presets import RESTATED_KEY, load_preset, preset_data
from fmest.physics.counting import default_lora_targets, lora_adapter_params

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import measured  # noqa: E402

REMOTE = ["Qwen/Qwen-1_8B", "Qwen/Qwen-7B", "Qwen/Qwen-14B", "Qwen/Qwen-72B",
          "THUDM/chatglm3-6b", "baichuan-inc/Baichuan2-7B-Base", "baichuan-inc/Baichuan2-13B-Base"]


@pytest.mark.parametrize("name", REMOTE)
def test_built_from_upstream_with_the_restatements_count(name):
    """The fused modules hold exactly the parameters of the restated (transformers) config,
    and the count is within 1 % of the published size."""
    spec = load_preset(name)
    d = preset_data(name)
    assert spec.model_type == d["upstream_config"]["model_type"]
    assert not spec.warnings
    restated = spec_from_hf_config(d["config"], name=name, source="test")
    assert spec.param_counts().total == restated.param_counts().total
    assert abs(spec.param_counts().total / d["published_params"] - 1) < 0.01
    assert spec.hf_config[RESTATED_KEY] == d["config"]


def test_fused_projection_shapes():
    shapes = {(m.name, m.in_features): m.out_features for m in load_preset("Qwen/Qwen-7B").linears}
    assert shapes[("c_attn", 4096)] == 3 * 4096
    assert shapes[("c_proj", 4096)] == 4096 and shapes[("c_proj", 11008)] == 4096
    assert shapes[("w1", 4096)] == shapes[("w2", 4096)] == 22016 // 2
    glm = {m.name: m.out_features for m in load_preset("THUDM/chatglm3-6b").linears}
    assert glm["query_key_value"] == (32 + 2 * 2) * 128      # 2 key/value groups
    assert glm["dense_h_to_4h"] == 2 * 13696                 # fused SwiGLU halves
    bc = {m.name: m.out_features for m in load_preset("baichuan-inc/Baichuan2-7B-Base").linears}
    assert bc["W_pack"] == 3 * 4096


def test_qwen_finetune_targets_count_the_fused_adapter_once():
    """QwenLM/Qwen finetune.py's default c_attn,c_proj,w1,w2 at r 64 on Qwen-7B, by hand: one
    adapter on c_attn (4096 -> 12288), c_proj on attention (4096 -> 4096) and MLP (11008 ->
    4096), w1 and w2 (4096 -> 11008), 32 layers."""
    spec = load_preset("Qwen/Qwen-7B")
    tr = Training(technique="lora", lora_rank=64,
                  lora_target_modules=("c_attn", "c_proj", "w1", "w2"))
    r, layers = 64, 32
    per_layer = r * ((4096 + 12288) + (4096 + 4096) + (11008 + 4096) + 2 * (4096 + 11008))
    assert lora_adapter_params(spec, tr) == layers * per_layer


def test_peft_defaults_follow_the_model_type():
    assert default_lora_targets(load_preset("THUDM/chatglm3-6b")) == ("query_key_value",)
    with pytest.raises(InputError) as err:   # PEFT has no default for Qwen v1: name them
        default_lora_targets(load_preset("Qwen/Qwen-7B"))
    assert "c_attn" in str(err.value)
    assert "finetune.py" in str(err.value) and "c_attn,c_proj,w1,w2" in str(err.value)


def test_runner_builds_the_restatement_with_renamed_targets():
    pytest.importorskip("torch")
    from fmest_torch_runner.from_job import _instantiable

    cfg, targets = _instantiable(load_preset("Qwen/Qwen-7B"), ("c_attn", "c_proj", "w1"))
    assert cfg["model_type"] == "qwen2" and RESTATED_KEY not in cfg
    assert targets == ("q_proj", "k_proj", "v_proj", "o_proj", "down_proj", "up_proj")
    cfg, targets = _instantiable(load_preset("meta-llama/Llama-2-7b-hf"), ("q_proj",))
    assert cfg["model_type"] == "llama" and targets == ("q_proj",)


@pytest.mark.parametrize("model,expected", [
    ("Qwen/Qwen-7B-Chat", ("c_attn",)),
    ("THUDM/chatglm3-6b", ("query_key_value",)),
    ("baichuan-inc/Baichuan2-7B-Base", ("W_pack",)),
    ("01-ai/Yi-6B", ("q_proj", "k_proj", "v_proj")),
])
def test_ms_swift_default_targets(model, expected):
    """ms-swift 1.x's DEFAULT: the model's LoRATM entry (swift/llm/utils/model.py)."""
    assert measured._ms_swift_default_targets(model) == expected
