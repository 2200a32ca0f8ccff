"""LoRA dropout and PEFT's k-bit preparation as job facts (issue 21): the job field, the
flag, the config readers, and the memory terms they drive (docs/memory_model.md)."""

from __future__ import annotations

import attrs
import pytest

from fmest.errors import InputError
from fmest.job import Training


def test_lora_dropout_field_validates():
    assert Training().lora_dropout is None
    assert Training(lora_dropout=0.1).lora_dropout == 0.1
    for bad in (-0.1, 1.0, float("nan")):
        with pytest.raises(InputError):
            Training(lora_dropout=bad)
    with pytest.raises(InputError):
        Training(kbit_prep="fp32")


def _estimate(**training):
    from fmest.engine import Engine
    from fmest.job import Job

    base = dict(technique="qlora", seq_len=4096, micro_batch_size=4, attention="flash",
                activation_checkpointing="full", precision="amp",
                lora_target_modules=("q_proj", "k_proj", "v_proj", "o_proj"))
    base.update(training)
    job = Job(model="mistralai/Mistral-7B-v0.1", training=Training(**base))
    report = Engine().estimate(job)
    return report.memory


def test_dropout_adds_mask_and_dropped_copy():
    off = _estimate(lora_dropout=0.0, activation_checkpointing="none")
    on = _estimate(lora_dropout=0.1, activation_checkpointing="none")
    # 4 adapted inputs of hidden size per layer; under amp with fp32 adapters each adapter
    # already saves its own compute-dtype copy, so the dropout adds its 1 B bool mask
    tokens, hidden, layers = 4 * 4096, 4096, 32
    expected = layers * tokens * 4 * hidden * 1
    got = on.components["activations"] - off.components["activations"]
    assert got == pytest.approx(expected, rel=1e-6)


def test_job_dropout_overrides_stack_default():
    from fmest.engine import Engine
    from fmest.job import Job

    def acts(**kw):
        job = Job(model="mistralai/Mistral-7B-v0.1", training=Training(
            technique="lora", seq_len=1024, stack="lit-gpt-2023", **kw))
        return Engine().estimate(job).memory.components["activations"]

    assert acts(lora_dropout=0.0) < acts()


def test_kbit_prep_fp32_stream_under_checkpointing():
    none = _estimate(kbit_prep="none", lora_dropout=0.0)
    prep = _estimate(kbit_prep="peft_bf16_head", lora_dropout=0.0)
    tokens, hidden, layers = 4 * 4096, 4096, 32
    extra = prep.components["activations"] - none.components["activations"]
    # every checkpointed layer input fp32 instead of bf16
    assert extra == pytest.approx(layers * tokens * hidden * 2, rel=0.05)


def test_kbit_prep_peft_casts_embeddings_and_head_to_fp32():
    none = _estimate(kbit_prep="none")
    peft = _estimate(kbit_prep="peft")
    head = _estimate(kbit_prep="peft_bf16_head")
    emb_head = 2 * 32000 * 4096
    assert peft.components["weights"] - none.components["weights"] == pytest.approx(
        emb_head * 2, rel=0.05)
    assert head.components["weights"] - none.components["weights"] < 1e7   # norms only


def test_kbit_prep_ignored_for_lora_and_gptq():
    a = _estimate(technique="lora", kbit_prep="peft")
    b = _estimate(technique="lora", kbit_prep="none")
    assert a.total_bytes == b.total_bytes
    a = _estimate(quantization_method="gptq", kbit_prep="peft")
    b = _estimate(quantization_method="gptq", kbit_prep="none")
    assert a.total_bytes == b.total_bytes


def test_flag_and_round_trip():
    from fmest.flags import JOB_FLAGS

    paths = {f.path for f in JOB_FLAGS}
    assert {"training.lora_dropout", "training.kbit_prep"} <= paths
    t = Training(lora_dropout=0.05, kbit_prep="peft")
    again = Training(**attrs.asdict(t))
    assert again == t
