"""A model's dropout in the time model (issue 20): torch's dropout kernels move 5 + 5 bytes per
element (``aten::native_dropout`` reads the input and writes the output and a bool mask; its
backward reads the gradient and the mask and writes a gradient), on the attention
probabilities of eager attention and on the two branch outputs of every layer; 1 + 5 inside a
fused residual chain; nothing at p = 0 or under torch.compile."""

from __future__ import annotations

import pytest

import fmest_memory_theory.plugin as memory_plugin
import fmest_time_roofline.plugin as time_plugin
from fmest.convert import job_from_dict
from fmest.testing import new_engine
from fmest_time_roofline import formulas as F

PLUGINS = ((memory_plugin, "memory_theory"), (time_plugin, "time_roofline"))
CFG = {"model_type": "gpt2", "n_embd": 1024, "n_layer": 4, "n_head": 16, "vocab_size": 50304,
       "n_positions": 2048}


def _memory_bound(p: float, **training) -> float:
    job = job_from_dict({"model": "gpt2-custom",
                         "model_config": dict(CFG, attn_pdrop=p, resid_pdrop=p, embd_pdrop=p),
                         "training": {"seq_len": 1024, "micro_batch_size": 2, **training},
                         "hardware": {"gpu": "A100-SXM-80GB"}})
    return new_engine(*PLUGINS).estimate(job).time.breakdown["memory_bound"]


def test_byte_counts():
    s_f, s_b, h_f, h_b = F.dropout_bytes_per_token_per_layer(
        probability=0.1, heads=16, seq_len=1024, eager_scores=True, hidden=1024,
        fused_residual=False)
    assert (s_f, s_b) == (16 * 1024 * 5.0, 16 * 1024 * 5.0)
    assert (h_f, h_b) == (2 * 1024 * 5.0, 2 * 1024 * 5.0)
    fused = F.dropout_bytes_per_token_per_layer(probability=0.1, heads=16, seq_len=1024,
                                                eager_scores=False, hidden=1024,
                                                fused_residual=True)
    assert fused == (0.0, 0.0, 2 * 1024 * 1.0, 2 * 1024 * 5.0)
    assert F.dropout_bytes_per_token_per_layer(probability=0.0, heads=16, seq_len=1024,
                                               eager_scores=True, hidden=1024,
                                               fused_residual=False) == (0.0, 0.0, 0.0, 0.0)


def test_dropout_adds_its_bytes_at_one_rate():
    """The added memory-bound time is the byte count over one HBM rate: eager attention adds the
    scores' share, SDPA only the hidden branches'; the ratio of the two extras is the ratio of
    their bytes."""
    eager = _memory_bound(0.1, attention="eager") - _memory_bound(0.0, attention="eager")
    sdpa = _memory_bound(0.1, attention="sdpa") - _memory_bound(0.0, attention="sdpa")
    assert eager > sdpa > 0
    heads, seq, hidden = 16, 1024, 1024
    assert eager / sdpa == pytest.approx((heads * seq * 10 + 2 * hidden * 10)
                                         / (2 * hidden * 10), rel=1e-6)
    assert _memory_bound(0.1, attention="eager", compile=True) == pytest.approx(
        _memory_bound(0.0, attention="eager", compile=True))
