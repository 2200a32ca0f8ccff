"""Vision-language models: presets carry the tower and projector, image tokens follow the
published recipes, and the tower's memory depends on whether it is trained."""

from __future__ import annotations

import pytest

from fmest.models.presets import load_preset
from fmest_memory_theory.vision import (
    image_tokens,
    vision_activation_bytes,
    vision_forward_flops,
    vision_trainable_params,
)


@pytest.mark.parametrize("name, tokens", [
    ("llava-hf/llava-1.5-7b-hf", 576),          # (336/14)^2, CLS dropped (LLaVA-1.5 paper)
    ("google/paligemma2-3b-pt-224", 256),       # (224/14)^2
    ("google/paligemma2-3b-pt-448", 1024),      # (448/14)^2
    ("google/gemma-3-4b-it", 256),              # mm_tokens_per_image
    ("OpenGVLab/InternVL3-1B-hf", 256),         # (448/14)^2 x 0.5^2 pixel shuffle
    ("Qwen/Qwen2-VL-7B-Instruct", 256),         # 448 px default: (448/28)^2
])
def test_default_image_tokens(name, tokens):
    assert image_tokens(load_preset(name).vision).lm_tokens == tokens


def test_dynamic_resolution_and_tiling():
    qwen = load_preset("Qwen/Qwen2-VL-7B-Instruct").vision
    # Qwen2-VL: one token per 28x28 pixels (arXiv:2409.12191 section 2.1)
    assert image_tokens(qwen, 896).lm_tokens == 32 * 32
    llava_next = load_preset("llava-hf/llava-v1.6-mistral-7b-hf").vision
    assert image_tokens(llava_next, 336).tiles == 2   # one tile + base image
    assert image_tokens(llava_next, 672).tiles == 5   # 2x2 + base image
    mllama = load_preset("meta-llama/Llama-3.2-11B-Vision").vision
    big = image_tokens(mllama, 1120)
    assert big.tiles == 4 and big.cross_attention
    assert big.lm_tokens == 4 * (40 * 40 + 1)


def test_presets_count_vision_components():
    spec = load_preset("Qwen/Qwen2-VL-7B-Instruct")
    counts = spec.param_counts()
    assert counts.vision == spec.vision.tower_params + spec.vision.projector_params
    assert 0.6e9 < counts.vision < 0.7e9     # Qwen2-VL's 675M ViT (paper table 1)
    llava = load_preset("llava-hf/llava-1.5-7b-hf")
    assert llava.vision.tower_params == 303_507_456      # CLIP ViT-L/14-336
    assert llava.vision.projector_params == 20_979_712   # 2-layer MLP 1024 -> 4096 -> 4096


def test_frozen_tower_saves_less_and_trains_nothing():
    vision = load_preset("llava-hf/llava-1.5-7b-hf").vision
    tokens = image_tokens(vision)
    frozen = vision_activation_bytes(vision, tokens, images=4, act_bytes=2, trained=False)
    trained = vision_activation_bytes(vision, tokens, images=4, act_bytes=2, trained=True)
    # trained: 34 x patches x hidden x layers (Korthikanti eq. 1, no score term)
    assert trained == 34 * 4 * 577 * 1024 * 24
    assert frozen < trained / 10
    assert vision_trainable_params(vision, train_tower=False) == vision.projector_params
    assert vision_forward_flops(vision, tokens, images=2) == 2 * vision_forward_flops(
        vision, tokens, images=1)


def test_sequence_adds_image_tokens_except_cross_attention():
    from fmest_memory_theory.vision import vlm_sequence_len

    llava = load_preset("llava-hf/llava-1.5-7b-hf").vision
    assert vlm_sequence_len(1024, llava, images=2) == 1024 + 2 * 576
    mllama = load_preset("meta-llama/Llama-3.2-11B-Vision").vision
    assert vlm_sequence_len(1024, mllama, images=2) == 1024
    assert vlm_sequence_len(1024, None) == 1024


TINY_LLAVA = {
    "model_type": "llava", "image_token_index": 500, "projector_hidden_act": "gelu",
    "vision_feature_layer": -2, "vision_feature_select_strategy": "default",
    "text_config": {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688,
                    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
                    "vocab_size": 512, "max_position_embeddings": 4096},
    "vision_config": {"model_type": "clip_vision_model", "hidden_size": 128,
                      "intermediate_size": 512, "num_hidden_layers": 2,
                      "num_attention_heads": 4, "image_size": 112, "patch_size": 14}}


def test_traced_llava_agrees_with_analytic():
    """The traced runner builds the VLM through AutoModelForImageTextToText with pixel_values
    and image tokens, the tower frozen; allocated memory within 10 % of the analytic answer."""
    pytest.importorskip("torch")
    from fmest.convert import job_from_dict
    from fmest.estimates import allocated_bytes
    from fmest.testing import new_engine

    engine = new_engine(entrypoints=True)
    answers = {}
    for method in ("theory", "traced"):
        job = job_from_dict({"model": "tiny-llava", "model_config": TINY_LLAVA,
                             "hardware": {"gpu": "A100-SXM-80GB"},
                             "training": {"seq_len": 256, "micro_batch_size": 4},
                             "options": {"method": method}})
        report = engine.estimate(job, quantities=("memory",))
        assert report.memory.provenance.basis == ("analytic" if method == "theory" else "traced")
        answers[method] = allocated_bytes(report.memory)
    assert answers["traced"] == pytest.approx(answers["theory"], rel=0.10)
