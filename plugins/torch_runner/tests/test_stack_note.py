"""The traced answer under a training stack that fuses kernels (issue 12): the trace runs eager
PyTorch, says so in its notes with the fp32 logits a fused loss never holds, and flags its
provenance so hybrid ranks it below analytic (the traced policy still answers with it)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from fmest.convert import job_from_dict  # noqa: E402
from fmest.testing import (
    TINY_LLAMA_CONFIG,  # noqa: E402
    new_engine,  # noqa: E402
)
from fmest_torch_runner import plugin as tr_plugin  # noqa: E402

TINY = TINY_LLAMA_CONFIG



def _job(method: str, stack=None):
    training = {"dtype": "fp32", "seq_len": 128, "micro_batch_size": 2}
    if stack:
        training["stack"] = stack
    return job_from_dict({"model": "tiny-llama", "model_config": dict(TINY),
                          "training": training, "options": {"method": method}})


def _traced(decision):
    return next(c for c in decision.candidates if c.provenance.basis == "traced")


def test_fused_stack_is_named_in_the_trace_and_hybrid_prefers_theory():
    theory = pytest.importorskip("fmest_memory_theory.plugin")
    engine = new_engine((tr_plugin, "torch_runner"), (theory, "memory_theory"))
    d = engine.estimate_memory(_job("hybrid", "megatron-core"))
    traced = _traced(d)
    assert traced.provenance.unfused_stack == "megatron-core"
    # 2 x 128 tokens x 4000 vocabulary x 4 B = 3.9 MiB of fp32 logits
    assert ("traced eager PyTorch; stack megatron-core fuses norm, activation, rope, loss: its "
            "real peak is lower by about 3.9 MiB") in " ".join(traced.notes)
    assert d.chosen.provenance.basis == "analytic"
    assert "stack megatron-core fuses kernels: ranks below analytic" in d.rule
    # the traced policy still answers with the trace (and its note)
    t = engine.estimate_memory(_job("traced", "megatron-core")).chosen
    assert t.provenance.basis == "traced" and t.provenance.unfused_stack == "megatron-core"


def test_liger_on_the_eager_stack_is_named():
    engine = new_engine((tr_plugin, "torch_runner"))
    job = _job("traced").evolve(training={"liger": True})
    t = engine.estimate_memory(job).chosen
    assert t.provenance.unfused_stack == "pytorch"
    assert any(n.startswith("traced eager PyTorch; stack pytorch with Liger kernels fuses "
                            "norm, activation, rope, loss") for n in t.notes)


def test_eager_stack_trace_is_not_flagged():
    engine = new_engine((tr_plugin, "torch_runner"))
    d = engine.estimate_memory(_job("hybrid"))
    traced = _traced(d)
    assert traced.provenance.unfused_stack is None
    assert not any("traced eager PyTorch" in n for n in traced.notes)
    assert d.chosen.provenance.basis == "traced"
