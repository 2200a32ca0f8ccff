"""Presets of the families people fine-tune now (issue 23): each one's parameter count equals
what transformers instantiates for its config on the meta device, and lies within 3% of the
published figure; the DeepSeek-R1 distills resolve to their bases' shape."""

from __future__ import annotations

import copy

import pytest

from fmest.models.aliases import match_alias
from fmest.models.local import resolve_model
from fmest.models.presets import find_preset, load_preset, preset_data

NEW = ["Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-4B", "Qwen/Qwen3-14B", "Qwen/Qwen3-32B",
       "openai/gpt-oss-20b", "microsoft/phi-4", "microsoft/Phi-4-mini-instruct",
       "HuggingFaceTB/SmolLM2-135M", "HuggingFaceTB/SmolLM2-360M", "HuggingFaceTB/SmolLM2-1.7B",
       "mistralai/Mistral-Small-24B-Base-2501", "mistralai/Mistral-Nemo-Base-2407",
       # existing Qwen3 MoE presets, checked again against NeMo's Qwen3MoEConfig30B_A3B/235B_A22B
       "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-235B-A22B"]


def _transformers_count(config: dict) -> int:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    cfg = copy.deepcopy(config)
    mt = cfg.pop("model_type")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if mt not in CONFIG_MAPPING_NAMES:
        pytest.skip(f"transformers {transformers.__version__} has no model_type {mt!r}")
    conf = transformers.AutoConfig.for_model(mt, **cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(conf)
    return sum(p.numel() for p in model.parameters())  # tied tensors once


@pytest.mark.parametrize("name", NEW)
def test_count_equals_transformers(name):
    spec = load_preset(name)
    assert not spec.warnings, spec.warnings
    assert spec.param_counts().total == _transformers_count(preset_data(name)["config"])


@pytest.mark.parametrize("name", NEW)
def test_count_within_3_percent_of_published(name):
    d = preset_data(name)
    total = load_preset(name).param_counts().total
    assert abs(total - d["published_params"]) / d["published_params"] < 0.03, \
        (total, d["published_params"])


def test_known_exact_counts():
    # exact figures transformers gives (meta device, transformers 5.24); pinned so a changed
    # preset value shows here, not only as a drift against the rounded published sizes
    assert load_preset("qwen3-0.6b").param_counts().total == 596_049_920
    assert load_preset("qwen3-32b").param_counts().total == 32_762_123_264
    assert load_preset("phi-4").param_counts().total == 14_659_507_200
    assert load_preset("smollm2-1.7b").param_counts().total == 1_711_376_384
    assert load_preset("mistral-nemo").param_counts().total == 12_247_782_400


def test_moe_active_counts():
    # gpt-oss-20b: OpenAI's model card gives 3.6B active, which excludes the input embedding
    # (201088 x 2880); fmest's active count includes it
    spec = load_preset("gpt-oss-20b")
    c = spec.param_counts()
    emb = 201088 * 2880
    assert abs((c.active - emb) - 3.6e9) / 3.6e9 < 0.03
    assert spec.num_experts == 32 and spec.experts_per_token == 4 and spec.num_layers == 24
    q = load_preset("Qwen3-30B-A3B").param_counts()
    assert abs(q.active - 3.3e9) / 3.3e9 < 0.03
    q = load_preset("Qwen3-235B-A22B").param_counts()
    assert abs(q.active - 22e9) / 22e9 < 0.03


def test_shape_details():
    nemo = load_preset("Mistral-Nemo-Base-2407")
    assert nemo.head_dim == 128 and nemo.num_attention_heads == 32  # not 5120 / 32 = 160
    mini = load_preset("phi-4-mini")
    assert mini.tie_word_embeddings and mini.vocab_size == 200064
    assert load_preset("qwen3-4b").tie_word_embeddings
    assert not load_preset("qwen3-14b").tie_word_embeddings


@pytest.mark.parametrize("alias,preset", [
    ("Qwen/Qwen3-4B-Base", "Qwen/Qwen3-4B"),
    ("mistralai/Mistral-Small-24B-Instruct-2501", "mistralai/Mistral-Small-24B-Base-2501"),
    ("mistralai/Mistral-Nemo-Instruct-2407", "mistralai/Mistral-Nemo-Base-2407"),
    ("HuggingFaceTB/SmolLM2-360M-Instruct", "HuggingFaceTB/SmolLM2-360M"),
    ("google/gemma-3-12b-it", "google/gemma-3-12b-pt"),
    ("google/gemma-3-27b-it", "google/gemma-3-27b-pt"),
    ("google/gemma-3-1b-it", "google/gemma-3-1b-pt"),
])
def test_preset_aliases(alias, preset):
    assert find_preset(alias) == preset


@pytest.mark.parametrize("distill,base", [
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "Qwen/Qwen2.5-7B"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", "Qwen/Qwen2.5-14B"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "Qwen/Qwen2.5-32B"),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "meta-llama/Llama-3.1-8B"),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", "meta-llama/Llama-3.3-70B-Instruct"),
])
def test_r1_distills_map_to_their_base(distill, base):
    m = match_alias(distill, find_preset)
    assert m is not None and m.preset == base
    spec = resolve_model(distill, hub=False)
    assert spec.param_counts().total == load_preset(base).param_counts().total
