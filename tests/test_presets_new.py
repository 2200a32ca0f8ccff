"""Architectures added for evidence rows that had none (issue h41): the OpenLLaMA 3B/13B presets
(EasyLM's configs), KempnerForge's random-init Llama-3 shapes and NeMo's GPT-3 5B/20B shapes
(benchmarks/measured.py name mapping). Each count equals what transformers instantiates for the
same config on the meta device; the KempnerForge counts equal its report's Parameters column."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

from fmest.models.hf import spec_from_hf_config
from fmest.models.presets import find_preset, load_preset, preset_data

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import measured  # type: ignore[import-not-found]  # noqa: E402  benchmarks/measured.py

NEW = ["openlm-research/open_llama_3b", "openlm-research/open_llama_13b"]


def _transformers_count(config: dict) -> int:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    cfg = copy.deepcopy(config)
    mt = cfg.pop("model_type")
    conf = transformers.AutoConfig.for_model(mt, **cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(conf)
    return sum(p.numel() for p in model.parameters())  # tied tensors once


def _row(model: str, tp: str = "1", seq_len: str = "2048") -> dict:
    return {"model": model, "other": "", "tp": tp, "seq_len": seq_len}


@pytest.mark.parametrize("name", NEW)
def test_preset_count_equals_transformers(name):
    spec = load_preset(name)
    assert not spec.warnings, spec.warnings
    assert spec.param_counts().total == _transformers_count(preset_data(name)["config"])


def test_open_llama_counts_and_names():
    # 3B: EasyLM llama_3b (3200 / 8640 / 26 layers / 32 heads, vocab 32000, untied); the README
    # states only the nominal size, so the exact figure is pinned here
    assert load_preset("open_llama_3b").param_counts().total == 3_426_473_600
    # 13B: LLaMA-13B's shape (Touvron et al. 2023 Table 2: 13.0B)
    total = load_preset("open_llama_13b").param_counts().total
    assert total == 13_015_864_320 and abs(total - 13.0e9) / 13.0e9 < 0.01
    assert find_preset("openlm-research/open_llama_3b") == "openlm-research/open_llama_3b"
    assert find_preset("open-llama-13b") == "openlm-research/open_llama_13b"


# KempnerForge benchmarks/mfu_scaling/mfu_scaling.md @ 5666d0d1, Models table: Parameters
KF_PUBLISHED = {"llama3-arch-7b-random-init": 8.03e9, "llama3-arch-13b-random-init": 14.84e9,
                "llama3-arch-70b-random-init": 70.55e9}


@pytest.mark.parametrize("name", sorted(measured.KEMPNERFORGE_SHAPES))
def test_kempnerforge_shapes(name):
    model, cfg, why = measured._model(_row(name), {})
    assert model == name and why == "" and cfg is not None
    spec = spec_from_hf_config(cfg, name=name, source="test")
    assert not spec.warnings
    total = spec.param_counts().total
    assert total == _transformers_count(cfg)
    if name in KF_PUBLISHED:  # the report prints two decimals of billions
        assert abs(total - KF_PUBLISHED[name]) < 0.005e9, total


def test_kempnerforge_ffn_rule():
    # ModelConfig.computed_ffn_hidden_dim: int(4 * dim * 2/3 * 1.3) rounded up to 256
    assert measured._kf_ffn(4096) == 14336      # Llama-3 8B's width
    assert measured._kf_ffn(5120) == 17920
    assert measured._kf_ffn(2048) == 7168
    moe = measured.KEMPNERFORGE_SHAPES["llama3-moe-arch-4b-a1.8b-random-init"][1]
    spec = spec_from_hf_config(dict(moe), name="kf-moe", source="test")
    assert spec.num_experts == 8 and spec.experts_per_token == 2 and spec.num_layers == 24


@pytest.mark.parametrize("size,tp,layers,hidden,vocab", [
    ("5B", "1", 24, 4096, 50304),   # 50257 padded to 128
    ("20B", "2", 44, 6144, 50432),  # 50257 padded to 128 x TP 2
])
def test_nemo_gpt3_shapes(size, tp, layers, hidden, vocab):
    model, cfg, why = measured._model(_row(f"GPT3-{size} (NeMo/Megatron GPT-3 config)", tp), {})
    assert why == "" and model == f"nemo-gpt3-{size.lower()}"
    assert (cfg["n_layer"], cfg["n_embd"], cfg["n_inner"], cfg["vocab_size"]) == \
        (layers, hidden, 4 * hidden, vocab)
    spec = spec_from_hf_config(cfg, name=model, source="test")
    assert not spec.warnings
    assert spec.param_counts().total == _transformers_count(cfg)


def test_brown_gpt3_shapes_unchanged():
    # the GPT-3 sizes of Brown et al.'s table keep their rule (vocab 51200)
    model, cfg, _ = measured._model(_row("GPT3-175B (NeMo/Megatron GPT-3 config)", "4"), {})
    assert model == "gpt3-175b" and cfg["vocab_size"] == 51200
