"""``training.lora_adapter_dtype`` (``--lora-adapter-dtype``): the LoRA adapters' storage dtype
stated by the job wins over the precision and stack rules (core/fmest/stacks.py
``apply_to_sizing``): fp32 adapters cost their fp32 matrices, gradients, states and fp32 input
copies; compute-dtype adapters (older PEFT on a bf16 base, ``autocast_adapter_dtype=False``)
none of the casts (docs/memory_model.md, docs/time_model.md)."""

from __future__ import annotations

import pytest

from fmest.convert import job_from_dict
from fmest.engine import default_engine
from fmest.errors import InputError
from fmest.transforms import transforms_of

BASE = {"model": "meta-llama/Llama-3.1-8B",
        "training": {"dtype": "bf16", "technique": "lora", "lora_rank": 16, "seq_len": 2048,
                     "lora_target_modules": ["q_proj", "k_proj", "v_proj", "o_proj",
                                             "gate_proj", "up_proj", "down_proj"]},
        "hardware": {"gpu": "H200-SXM-141GB"}}


def _job(**training):
    data = {**BASE, "training": {**BASE["training"], **training}}
    return job_from_dict(data)


@pytest.fixture(scope="module")
def engine():
    return default_engine()


def _answer(engine, **training):
    job = _job(**training)
    rep = engine.estimate(job, quantities=("memory", "time"))
    sizing = transforms_of(job, engine.context(job)).optimizer
    return rep, sizing


def test_pure_peft_default_is_fp32_and_stating_fp32_changes_nothing(engine):
    default, s0 = _answer(engine, stack="pytorch", precision="pure")
    stated, s1 = _answer(engine, stack="pytorch", precision="pure", lora_adapter_dtype="fp32")
    assert s0.trainable_bytes == s1.trainable_bytes == 4
    assert stated.memory.total_bytes == default.memory.total_bytes
    assert stated.time.step_seconds == default.time.step_seconds


def test_compute_adapters_drop_the_fp32_copies_and_casts(engine):
    fp32, _ = _answer(engine, stack="pytorch", precision="pure")
    bf16, sizing = _answer(engine, stack="pytorch", precision="pure", lora_adapter_dtype="compute")
    assert sizing.trainable_bytes == sizing.grad_bytes == sizing.state_bytes == 2
    # no fp32 input copy per adapted module (7 per layer, 32 layers, 2048 tokens): GiBs less
    assert fp32.memory.total_bytes - bf16.memory.total_bytes > 2 * 2**30
    assert bf16.time.breakdown["memory_bound"] < fp32.time.breakdown["memory_bound"]


def test_master_precision_keeps_fp32_states_under_compute_adapters(engine):
    _, sizing = _answer(engine, stack="deepspeed", precision="master",
                        lora_adapter_dtype="compute")
    assert sizing.trainable_bytes == 2 and sizing.state_bytes == 4


def test_a_stack_without_peft_takes_a_stated_fp32(engine):
    _, own = _answer(engine, stack="torchtune", precision="pure")
    _, stated = _answer(engine, stack="torchtune", precision="pure", lora_adapter_dtype="fp32")
    assert own.trainable_bytes == 2 and stated.trainable_bytes == 4


def test_bad_value_names_the_field_and_the_choices():
    with pytest.raises(InputError) as err:
        _job(lora_adapter_dtype="bf16")
    text = str(err.value)
    assert "lora_adapter_dtype" in text and "fp32" in text and "compute" in text
