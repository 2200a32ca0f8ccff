"""Packed rows whose samples attend within themselves (``training.packed_attention``
``document``): the attention core costs each sample's own causal attention, not the whole
row's (fmest_time_roofline.estimator.attention_context_len), and the config readers say which
kind their stack's packing is."""

from __future__ import annotations

import json

import pytest

import fmest
from fmest.configs import load_configs
from fmest.engine import Engine
from fmest_time_roofline import estimator as E
from fmest_time_roofline import formulas as F


def _job(training: dict, **extra) -> fmest.Job:
    tr = {"seq_len": 4096, "micro_batch_size": 2, "padding": "packed", "stack": "pytorch",
          **training}
    return fmest.to_job({"model": "meta-llama/Llama-3.1-8B", "training": tr,
                         "hardware": {"gpu": "H100-SXM-80GB"}, **extra})


@pytest.fixture(scope="module")
def engine():
    return Engine()


def _time(engine, job):
    return engine.estimate(job, quantities=("memory", "time")).time


def test_context_length_is_the_samples_second_moment_over_their_mean():
    job = _job({"packed_attention": "document"},
               workload={"avg_seq_len": 300, "seq_len_std": 150})
    assert E.attention_context_len(job) == pytest.approx(300 * (1 + 0.5 ** 2))
    # capped at the row; nothing without stated lengths, for whole-row attention, eager
    # attention (a dense document mask computes every block) or rows that are not packed
    long = _job({"packed_attention": "document"}, workload={"avg_seq_len": 4000,
                                                            "seq_len_std": 4000})
    assert E.attention_context_len(long) == 4096
    assert E.attention_context_len(_job({"packed_attention": "document"})) is None
    assert E.attention_context_len(_job({"packed_attention": "sequence"},
                                        workload={"avg_seq_len": 300})) is None
    assert E.attention_context_len(_job({"packed_attention": "document", "attention": "eager"},
                                        workload={"avg_seq_len": 300})) is None
    assert E.attention_context_len(_job({"padding": "max_length",
                                         "packed_attention": "document"},
                                        workload={"avg_seq_len": 300})) is None


def test_per_sample_attention_is_cheaper_by_the_attention_flops_it_skips(engine):
    whole = _job({"packed_attention": "sequence"}, workload={"avg_seq_len": 300})
    per_doc = _job({"packed_attention": "document"}, workload={"avg_seq_len": 300})
    t_whole, t_doc = _time(engine, whole), _time(engine, per_doc)
    assert t_doc.step_seconds < t_whole.step_seconds
    model = engine.context(whole).model
    # the attention FLOPs per token follow the context length
    assert F.attention_forward_flops_per_token(model, 300, causal=True) < \
        F.attention_forward_flops_per_token(model, 4096, causal=True) / 10
    assert any("attention as over 300-token rows" in n for n in t_doc.notes)
    unstated = _time(engine, _job({"packed_attention": "document"}))
    assert unstated.step_seconds == pytest.approx(t_whole.step_seconds)
    assert any("workload.avg_seq_len is not stated" in n for n in unstated.notes)


def test_torchtune_packs_per_document_by_default(engine):
    """torchtune's PackedDataset attends through a FlexAttention block-causal document mask
    (stacks.toml torchtune ``packed_attention``)."""
    tune = _job({"stack": "torchtune"}, workload={"avg_seq_len": 300})
    assert E.attention_context_len(tune, engine.context(tune).transforms.stack) == 300
    plain = _job({"stack": "pytorch"}, workload={"avg_seq_len": 300})
    assert E.attention_context_len(plain, engine.context(plain).transforms.stack) is None


def test_bad_value_names_the_field():
    with pytest.raises(fmest.errors.InputError) as err:
        _job({"packed_attention": "diagonal"})
    assert "packed_attention" in str(err.value)


@pytest.mark.parametrize("kind,text,expect", [
    ("axolotl", "base_model: meta-llama/Llama-3.1-8B\nsequence_len: 4096\nsample_packing: true\n"
     "flash_attention: true\n", "document"),
    ("trl", {"model_name_or_path": "meta-llama/Llama-3.1-8B", "max_length": 4096,
             "packing": True}, "document"),
    ("trl", {"model_name_or_path": "meta-llama/Llama-3.1-8B", "max_length": 4096,
             "packing": True, "packing_strategy": "wrapped"}, "sequence"),
    ("trl", {"model_name_or_path": "meta-llama/Llama-3.1-8B", "max_length": 4096,
             "packing": True, "packing_strategy": "wrapped", "padding_free": True}, "document"),
    ("llama-factory", "model_name_or_path: meta-llama/Llama-3.1-8B\nstage: sft\n"
     "cutoff_len: 4096\nneat_packing: true\n", "document"),
    ("llama-factory", "model_name_or_path: meta-llama/Llama-3.1-8B\nstage: sft\n"
     "cutoff_len: 4096\npacking: true\n", "sequence"),
])
def test_readers_say_what_their_packing_attends_to(tmp_path, kind, text, expect):
    if kind == "trl":
        path = tmp_path / "sft_config.json"
        path.write_text(json.dumps(text))
    else:
        path = tmp_path / "config.yaml"
        path.write_text(text)
    m = load_configs([str(path)], force_format=kind)
    assert m.data["training"]["padding"] == "packed"
    assert m.data["training"]["packed_attention"] == expect
