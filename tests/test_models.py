"""Model presets, HF config -> ModelSpec conversion and exact parameter counts.

The oracle for parameter counts is transformers itself: every preset is instantiated at FULL
size on the meta device (no memory, ~0.1 s each; the whole set takes ~12 s on one core) and
``sum(p.numel() for p in model.parameters())`` (tied weights counted once) must equal the
analytic ``param_counts().total`` exactly. No layer shrinking is needed.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fmest.errors import InputError, UnknownNameError
from fmest.models.hf import spec_from_hf_config
from fmest.models.local import resolve_model, spec_from_hub, spec_from_local
from fmest.models.presets import list_presets, load_preset, preset_data

CORE = Path(__file__).resolve().parents[1] / "core"
PRESETS = list_presets()
PRESET_NAMES = [p.name for p in PRESETS]


# --------------------------------------------------------------------------- helpers

def _hf_param_count(config: dict) -> int:
    """Parameters transformers instantiates for ``config`` (meta device, tied weights once)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    cfg = copy.deepcopy(config)
    mt = cfg.pop("model_type")
    conf = transformers.AutoConfig.for_model(mt, **cfg)
    auto = ("AutoModelForSeq2SeqLM" if conf.is_encoder_decoder
            else "AutoModelForImageTextToText" if "vision_config" in config
            else "AutoModelForCausalLM")
    with torch.device("meta"):
        model = getattr(transformers, auto).from_config(conf)
    total = sum(p.numel() for p in model.parameters())  # parameters() dedups tied tensors
    if mt in ("t5", "mt5") and config.get("tie_word_embeddings") is False:
        # transformers 5's T5Config/MT5Config force tie_word_embeddings=True ("we tie weights
        # always", configuration_t5.py); the released v1.1/mT5/Flan/T0 checkpoints store a
        # separate lm_head, which fmest counts (the published sizes include it).
        total += cfg["d_model"] * cfg["vocab_size"]
    return total


# --------------------------------------------------------------------------- presets

def test_enough_presets_with_provenance():
    assert len(PRESETS) >= 45
    for p in PRESETS:
        d = preset_data(p.name)
        assert d["source"].startswith("https://huggingface.co/"), p.name
        assert d["retrieved"], p.name
        assert "model_type" in d["config"], p.name
        assert p.model_type, p.name


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_preset_param_count_matches_transformers(name):
    spec = load_preset(name)
    assert not any("unknown architecture" in w for w in spec.warnings)
    ref = _hf_param_count(preset_data(name)["config"])
    assert spec.param_counts().total == ref


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_preset_close_to_published_count(name):
    """Cross-check (not the oracle): within 5% of the model card's figure, which is often
    rounded ('7B'); gemma-3 4b/12b/27b presets count the text model only."""
    info = next(p for p in PRESETS if p.name == name)
    if info.published_params is None:
        pytest.skip("no published figure")
    total = load_preset(name).param_counts().total
    tol = 0.05 if "vision" not in info.notes else 0.08
    assert abs(total - info.published_params) / info.published_params < tol, \
        (total, info.published_params)


def test_known_exact_counts():
    # widely reproduced exact figures (peft printouts / model cards)
    assert load_preset("llama-2-7b").param_counts().total == 6_738_415_616
    assert load_preset("bloom").param_counts().total == 176_247_271_424
    assert load_preset("bloom-7b1").param_counts().total == 7_069_016_064
    assert load_preset("gpt2").param_counts().total == 124_439_808
    assert load_preset("mixtral-8x7b").param_counts().total == 46_702_792_704


def test_moe_active_params():
    mix = load_preset("mistralai/Mixtral-8x7B-v0.1").param_counts()
    assert abs(mix.active - 12.9e9) / 12.9e9 < 0.01  # published 12.9B
    ds = load_preset("deepseek-v3")
    c = ds.param_counts()
    assert abs(c.total - 671e9) / 671e9 < 0.001  # HF model has no MTP layers
    assert abs(c.active - 37e9) / 37e9 < 0.03  # published 37B activated
    assert ds.num_moe_layers == 58 and ds.num_experts == 256 and ds.experts_per_token == 8
    assert ds.q_lora_rank == 1536 and ds.kv_lora_rank == 512 and ds.qk_head_dim == 192
    assert any("multi-token-prediction" in w for w in ds.warnings)
    lite = load_preset("DeepSeek-V2-Lite")
    assert lite.num_moe_layers == 26
    q = load_preset("Qwen2-57B-A14B").param_counts()
    assert abs(q.active - 14e9) / 14e9 < 0.03


def test_lookup_variants_and_cache():
    a = load_preset("meta-llama/Llama-2-7b-hf")
    assert load_preset("LLAMA-2-7B-HF") is a
    assert load_preset("llama-2-7b") is a
    assert load_preset("Llama-2-7b-chat-hf") is a
    assert load_preset("someone/Llama-2-7b-hf") is a  # part after the slash
    assert a.hidden_size == 4096 and a.num_layers == 32 and a.num_kv_heads == 32
    assert a.source.startswith("preset ")


def test_unknown_preset_lists_near_names():
    with pytest.raises(UnknownNameError) as ei:
        load_preset("llama-2-7")
    e = ei.value
    assert e.field == "model" and e.value == "llama-2-7"
    assert any("llama-2-7b" in a.lower() for a in e.accepted)
    assert "llama-2-7b" in str(e).lower()


def test_presets_import_without_torch():
    code = (
        "import sys, time\n"
        "t = time.perf_counter()\n"
        "from fmest.models.presets import list_presets, load_preset\n"
        "for p in list_presets(): load_preset(p.name).param_counts()\n"
        "dt = time.perf_counter() - t\n"
        "bad = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "assert not bad, bad\n"
        "print(dt)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(CORE))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.strip()) < 2.0  # all presets parsed and counted


# --------------------------------------------------------------------------- LoRA targets

def _lora_params(spec, targets, r):
    return sum(r * (m.in_features + m.out_features) * m.layers * m.copies
               for m in spec.lora_targets(tuple(targets)))


def test_lora_llama2_7b_q_v():
    spec = load_preset("llama-2-7b")
    # peft prints "trainable params: 4,194,304 || all params: 6,742,609,920" for r=8 on q,v
    assert _lora_params(spec, ["q_proj", "v_proj"], 8) == 4_194_304
    assert spec.param_counts().total + 4_194_304 == 6_742_609_920
    # r=16: r*(in+out)*layers per module = 16*(4096+4096)*32*2
    assert _lora_params(spec, ["q_proj", "v_proj"], 16) == 8_388_608
    names = {m.name for m in spec.lora_targets(("all-linear",))}
    assert names == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def test_linear_names_per_family():
    assert "query_key_value" in load_preset("falcon-7b").linear_names()
    assert {"c_attn", "c_fc", "c_proj"} <= set(load_preset("gpt2").linear_names())
    assert {"qkv_proj", "gate_up_proj"} <= set(load_preset("phi-3-mini").linear_names())
    assert {"w1", "w2", "w3", "gate"} <= set(load_preset("mixtral-8x7b").linear_names())
    assert {"Wqkv", "up_proj"} <= set(load_preset("mpt-7b").linear_names())
    assert {"q_a_proj", "kv_b_proj", "kv_a_proj_with_mqa"} <= set(
        load_preset("deepseek-v3").linear_names())


# --------------------------------------------------------------------------- converter

def test_shape_fields():
    g2 = load_preset("gemma-2-9b")
    assert g2.eager_only and g2.sliding_window == 4096 and g2.tie_word_embeddings
    assert g2.head_dim == 256
    assert not load_preset("gemma-7b").eager_only
    m = load_preset("mistral-7b")
    assert m.sliding_window == 4096 and m.num_kv_heads == 8
    assert load_preset("qwen2.5-7b").sliding_window is None  # use_sliding_window false
    assert load_preset("gpt2").dropout == pytest.approx(0.1)
    assert load_preset("opt-1.3b").dropout == pytest.approx(0.1)
    assert load_preset("granite-3.0-8b").dropout == pytest.approx(0.1)
    assert load_preset("llama-3.1-8b").dropout == 0.0
    assert load_preset("falcon-7b").num_kv_heads == 1
    assert load_preset("falcon-40b").num_kv_heads == 8
    assert not load_preset("opt-13b").gated_mlp and load_preset("llama-3-8b").gated_mlp
    mx = load_preset("mixtral-8x7b")
    assert mx.is_moe and mx.num_experts == 8 and mx.experts_per_token == 2
    assert mx.num_moe_layers == 32 and mx.moe_intermediate_size == 14336


# variants no preset exercises: compared against transformers too
VARIANTS = {
    "llama_biases": {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512,
                     "vocab_size": 1000, "attention_bias": True, "mlp_bias": True,
                     "tie_word_embeddings": True},
    "qwen2_moe_sparse_step": {"model_type": "qwen2_moe", "hidden_size": 128,
                              "num_hidden_layers": 6, "num_attention_heads": 4,
                              "num_key_value_heads": 2, "intermediate_size": 384,
                              "moe_intermediate_size": 64, "shared_expert_intermediate_size": 96,
                              "num_experts": 6, "num_experts_per_tok": 2, "vocab_size": 500,
                              "decoder_sparse_step": 2, "mlp_only_layers": [3]},
    "deepseek_v3_q_lora_none_bias": {"model_type": "deepseek_v3", "hidden_size": 128,
                                     "num_hidden_layers": 4, "num_attention_heads": 4,
                                     "num_key_value_heads": 4, "intermediate_size": 256,
                                     "moe_intermediate_size": 32, "n_routed_experts": 8,
                                     "n_shared_experts": 2, "num_experts_per_tok": 2,
                                     "first_k_dense_replace": 1, "q_lora_rank": None,
                                     "kv_lora_rank": 32, "qk_nope_head_dim": 16,
                                     "qk_rope_head_dim": 8, "v_head_dim": 16,
                                     "attention_bias": True, "vocab_size": 300,
                                     "n_group": 1, "topk_group": 1},
    "falcon_sequential": {"model_type": "falcon", "hidden_size": 128, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "multi_query": False,
                          "parallel_attn": False, "bias": True, "vocab_size": 300},
    "falcon_refinedweb_keys": {"model_type": "RefinedWeb", "hidden_size": 256, "n_layer": 2,
                               "n_head": 8, "n_head_kv": 2, "new_decoder_architecture": True,
                               "parallel_attn": True, "bias": False, "vocab_size": 300},
    "opt_350m_style": {"model_type": "opt", "hidden_size": 128, "num_hidden_layers": 2,
                       "num_attention_heads": 4, "ffn_dim": 256, "word_embed_proj_dim": 64,
                       "do_layer_norm_before": False, "vocab_size": 300,
                       "max_position_embeddings": 64},
    "gpt2_n_inner_untied": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
                            "n_inner": 100, "vocab_size": 300, "n_positions": 32,
                            "tie_word_embeddings": False},
    "granitemoe_untied": {"model_type": "granitemoe", "hidden_size": 128,
                          "num_hidden_layers": 2, "num_attention_heads": 4,
                          "num_key_value_heads": 2, "intermediate_size": 64,
                          "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 300,
                          "tie_word_embeddings": False, "attention_bias": True},
    "gpt_bigcode_mha_untied": {"model_type": "gpt_bigcode", "n_embd": 64, "n_layer": 2,
                               "n_head": 4, "vocab_size": 300, "n_positions": 32,
                               "multi_query": False, "tie_word_embeddings": False},
    "qwen3_moe_sparse_step_bias": {"model_type": "qwen3_moe", "hidden_size": 64,
                                   "num_hidden_layers": 4, "num_attention_heads": 4,
                                   "num_key_value_heads": 2, "head_dim": 32,
                                   "intermediate_size": 96, "moe_intermediate_size": 24,
                                   "num_experts": 4, "num_experts_per_tok": 2, "vocab_size": 300,
                                   "decoder_sparse_step": 2, "mlp_only_layers": [3],
                                   "attention_bias": True},
    "phi_qk_layernorm_gqa": {"model_type": "phi", "hidden_size": 64, "num_hidden_layers": 2,
                             "num_attention_heads": 4, "num_key_value_heads": 2,
                             "intermediate_size": 100, "vocab_size": 300, "qk_layernorm": True},
    "gpt_neox_no_bias_sequential": {"model_type": "gpt_neox", "hidden_size": 64,
                                    "num_hidden_layers": 2, "num_attention_heads": 4,
                                    "intermediate_size": 100, "vocab_size": 300,
                                    "attention_bias": False, "use_parallel_residual": False},
    "stablelm_3b_4e1t_style": {"model_type": "stablelm", "hidden_size": 64,
                               "num_hidden_layers": 2, "num_attention_heads": 4,
                               "num_key_value_heads": 4, "intermediate_size": 100,
                               "vocab_size": 300},
    "stablelm_2_style": {"model_type": "stablelm", "hidden_size": 64, "num_hidden_layers": 2,
                         "num_attention_heads": 4, "num_key_value_heads": 2,
                         "intermediate_size": 100, "vocab_size": 300, "use_qkv_bias": True,
                         "qk_layernorm": True, "use_parallel_residual": True},
    "gpt_oss_odd_layers": {"model_type": "gpt_oss", "hidden_size": 64, "num_hidden_layers": 3,
                           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                           "intermediate_size": 48, "num_local_experts": 4,
                           "num_experts_per_tok": 2, "vocab_size": 300},
}


@pytest.mark.parametrize("key", sorted(VARIANTS))
def test_variant_param_count_matches_transformers(key):
    cfg = VARIANTS[key]
    ref_cfg = dict(cfg)
    if ref_cfg["model_type"] == "RefinedWeb":
        ref_cfg = {"model_type": "falcon", "hidden_size": 256, "num_hidden_layers": 2,
                   "num_attention_heads": 8, "num_kv_heads": 2, "new_decoder_architecture": True,
                   "parallel_attn": True, "bias": False, "vocab_size": 300}
    spec = spec_from_hf_config(cfg, name=key, source="test")
    assert spec.param_counts().total == _hf_param_count(ref_cfg)


def test_shape_fields_of_gpt_bigcode_qwen3_moe_phi_neox_gpt_oss():
    sc = load_preset("santacoder")
    assert sc.num_kv_heads == 1 and not sc.gated_mlp and sc.tie_word_embeddings
    assert {"c_attn", "c_fc", "c_proj"} <= set(sc.linear_names())
    q = load_preset("qwen3-30b-a3b")
    assert q.is_moe and q.num_moe_layers == 48 and q.num_experts == 128 and q.head_dim == 128
    assert abs(q.param_counts().active - 3.3e9) / 3.3e9 < 0.03  # model card: 3.3B activated
    assert {"q_proj", "dense", "fc1", "fc2"} <= set(load_preset("phi-1_5").linear_names())
    assert {"query_key_value", "dense_h_to_4h"} <= set(
        load_preset("stablelm-base-alpha-3b").linear_names())
    oss = load_preset("gpt-oss-120b")
    assert oss.sliding_window == 128 and oss.sliding_window_layers == 18
    assert oss.num_experts == 128 and oss.experts_per_token == 4
    # model card: 5.1B active without the embedding table (fmest counts it as active)
    counts = oss.param_counts()
    assert abs(counts.active - counts.embedding - 5.13e9) / 5.13e9 < 0.01


def test_exact_published_counts_gpt_neox_family():
    # GPT-NeoX-20B paper Table 1 and the Pythia model card print exact totals
    assert load_preset("gpt-neox-20b").param_counts().total == 20_554_567_680
    assert load_preset("pythia-6.9b").param_counts().total == 6_857_302_016
    assert load_preset("pythia-12b").param_counts().total == 11_846_072_320

def test_gemma3_multimodal_uses_text_config():
    text = preset_data("gemma-3-4b")["config"]
    mm = {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
          "text_config": {k: v for k, v in text.items() if k != "model_type"},
          "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152}}
    spec = spec_from_hf_config(mm, name="g3", source="test")
    assert spec.model_type == "gemma3_text"
    # an incomplete vision_config: the language model is counted, and the warning says so
    assert spec.param_counts().total == load_preset("gemma-3-4b").param_counts().total
    assert spec.vision is None
    assert any("text_config" in w and "vision_config" in w for w in spec.warnings)
    # the complete multimodal preset adds the SigLIP tower and projector to the same text model
    full = load_preset("google/gemma-3-4b-it")
    counts = full.param_counts()
    assert counts.total - counts.vision == spec.param_counts().total
    assert full.vision.tokens_per_image == 256 and counts.vision > 0.4e9


def test_unknown_architecture_falls_back_with_warning():
    cfg = {"model_type": "brand_new_lm", "d_model": 512, "n_layer": 4, "n_head": 8,
           "vocab_size": 1000}
    spec = spec_from_hf_config(cfg, name="x", source="test")
    assert spec.hidden_size == 512 and spec.num_layers == 4 and spec.intermediate_size == 2048
    assert any("unknown architecture 'brand_new_lm'" in w for w in spec.warnings)
    assert any("approximated as a Llama-style decoder" in w for w in spec.warnings)
    assert spec.param_counts().total > 0


def test_missing_required_key_names_field():
    cfg = dict(preset_data("llama-2-7b")["config"])
    del cfg["hidden_size"]
    with pytest.raises(InputError) as ei:
        spec_from_hf_config(cfg, name="x", source="test")
    assert ei.value.field == "model.config.hidden_size"
    with pytest.raises(InputError) as ei:
        spec_from_hf_config({"model_type": "mixtral", "hidden_size": 64,
                             "num_hidden_layers": 2, "num_attention_heads": 4,
                             "intermediate_size": 128, "vocab_size": 100,
                             "num_experts_per_tok": 2}, name="x", source="t")
    assert ei.value.field == "model.config.num_local_experts"


# --------------------------------------------------------------------------- local / hub

def test_spec_from_local_file_and_folder(tmp_path):
    cfg = preset_data("qwen2.5-0.5b")["config"]
    d = tmp_path / "my-model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    a = spec_from_local(d)
    b = spec_from_local(d / "config.json")
    assert a.param_counts().total == b.param_counts().total == 494_032_768
    assert a.source == str(d / "config.json") and a.name == "my-model"
    assert resolve_model(str(d)).param_counts().total == 494_032_768
    with pytest.raises(InputError):
        spec_from_local(tmp_path / "missing")
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(InputError):
        spec_from_local(tmp_path / "bad.json")


def test_resolve_prefers_presets():
    assert resolve_model("mixtral-8x7b") is load_preset("mixtral-8x7b")


def test_hub_offline_fails_at_once(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t = time.perf_counter()
    with pytest.raises(InputError):
        spec_from_hub("some-org/not-a-real-model-xyz")
    with pytest.raises(UnknownNameError) as ei:
        resolve_model("some-org/llama-2-7b-hf-typo")
    assert time.perf_counter() - t < 2.0
    assert ei.value.accepted


def test_hub_unreachable_fails_fast(monkeypatch):
    """Points the Hub endpoint at a closed local port: must fail within the timeout."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    t = time.perf_counter()
    with pytest.raises(InputError) as ei:
        spec_from_hub("some-org/not-a-real-model-xyz", timeout_s=2.0)
    assert time.perf_counter() - t < 4.0
    assert "could not fetch config.json" in str(ei.value)
