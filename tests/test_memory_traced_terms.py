"""Memory terms traced to framework code (issue 21): Lit-GPT's LoRA step at 8641822 and the
attention default of old transformers releases in the evidence mapping."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fmest.convert import job_from_dict
from fmest.engine import Engine
from fmest_memory_theory import estimator as E
from fmest_memory_theory import layer as LY

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import measured  # noqa: E402

#: scripts/trace_litgpt_lora.py (Llama-2-7b-hf, 1304 tokens, layers 2 and 4): 164566.3 B per
#: token per block on fake CPU tensors, whose dropout keeps a bf16 noise tensor (2 B/element)
#: where CUDA's native_dropout keeps a bool mask (1 B): minus 4096 B/token on CUDA
TRACED_BLOCK_BYTES_PER_TOKEN = 164566.3 - 4096


def _job(stack: str, technique: str = "lora", mb: int = 1) -> dict:
    return {"model": "meta-llama/Llama-2-7b-hf",
            "training": {"dtype": "bf16", "precision": "pure", "technique": technique,
                         "lora_rank": 8, "lora_target_modules": ["q_proj", "v_proj"],
                         "optimizer": "adamw", "seq_len": 1304, "micro_batch_size": mb,
                         "grad_accum_steps": 128 // mb, "attention": "flash",
                         "loss": "chunked", "stack": stack},
            "hardware": {"gpu": "A100-SXM-40GB"}}


@pytest.fixture(scope="module")
def engine():
    return Engine()


def _setup(engine, job_dict):
    job = job_from_dict(job_dict)
    return E.job_setup(job, engine.context(job))


def test_litgpt_lora_block_matches_trace(engine):
    setup = _setup(engine, _job("lit-gpt"))
    saved, _ = LY.layer_activation_bytes(setup.model, setup.dims, setup.lora,
                                         E._layer_inputs(setup))
    assert saved / setup.tokens == pytest.approx(TRACED_BLOCK_BYTES_PER_TOKEN, rel=0.005)


def test_litgpt_terms_stay_in_their_profile(engine):
    lit = _setup(engine, _job("lit-gpt"))
    hf = _setup(engine, _job("hf-trainer"))
    lit_in, hf_in = E._layer_inputs(lit), E._layer_inputs(hf)
    assert lit_in.lora_dropout == 0.05 and lit_in.fused_qkv_views and lit_in.norm_no_upcast
    assert hf_in.lora_dropout == 0.0 and not hf_in.fused_qkv_views and not hf_in.norm_no_upcast
    assert not hf_in.lora_qkv_zero_pad


def test_zero_pad_only_when_some_of_qkv_is_off(engine):
    base = _job("lit-gpt")
    part = _setup(engine, base)
    base["training"]["lora_target_modules"] = ["q_proj", "k_proj", "v_proj"]
    full = _setup(engine, base)
    assert part.lora.qkv_adapted == 2 and not part.lora.qkv_all
    assert full.lora.qkv_all
    pad = LY.lora_input_bytes(part.lora, E._layer_inputs(part))
    nopad = LY.lora_input_bytes(full.lora, E._layer_inputs(full))
    hidden = part.model.hidden_size
    # q+v padded source (2 x hidden bf16) on top of one shared dropout input (2 + 1 B)
    assert pad / part.tokens == pytest.approx(3 * hidden + 4 * hidden + 16 * 2, rel=1e-6)
    assert nopad / full.tokens == pytest.approx(3 * hidden + 24 * 2, rel=1e-6)


def test_fused_qkv_elements_mha_and_gqa(engine):
    setup = _setup(engine, _job("lit-gpt"))
    q = setup.dims.q_dim
    assert LY.fused_qkv_saved_elements(setup.model, setup.dims) == 5 * q  # MHA: view keeps qkv
    gqa = _setup(engine, {**_job("lit-gpt"), "model": "meta-llama/Meta-Llama-3-8B"})
    assert LY.fused_qkv_saved_elements(gqa.model, gqa.dims) == 3 * gqa.dims.q_dim


def test_fused_qkv_mqa_expanded_by_litgpt_2024(engine):
    """falcon-7b (one key/value head): Lit-GPT 2023 keeps the fused output as a view, LitGPT
    2024+ expands k and v to every query head in training (stacks.toml fused_qkv_expands_mqa)."""
    def falcon(stack):
        job = _job(stack)
        job["training"]["lora_target_modules"] = ["query_key_value"]
        return _setup(engine, {**job, "model": "tiiuae/falcon-7b"})

    mqa = falcon("lit-gpt")
    q, k = mqa.dims.q_dim, mqa.dims.k_dim
    assert mqa.model.num_kv_heads == 1
    assert LY.fused_qkv_saved_elements(mqa.model, mqa.dims) == q + k + (q + 2 * k)
    assert LY.fused_qkv_saved_elements(mqa.model, mqa.dims, expands_mqa=True) == 3 * q
    new = falcon("litgpt")
    assert E._layer_inputs(new).fused_qkv_expands_mqa
    assert not E._layer_inputs(mqa).fused_qkv_expands_mqa


def test_litgpt_growth_per_micro_batch(engine):
    """The mb1 -> mb2 growth follows the traced per-token bytes (32 blocks), the log-probs of
    the chunked loss and the step's working set: more than before the traced terms."""
    one = engine.estimate(job_from_dict(_job("lit-gpt", mb=1)), quantities=("memory",)).memory
    two = engine.estimate(job_from_dict(_job("lit-gpt", mb=2)), quantities=("memory",)).memory
    grow = two.components["activations"] - one.components["activations"]
    assert grow >= 32 * 1304 * TRACED_BLOCK_BYTES_PER_TOKEN * 0.99
    logits = two.components["logits_and_loss"] - one.components["logits_and_loss"]
    assert logits >= 1304 * 32000 * 2 * 2 * 0.99   # bf16 logits + bf16 log-probs


@pytest.mark.parametrize("version,source,expected", [
    ("transformers 4.35.2", "x-2024", "eager"),
    ("transformers 4.36.0", "x-2023-10", "sdpa"),
    ("", "some-report-2023-10", "eager"),
    ("", "some-report-2023", "sdpa"),
    ("", "some-report-2024-02", "sdpa"),
])
def test_unknown_attention_follows_stated_version(version, source, expected):
    row = {"stack_version": version, "other": "", "source": source}
    assert measured._unknown_attention(row, "hf-trainer") == expected
    assert measured._unknown_attention(row, "pytorch") == "sdpa"


@pytest.mark.parametrize("other,expected", [
    ("report first committed 2023-11-29 (repo abc)", "eager"),
    ("published 2024-01-15", "sdpa"),
    ("run on 2023-06-02", "eager"),
    ("first committed 2023-11-29; transformers 4.36.1", "sdpa"),   # a stated version wins
    ("committed in 2023", "sdpa"),                                  # no full date: unknown
])
def test_unknown_attention_reads_a_run_date_in_other(other, expected):
    row = {"stack_version": "", "other": other, "source": "some-report-2023"}
    assert measured._unknown_attention(row, "hf-trainer") == expected


def test_stated_kbit_prep_reaches_the_qlora_job():
    rows = {r["id"]: r for r in measured.load_rows()}
    qlora = measured.map_row(rows["r3-vtx7b-qlora-s256-b2-mem"]).job["training"]
    assert qlora["kbit_prep"] == "peft" and qlora["activation_checkpointing"] == "full"
    assert qlora["attention"] == "eager"      # its report predates transformers' SDPA default
    lora = measured.map_row(rows["r3-vtx7b-lora-s256-b2-mem"]).job["training"]
    assert "kbit_prep" not in lora and lora.get("activation_checkpointing", "none") == "none"
