"""Padding and variable-length batches (fmest issues 20 and 21): the job fields, the config
readers, the allocator's padded-reserve lookup, and time/tokens counting real tokens."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fmest.allocator import padded_growth_fraction
from fmest.configs import load_configs
from fmest.convert import job_from_dict
from fmest.errors import InputError
from fmest.testing import new_engine

ROOT = Path(__file__).resolve().parents[1]


def _job(**training):
    workload = training.pop("workload", {})
    return job_from_dict({"model": "qwen2.5-0.5b",
                          "training": {"seq_len": 2048, "technique": "lora",
                                       "activation_checkpointing": "full", **training},
                          "workload": workload, "hardware": {"gpu": "A100-SXM-80GB"}})


def test_job_fields_take_the_documented_values():
    job = _job(padding="longest", truncation="delete",
               workload={"avg_seq_len": 1000, "seq_len_std": 400})
    assert job.training.padding == "longest" and job.training.truncation == "delete"
    assert job.workload.seq_len_std == 400
    assert _job().training.padding is None
    with pytest.raises(InputError):
        _job(padding="dynamic")
    with pytest.raises(InputError):
        _job(truncation="split")


def _load(tmp_path, name: str, text: str, fmt: str) -> dict:
    f = tmp_path / name
    f.write_text(text, encoding="utf-8")
    return load_configs([str(f)], fmt).data


@pytest.mark.parametrize("text,expected", [
    ("model_name_or_path: Qwen/Qwen2.5-0.5B\npacking: true\n", "packed"),
    ("model_name_or_path: Qwen/Qwen2.5-0.5B\npacking: false\n", "longest"),
])
def test_trl_packing(tmp_path, text, expected):
    data = _load(tmp_path, "sft.yaml", text, "trl")
    assert data["training"]["padding"] == expected


@pytest.mark.parametrize("extra,expected", [
    ("sample_packing: true\n", "packed"),
    ("pad_to_sequence_len: true\n", "max_length"),
    ("sample_packing: false\n", "longest"),
])
def test_axolotl_padding(tmp_path, extra, expected):
    data = _load(tmp_path, "ax.yaml", "base_model: Qwen/Qwen2.5-0.5B\nsequence_len: 1024\n"
                 + extra, "axolotl")
    assert data["training"]["padding"] == expected


@pytest.mark.parametrize("extra,expected", [
    ("stage: sft\n", "longest"),
    ("stage: pt\n", "packed"),
    ("stage: sft\npacking: true\n", "packed"),
    ("stage: sft\nneat_packing: true\n", "packed"),
])
def test_llama_factory_padding(tmp_path, extra, expected):
    data = _load(tmp_path, "lf.yaml", "model_name_or_path: Qwen/Qwen2.5-0.5B\n"
                 "finetuning_type: lora\ncutoff_len: 1024\n" + extra, "llama-factory")
    assert data["training"]["padding"] == expected


def test_torchtune_packed_dataset(tmp_path):
    text = ("model:\n  _component_: torchtune.models.llama3_2.lora_llama3_2_1b\n"
            "dataset:\n  _component_: torchtune.datasets.alpaca_dataset\n  packed: {}\n")
    assert _load(tmp_path, "tt.yaml", text.format("True"), "torchtune")["training"][
        "padding"] == "packed"
    assert _load(tmp_path, "tt2.yaml", text.format("False"), "torchtune")["training"][
        "padding"] == "longest"


def test_stack_default_is_pad_to_longest_for_hf_trainer():
    from fmest.stacks import resolve_builtin_stack

    stack = resolve_builtin_stack(_job(stack="ms-swift"))
    assert stack is not None and stack.profile.padding == "longest"
    stack = resolve_builtin_stack(_job(stack="torchtitan"))
    assert stack is not None and stack.profile.padding is None  # not stated: fixed shapes


def test_padded_growth_lookup_is_from_the_committed_table():
    # the table's rows: a growth per (checkpointing, batch, truncation) cell, nonnegative
    import json

    table = json.loads((ROOT / "core/fmest/data/allocator_reserve.json").read_text())["padded"]
    for r in table["rows"]:
        assert r["growth_over_transient"] >= 0.0
        # a cell's own lengths as trained give back its own growth
        assert padded_growth_fraction(
            r["trained_mean_over_cap"], r["trained_cv"], truncation=r["truncation"],
            micro_batch=r["batch"], checkpointing=r["activation_checkpointing"]) == \
            r["growth_over_transient"]
    assert table["command"] == "python scripts/derive_allocator_reserve.py --padded"
    assert padded_growth_fraction(0.0, 0.5) == 0.0


def _memory(job):
    engine = new_engine(entrypoints=True)
    return engine.estimate(job).memory


def test_padded_reserve_only_with_a_stated_length_distribution():
    # a stack without a fitted reserve fraction (a fitted one replaces the physics reserve)
    from fmest.stacks import resolve_builtin_stack

    stack = resolve_builtin_stack(_job(stack="torchtune"))
    assert stack is not None and stack.fitted.reserve_fraction is None
    base = _job(stack="torchtune")
    padded = _job(stack="torchtune", padding="longest", truncation="delete",
                  workload={"avg_seq_len": 900, "seq_len_std": 400})
    fixed = _job(stack="torchtune", padding="max_length",
                 workload={"avg_seq_len": 900, "seq_len_std": 400})
    m0, m1, m2 = _memory(base), _memory(padded), _memory(fixed)
    assert m2.components["allocator_reserve"] == m0.components["allocator_reserve"]
    growth = padded_growth_fraction(900 / 2048, 400 / 900, truncation="delete",
                                    checkpointing="full")
    assert (m1.components["allocator_reserve"] > m0.components["allocator_reserve"]) == (
        growth > 0)


def test_tokens_count_real_tokens_when_padded():
    engine = new_engine(entrypoints=True)
    # a micro-batch of 8: GPU-bound (a 0.5B model at one sample waits on the host)
    fixed = engine.estimate(_job(stack="pytorch", micro_batch_size=8))
    padded = engine.estimate(_job(stack="pytorch", padding="longest", micro_batch_size=8,
                                  workload={"avg_seq_len": 512}))
    # shorter steps (512-token batches, not 2048) and tokens/s over the real tokens only
    assert padded.time.step_seconds < fixed.time.step_seconds
    ratio = padded.tokens.samples_per_second * 512 / padded.tokens.tokens_per_second
    assert ratio == pytest.approx(1.0)
    maxlen = engine.estimate(_job(stack="pytorch", padding="max_length", micro_batch_size=8,
                                  workload={"avg_seq_len": 512}))
    assert maxlen.time.step_seconds == pytest.approx(fixed.time.step_seconds)
    assert maxlen.tokens.tokens_per_second == pytest.approx(
        fixed.tokens.tokens_per_second * 512 / 2048)


def test_measured_rows_state_their_distribution():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import measured  # type: ignore[import-not-found]

    mean, sd = measured.capped_lognormal_moments(3234.4, 2547.5, 2048, True)
    assert 0 < mean < 2048 and sd > 0
    # the closed form agrees with a large draw of the same lognormal
    import math
    import random

    s2 = math.log(1 + (2547.5 / 3234.4) ** 2)
    mu = math.log(3234.4) - s2 / 2
    rng = random.Random(0)
    xs = [x for x in (rng.lognormvariate(mu, math.sqrt(s2)) for _ in range(200000))
          if x <= 2048]
    assert sum(xs) / len(xs) == pytest.approx(mean, rel=0.01)
