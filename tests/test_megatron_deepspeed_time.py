"""TFLOP/s of BigScience Megatron-DeepSpeed rows compared like with like (issue 20).

benchmarks/accuracy.py converts fmest's step time into the fork's own ``TFLOPs:`` log-line
count (megatron/training.py ``training_log`` of bigscience-workshop/Megatron-DeepSpeed; before
PR 251 a parameter count, after it Narayanan et al. eq. 3), with the run's recompute. The
expected values are the published log lines of bigscience-workshop/bigscience
train/tr11-176B-ml/chronicles-prequel.md @59a90eec: an iteration time and the TFLOPs the fork
printed for it; fed the same iteration time, the conversion must print the same TFLOPs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import accuracy  # noqa: E402  benchmarks/accuracy.py

SEQ = 2048
GBS = 2048


def _model(h: int, layers: int, vocab: int = 250880, gated: bool = False):
    """A GPT block model as the fork builds it: 12h^2 + 13h parameters a layer (QKV, dense,
    two-layer MLP with biases, two layer norms), a final norm, tied embeddings."""
    non_emb = layers * (12 * h * h + 13 * h) + 2 * h
    emb = vocab * h
    counts = SimpleNamespace(total=non_emb + emb, embedding=emb)
    return SimpleNamespace(hidden_size=h, num_layers=layers, vocab_size=vocab, gated_mlp=gated,
                           param_counts=lambda: counts)


def _row(**kw) -> dict:
    row = {"stack": "megatron-deepspeed", "unit": "TFLOPs_per_gpu",
           "stack_version": "bigscience Megatron-DeepSpeed fork, Feb 2022", "other": "",
           "source_quote": ""}
    row.update(kw)
    return row


def test_pr251_formula_reproduces_the_logged_tflops():
    # 48 nodes, NHIDDEN 14336, 72 layers, TP8 PP12 DP4 MBS1: "143.31 s/it | 112.49 TFLOPs"
    # hand: 24*4*B*s*L*h^2 = 5.9583e18; x (1 + 2048/86016 + 250880/16515072) = 1.03902 -> 6.1907e18
    flops = accuracy.bigscience_logged_flops(_model(14336, 72), tokens=GBS * SEQ, seq=SEQ, tp=8,
                                             recompute=True, pr251=True)
    assert flops == pytest.approx(6.1907e18, rel=1e-4)
    assert flops / (143.31 * 384) / 1e12 == pytest.approx(112.49, rel=5e-4)


def test_pre_pr251_parameter_count_reproduces_the_logged_tflops():
    # 1 node, NHIDDEN 14400, 8 layers, TP8: "elapsed time per iteration (s): 769.99 ...
    # TFLOPs: 108.47"; hand: N = 8 (12 h^2 + 13 h) + 2h = 1.99081e10, 2*4*N*B*s = 6.6800e17
    flops = accuracy.bigscience_logged_flops(_model(14400, 8), tokens=GBS * SEQ, seq=SEQ, tp=8,
                                             recompute=True, pr251=False)
    assert flops == pytest.approx(6.6800e17, rel=1e-4)
    assert flops / (769.99 * 8) / 1e12 == pytest.approx(108.47, rel=5e-4)
    # 10 nodes, 80 layers, TP8 PP10: "844.81 s ... TFLOPs: 98.87"
    flops = accuracy.bigscience_logged_flops(_model(14400, 80), tokens=GBS * SEQ, seq=SEQ, tp=8,
                                             recompute=True, pr251=False)
    assert flops / (844.81 * 80) / 1e12 == pytest.approx(98.87, rel=5e-4)


def test_recompute_glu_and_vocab_padding():
    kw = dict(tokens=GBS * SEQ, seq=SEQ, pr251=True)
    m = _model(4096, 24, vocab=50257)
    full = accuracy.bigscience_logged_flops(m, tp=8, recompute=True, **kw)
    none = accuracy.bigscience_logged_flops(m, tp=8, recompute=False, **kw)
    assert none / full == pytest.approx(3.0 / 4.0)            # factor 3 without recompute
    glu = accuracy.bigscience_logged_flops(_model(4096, 24, 50257, gated=True), tp=8,
                                           recompute=True, **kw)
    assert glu / full == pytest.approx(32.0 / 24.0)            # PR 283 coefficient
    # 50257 padded to a multiple of 128 x 8 = 1024: 51200 (tokenizer._vocab_size_with_padding)
    padded = accuracy.bigscience_logged_flops(_model(4096, 24, vocab=51200), tp=8,
                                              recompute=True, **kw)
    assert full == pytest.approx(padded)


def test_which_calculator_logged_the_row():
    before = _row(source_quote="|    8 | 20B  |  1 |  8 |  1 |   1 | 67GB | 108.47 | 02-17 |",
                  other="TFLOPs as printed (a ~3% under-report before PR 251)")
    assert accuracy.bigscience_run_date(before) == (2022, 2, 17)
    assert not accuracy.bigscience_uses_pr251(before)
    on_merge_day = _row(source_quote="| 48 | 181B | 4 | 8 | 12 | 1 | 2048 | 29GB | 143.31 | "
                                     "112.49 | 02-21 |")
    assert accuracy.bigscience_uses_pr251(on_merge_day)
    stated = dict(before, other="TFLOPs after the improved calculator (PR 251)")
    assert accuracy.bigscience_uses_pr251(stated)
    assert accuracy.bigscience_uses_pr251(_row())              # undated: the fork's current count
    assert accuracy.is_bigscience_megatron_deepspeed(_row())
    assert not accuracy.is_bigscience_megatron_deepspeed(_row(stack_version="microsoft fork"))
    assert not accuracy.is_bigscience_megatron_deepspeed(_row(stack="megatron-core"))


def test_predicted_rate_equals_the_log_at_the_logged_iteration_time():
    """Like with like: a step time equal to the logged iteration time gives the logged TFLOPs."""
    row = _row(source_quote="| 48 | 181B | 4 | 8 | 12 | 1 | 2048 | 29GB | 143.31 | 112.49 | 02-21 |")
    job = {"training": {"micro_batch_size": 1, "grad_accum_steps": 512, "seq_len": SEQ,
                        "activation_checkpointing": "full"}}
    layout = SimpleNamespace(world_size=384, dp=4, tp=8)
    report = SimpleNamespace(
        time=SimpleNamespace(step_seconds=143.31, flops_per_step=1.0, mfu=0.4),
        tokens=SimpleNamespace(tokens_per_second=1.0, tokens_per_second_per_gpu=1.0),
        context=SimpleNamespace(layout=layout, model=_model(14336, 72)))
    assert accuracy.predicted_rate(row, job, report) == pytest.approx(112.49, rel=5e-4)
    job["training"]["activation_checkpointing"] = "none"
    assert accuracy.predicted_rate(row, job, report) == pytest.approx(112.49 * 3 / 4, rel=5e-4)
