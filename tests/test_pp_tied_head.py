"""Megatron-family stacks keep a copy of a tied embedding on the last pipeline stage (issue 21):
Megatron-Core ``LanguageModule.setup_embeddings_and_output_layer`` and DeepSpeed's
``TiedLayerSpec`` (stacks.toml ``pp_tied_head_copy``); without pipeline parallelism, or on a
stack without it, a tied head has no weight of its own."""

from __future__ import annotations

import pytest

import fmest_memory_theory.estimator as E
from fmest.convert import job_from_dict
from fmest.testing import new_engine


def _stages(stack: str, pp: int):
    job = job_from_dict({"model": "qwen2.5-0.5b",
                         "training": {"stack": stack, "grad_accum_steps": 8},
                         "parallelism": {"pp": pp},
                         "hardware": {"gpu": "H100-SXM-80GB", "gpus_per_node": 8}})
    eng = new_engine()
    setup = E.job_setup(job, eng.context(job))
    par, tr = setup.parallelism, setup.training
    stages = E.pipeline_stages(setup.model.num_layers, setup.layout.pp, par.pp_schedule,
                               tr.grad_accum_steps, par.pp_virtual_stages)
    return setup, {s.name: E.stage_params(setup, s) for s in stages}


@pytest.mark.parametrize("stack", ["megatron-core", "megatron-deepspeed"])
def test_last_stage_keeps_a_copy_of_the_tied_embedding(stack):
    setup, stages = _stages(stack, 2)
    assert setup.dims.head_params == 0                      # qwen2.5-0.5b ties its head
    assert stages["last"].head == pytest.approx(setup.dims.embedding_params)
    assert stages["first"].embedding == pytest.approx(setup.dims.embedding_params)


def test_no_copy_without_pipeline_or_on_other_stacks():
    setup, stages = _stages("megatron-core", 1)
    assert all(p.head == 0 for p in stages.values())
    setup, stages = _stages("pytorch", 2)
    assert stages["last"].head == 0


def _setup(model: str, stack: str, tp: int = 1, pp: int = 2, **cfg):
    job = job_from_dict({"model": model, "training": {"stack": stack, "grad_accum_steps": 8,
                                                      "seq_len": 1024},
                         "parallelism": {"pp": pp, "tp": tp},
                         "hardware": {"gpu": "H100-SXM-80GB", "gpus_per_node": 8}, **cfg})
    eng = new_engine()
    setup = E.job_setup(job, eng.context(job))
    par, tr = setup.parallelism, setup.training
    first = E.pipeline_stages(setup.model.num_layers, setup.layout.pp, par.pp_schedule,
                              tr.grad_accum_steps, par.pp_virtual_stages)[0]
    return setup, first


def test_in_flight_stage_outputs_by_pipeline_runtime():
    """torch pipelining keeps every in-flight chunk's output; Megatron frees the sent outputs'
    data (deallocate_pipeline_outputs); DeepSpeed's PipelineEngine keeps the tensor-parallel
    partition of each."""
    setup, first = _setup("llama-3.1-8b", "pytorch")
    full = first.inflight * setup.tokens * setup.model.hidden_size * setup.act_bytes
    assert E._pipeline_output_bytes(setup, first) == pytest.approx(full)
    setup, first = _setup("llama-3.1-8b", "megatron-core", tp=2)
    assert E._pipeline_output_bytes(setup, first) == 0
    setup, first = _setup("llama-3.1-8b", "megatron-deepspeed", tp=2)
    assert E._pipeline_output_bytes(setup, first) == pytest.approx(full / 2)


def test_embedding_layernorm_and_dropout_saved_per_micro_batch():
    """BLOOM's word_embeddings_layernorm saves its input and fp32 mean/rstd; an embedding
    dropout its mask: per micro-batch, before the first block's checkpoint."""
    setup, _ = _setup("bigscience/bloom-7b1", "pytorch")
    h, t = setup.model.hidden_size, setup.tokens
    assert E._embedding_stage_saved_bytes(setup) == pytest.approx(t * (h * 2 + 8))
    setup, _ = _setup("llama-3.1-8b", "pytorch")
    assert E._embedding_stage_saved_bytes(setup) == 0
