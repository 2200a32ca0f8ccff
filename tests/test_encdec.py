"""Encoder-decoder models: both stacks, cross-attention, T5's relative position bias, and
source/target lengths."""

from __future__ import annotations

from fmest.models.presets import load_preset
from fmest_memory_theory.encdec import (
    cross_attention_extra_bytes,
    encdec_activation_bytes,
    relative_bias_bytes,
    stack_lengths,
)


def test_presets_have_both_stacks():
    t0 = load_preset("bigscience/T0_3B")
    assert t0.is_encoder_decoder and t0.num_encoder_layers == 24 and t0.num_decoder_layers == 24
    assert t0.relative_attention_num_buckets == 32
    names = {(lin.name, lin.kind) for lin in t0.linears}
    assert ("q", "cross_attention") in names and ("wi_0", "mlp") in names
    # LoRA's usual T5 targets q and v match self- and cross-attention (peft suffix matching)
    assert {lin.kind for lin in t0.lora_targets(("q", "v"))} == {"attention", "cross_attention"}
    bart = load_preset("facebook/bart-large")
    assert bart.num_encoder_layers == 12 and bart.relative_attention_num_buckets == 0


def test_lengths_default_to_seq_len():
    t5 = load_preset("google-t5/t5-small")
    assert stack_lengths(t5, seq_len=512) == stack_lengths(t5, seq_len=512, source_len=512,
                                                           target_len=512)
    lengths = stack_lengths(t5, seq_len=512, target_len=128)
    assert (lengths.source_len, lengths.target_len) == (512, 128)


def test_activation_grows_with_each_length_and_counts_bias():
    mt0 = load_preset("bigscience/mt0-xxl")

    def per_layer(seq):  # a stand-in per-layer formula: 34 s h bytes (Korthikanti, flash)
        return 34 * seq * mt0.hidden_size

    def total(src, tgt):
        return encdec_activation_bytes(mt0, per_layer, batch=1, act_bytes=2,
                                       lengths=stack_lengths(mt0, seq_len=src, target_len=tgt))
    assert total(1024, 256) > total(512, 256) > total(512, 128)
    # fp32 bias [heads, s, s] per stack (T5Attention.compute_bias)
    assert relative_bias_bytes(mt0, batch=8, source_len=512, target_len=128) == \
        64 * (512 ** 2 + 128 ** 2) * 4
    assert cross_attention_extra_bytes(mt0, batch=1, target_len=128, source_len=512,
                                       act_bytes=2) > 0


def test_traced_t5_agrees_with_analytic():
    """The traced runner builds T5 through AutoModelForSeq2SeqLM with source ids and target
    labels; the analytic answer (eager attention with fp32 scores, gelu_new) is within 15 %."""
    import pytest

    pytest.importorskip("torch")
    from fmest.convert import job_from_dict
    from fmest.estimates import allocated_bytes
    from fmest.testing import new_engine

    tiny = {"model_type": "t5", "d_model": 256, "d_ff": 512, "d_kv": 32, "num_heads": 8,
            "num_layers": 2, "vocab_size": 512, "feed_forward_proj": "gated-gelu",
            "tie_word_embeddings": False}
    engine = new_engine(entrypoints=True)
    answers = {}
    for method in ("theory", "traced"):
        job = job_from_dict({"model": "tiny-t5", "model_config": tiny,
                             "hardware": {"gpu": "A100-SXM-80GB"},
                             "training": {"seq_len": 256, "micro_batch_size": 4,
                                          "source_len": 256, "target_len": 128},
                             "options": {"method": method}})
        report = engine.estimate(job, quantities=("memory",))
        answers[method] = allocated_bytes(report.memory)
    assert answers["traced"] == pytest.approx(answers["theory"], rel=0.15)


def test_step_time_follows_the_source_length():
    import json

    from fmest.cli import main
    from fmest.testing import new_engine

    def step(src):
        import contextlib
        import io

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            # micro-batch 8: a GPU-bound step (at micro-batch 1 the host's eager dispatch sets
            # the step, whatever the source length)
            assert main(["estimate", "--model", "google/flan-t5-xl", "--gpu", "A100-SXM-80GB",
                         "--source-len", str(src), "--target-len", "128", "--micro-batch", "8",
                         "--format", "json"],
                        engine=new_engine(entrypoints=True)) == 0
        return json.loads(buf.getvalue())["time"]["step_seconds"]
    assert step(1024) > step(128)
