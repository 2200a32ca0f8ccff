"""HF Trainer step time (issue 20): the bytes huggingface/peft's LoRA layer adds around each
adapted linear (time_roofline ``estimator.lora_elementwise_bytes``,
``formulas.peft_lora_bytes_per_row``; constants ``PEFT_LORA_*`` of
fmest.physics.time_constants), checked against hand-derived values and, where torch and peft
are installed, against a trace of PEFT's own code."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from fmest.physics.time_constants import (
    PEFT_LORA_BYTES_PER_FEATURE,
    PEFT_LORA_BYTES_PER_FEATURE_COMPUTE_DTYPE,
    PEFT_LORA_BYTES_PER_FEATURE_NO_AUTOCAST,
    PEFT_LORA_DROPOUT_BYTES_PER_IN_FEATURE,
)
from fmest.stacks import load_profiles
from fmest_time_roofline import estimator as E
from fmest_time_roofline import formulas as F

ROOT = Path(__file__).resolve().parents[1]


def _stack(name: str):
    profile = {p.name: p for p in load_profiles()}[name]
    return SimpleNamespace(profile=profile, name=name)


def test_bytes_per_row_hand_derived():
    # q of a 4096-wide model with GQA k (4096 -> 1024), peft with dropout:
    # forward (12 + 9) x 4096 + 10 x 1024, backward (18 + 9) x 4096 + 4 x 1024
    assert F.peft_lora_bytes_per_row(4096, 1024, dropout=True) == (96256.0, 114688.0)
    # without dropout PEFT's dropout is nn.Identity: 12 x 4096 + 10 x 1024, 18 x 4096 + 4 x 1024
    assert F.peft_lora_bytes_per_row(4096, 1024, dropout=False) == (59392.0, 77824.0)


def test_constants_are_the_traced_op_bytes():
    # forward in: cast to fp32 (r2 w4) + autocast back to bf16 (r4 w2); out: * scaling (r2 w2)
    # + add (r2 r2 w2); backward in: cast up, cast down, add into the input gradient; out: the
    # scaling's gradient; dropout: CUDA native_dropout (r4, w4 + bool mask 1) both ways
    assert PEFT_LORA_BYTES_PER_FEATURE == {"fwd_in": 6 + 6, "fwd_out": 4 + 6,
                                           "bwd_in": 6 + 6 + 6, "bwd_out": 4}
    assert PEFT_LORA_DROPOUT_BYTES_PER_IN_FEATURE == {"fwd": 4 + 4 + 1, "bwd": 4 + 1 + 4}


def _mods():
    return (SimpleNamespace(in_features=4096, out_features=4096, layers=32, active_copies=1,
                            copies=1, kind="attention"),
            SimpleNamespace(in_features=4096, out_features=1024, layers=32, active_copies=1,
                            copies=1, kind="attention"))


def test_micro_batch_bytes_hand_derived():
    training = SimpleNamespace(technique="lora", lora_dropout=0.1)
    shape = SimpleNamespace(tokens=8192, pp=1)
    fwd, bwd = E.lora_elementwise_bytes(training, shape, _stack("hf-trainer"), _mods())
    # per token: q (21 x 4096 + 10 x 4096) + k (21 x 4096 + 10 x 1024) forward,
    # q (27 x 4096 + 4 x 4096) + k (27 x 4096 + 4 x 1024) backward; x 32 layers x 8192 tokens
    assert fwd == pytest.approx(8192 * 32 * (31 * 4096 + 21 * 4096 + 10 * 1024))
    assert bwd == pytest.approx(8192 * 32 * (31 * 4096 + 27 * 4096 + 4 * 1024))
    # two pipeline stages: each holds half the layers
    half = E.lora_elementwise_bytes(training, SimpleNamespace(tokens=8192, pp=2),
                                    _stack("hf-trainer"), _mods())
    assert half[0] == pytest.approx(fwd / 2)


def test_only_peft_stacks_and_adapters_pay():
    training = SimpleNamespace(technique="lora", lora_dropout=None)
    shape = SimpleNamespace(tokens=1024, pp=1)
    # an own loop's LoRA is PEFT too (stacks.toml pytorch lora_impl = "peft"); Lit-GPT's own
    # LoRALinear and torchtune's adapters run in the compute dtype: no PEFT casts
    assert E.lora_elementwise_bytes(training, shape, _stack("pytorch"), _mods()) != (0.0, 0.0)
    assert E.lora_elementwise_bytes(training, shape, _stack("litgpt"), _mods()) == (0.0, 0.0)
    assert E.lora_elementwise_bytes(training, shape, None, _mods()) == (0.0, 0.0)
    assert E.lora_elementwise_bytes(training, shape, _stack("hf-trainer"), ()) == (0.0, 0.0)
    # no dropout given: the hf-trainer profile's (PEFT's default 0.0): no dropout bytes
    fwd, _ = E.lora_elementwise_bytes(training, shape, _stack("hf-trainer"), _mods()[:1])
    assert fwd == pytest.approx(1024 * 32 * (12 * 4096 + 10 * 4096))


def test_engine_charges_the_dropout_bytes_to_memory_bound():
    """End to end: hf-trainer LoRA with dropout 0.1 minus the same job without dropout is the
    dropout's 9 + 9 bytes per adapter input feature and token, forward twice (full
    checkpointing recomputes it) and backward once, at HBM_EFFICIENCY of the HBM bandwidth."""
    from fmest.convert import job_from_dict
    from fmest.engine import Engine
    from fmest.physics.counting import lora_modules

    def job(dropout):
        return job_from_dict({
            "model": "meta-llama/Llama-2-7b-hf",
            "training": {"technique": "lora", "lora_rank": 16, "lora_dropout": dropout,
                         "seq_len": 2048, "micro_batch_size": 2, "stack": "hf-trainer",
                         "activation_checkpointing": "full"},
            "hardware": {"gpu": "A100-SXM-80GB", "gpus_per_node": 1, "nodes": 1}})

    engine = Engine()
    with_dropout = engine.estimate(job(0.1), quantities=("time",)).time
    without = engine.estimate(job(0.0), quantities=("time",)).time
    ctx = engine.context(job(0.1))
    mods = tuple(lora_modules(ctx.model, job(0.1).training))
    in_features = sum(m.in_features * m.layers * m.active_copies for m in mods)
    tokens = 2 * 2048
    expected = (2 * 9 + 9) * in_features * tokens \
        / (ctx.gpu.hbm_bytes_per_s * F.HBM_EFFICIENCY)
    delta = with_dropout.breakdown["memory_bound"] - without.breakdown["memory_bound"]
    assert delta == pytest.approx(expected, rel=1e-6)


def _trace_bytes(in_f: int, out_f: int, tokens: int, *, lora: bool,
                 autocast: bool = True, adapter_fp32: bool = True) -> tuple[int, int]:
    import contextlib

    import torch
    from peft import LoraConfig, get_peft_model

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from count_elementwise_bytes import _Bytes  # type: ignore[import-not-found]

    torch.manual_seed(0)
    model: torch.nn.Module = torch.nn.Sequential(
        torch.nn.Linear(in_f, out_f, bias=False)).to(torch.bfloat16)
    if lora:
        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=16, lora_dropout=0.0,
                                                 target_modules=["0"]),
                               autocast_adapter_dtype=adapter_fp32)
        dtypes = {p.dtype for n, p in model.named_parameters() if "lora_" in n}
        assert dtypes == {torch.float32 if adapter_fp32 else torch.bfloat16}
    x = torch.randn(tokens, in_f, dtype=torch.bfloat16, requires_grad=True)
    amp = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with amp:
        with _Bytes() as fwd:
            y = model(x)
    with _Bytes() as bwd:
        torch.autograd.grad(y, [x] + [p for p in model.parameters() if p.requires_grad],
                            torch.ones_like(y))
    return fwd.bytes, bwd.bytes


@pytest.mark.parametrize("autocast,adapter_fp32,constants", [
    (True, True, PEFT_LORA_BYTES_PER_FEATURE),                 # HF Trainer bf16=True
    (False, True, PEFT_LORA_BYTES_PER_FEATURE_NO_AUTOCAST),    # pure bf16 base, fp32 adapters
    (False, False, PEFT_LORA_BYTES_PER_FEATURE_COMPUTE_DTYPE),  # bf16 adapters (older PEFT)
])
def test_trace_of_peft_matches_the_constants(autocast, adapter_fp32, constants):
    """PEFT LoRA on a bf16 linear, with and without bf16 autocast, dropout 0: the per-token
    slope of the bytes LoRA adds, per input and per output feature."""
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    PEFT_LORA_BYTES_PER_FEATURE = constants  # noqa: N806  the constants this case checks

    def per_token(in_f, out_f):
        out = []
        for tokens in (64, 128):
            lf, lb = _trace_bytes(in_f, out_f, tokens, lora=True, autocast=autocast,
                                  adapter_fp32=adapter_fp32)
            bf, bb = _trace_bytes(in_f, out_f, tokens, lora=False, autocast=autocast)
            out.append((lf - bf, lb - bb))
        return [(out[1][i] - out[0][i]) / 64 for i in range(2)]  # weight terms cancel

    base = per_token(128, 128)
    wide_in = per_token(256, 128)
    wide_out = per_token(128, 256)
    # the grad seed ones_like(y) (2 B per output) is in both runs and cancels
    assert (wide_in[0] - base[0]) / 128 == PEFT_LORA_BYTES_PER_FEATURE["fwd_in"]
    assert (wide_out[0] - base[0]) / 128 == PEFT_LORA_BYTES_PER_FEATURE["fwd_out"]
    assert (wide_in[1] - base[1]) / 128 == PEFT_LORA_BYTES_PER_FEATURE["bwd_in"]
    assert (wide_out[1] - base[1]) / 128 == PEFT_LORA_BYTES_PER_FEATURE["bwd_out"]
