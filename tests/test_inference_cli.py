"""Issue 14's done-when commands through the CLI and the engine (fresh engine per test)."""

from __future__ import annotations

import json

import pytest

from fmest.cli import main
from fmest.testing import new_engine

GIB = 1 << 30


def _json(capsys, *args):
    rc = main(["estimate", *args, "--format", "json"], engine=new_engine(entrypoints=True))
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out)


def test_inference_llama70b_fp8_tp4(capsys):
    data = _json(capsys, "--mode", "inference", "--model", "meta-llama/Llama-3.1-70B",
                 "--dtype", "fp8", "--tp", "4", "--gpu", "H100-SXM", "--batch", "32",
                 "--context", "8192")
    mem, inf = data["memory"], data["inference"]
    # 32 x 8192 tokens x 80 layers x (2 KV heads per rank x 128 x K,V) x 2 bytes
    assert mem["components"]["kv_cache"] == 32 * 8192 * 80 * 2 * 2 * 128 * 2
    assert mem["fits"] is True and inf["fits"] is True
    assert inf["max_batch"] > 32 and inf["max_context"] > 8192
    assert inf["decode_tokens_per_second"] > inf["tokens_per_second"] > 0
    assert inf["usd_per_million_tokens"] == pytest.approx(data["cost"]["usd"])
    assert data["cost"]["usd"] > 0
    # the fits verdict keeps 1 - gpu_memory_utilization (10 %) free
    assert mem["headroom_bytes"] == pytest.approx(0.9 * mem["gpu_capacity_bytes"]
                                                  - mem["total_bytes"], abs=1)


def test_vlm_training_has_vision_components(capsys):
    for model in ("Qwen/Qwen2-VL-7B-Instruct", "llava-hf/llava-1.5-7b-hf"):
        data = _json(capsys, "--model", model, "--gpu", "H100-SXM", "--seq-len", "1024",
                     "--micro-batch", "2", "--images-per-sample", "2")
        comps = data["memory"]["components"]
        assert comps["vision_weights"] > 0
        assert data["model"]["param_counts"]["vision"] > 0
        # a frozen tower: trainable = all but the tower
        counts = data["model"]["param_counts"]
        assert data["model"]["trainable_params"] < counts["total"]


def test_encoder_decoder_lora_answers(capsys):
    for model in ("bigscience/T0_3B", "bigscience/mt0-xxl"):
        data = _json(capsys, "--model", model, "--technique", "lora", "--lora-target-modules",
                     "q", "v", "--gpu", "A100-SXM-80GB", "--source-len", "512",
                     "--target-len", "128")
        assert data["memory"]["total_bytes"] > 0 and data["time"]["step_seconds"] > 0
    # T0_3B: q and v of 24 encoder self-, 24 decoder self- and 24 cross-attention blocks, r 16
    assert data["model"]["trainable_params"] > 0
    t0 = _json(capsys, "--model", "bigscience/T0_3B", "--technique", "lora",
               "--lora-target-modules", "q", "v", "--gpu", "A100-SXM-80GB")
    assert t0["model"]["trainable_params"] == 72 * 2 * 16 * (2048 + 2048)


def test_longer_target_costs_more_memory(capsys):
    def total(tgt):
        return _json(capsys, "--model", "google/flan-t5-xl", "--gpu", "A100-SXM-80GB",
                     "--technique", "lora", "--lora-target-modules", "q", "v",
                     "--micro-batch", "16", "--source-len", "512",
                     "--target-len", str(tgt))["memory"]["total_bytes"]
    assert total(512) > total(128)


def test_bloomz_offline_alias(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = _json(capsys, "--model", "bigscience/bloomz-7b1", "--gpu", "A100-SXM-80GB")
    assert data["model"]["name"] == "bigscience/bloomz-7b1"
    assert any("alias table" in w and "bloom-7b1" in w for w in data["warnings"])


def test_raw_dimensions_params_and_knobs(capsys):
    raw = _json(capsys, "--hidden-size", "4096", "--num-layers", "32", "--num-heads", "32",
                "--intermediate-size", "11008", "--vocab-size", "32000", "--gpu", "A100-SXM-80GB")
    preset = _json(capsys, "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "A100-SXM-80GB")
    assert raw["memory"]["total_bytes"] == preset["memory"]["total_bytes"]
    weights_only = _json(capsys, "--params", "7e9", "--mode", "inference", "--gpu",
                         "A100-SXM-80GB")
    assert weights_only["memory"]["components"]["weights"] == 14_000_000_000
    knobs = _json(capsys, "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "A100-SXM-80GB",
                  "--activation-factor", "1.5", "--fragmentation-gib", "2",
                  "--misc-overhead-gib", "1", "--safety-margin", "0.1")
    comps = knobs["memory"]["components"]
    assert comps["fragmentation"] == 2 * GIB and comps["misc_overhead"] == GIB
    assert comps["activations"] == pytest.approx(
        1.5 * preset["memory"]["components"]["activations"], rel=1e-6)
    assert "calibration knobs" in knobs["memory"]["provenance"]["detail"]
    nf4 = _json(capsys, "--model", "meta-llama/Llama-2-7b-hf", "--dtype", "nf4", "--gpu",
                "A100-SXM-80GB")
    assert nf4["job"]["training"]["technique"] == "qlora"
