"""Job validation at the edges: dicts, JSON, fm-training-estimator input."""

from __future__ import annotations

import json

import pytest

import fmest
from fmest.convert import job_from_dict, job_from_json, job_to_dict
from fmest.errors import InputError
from fmest.job import Job


def test_roundtrip_dict():
    job = Job(model="gpt2").evolve(training={"seq_len": 512, "technique": "lora",
                                             "lora_target_modules": "c_attn,c_proj"},
                                   parallelism={"zero_stage": 2})
    assert job_from_dict(job_to_dict(job)) == job
    assert job.training.lora_target_modules == ("c_attn", "c_proj")


@pytest.mark.parametrize("data,field", [
    ({"model": "gpt2", "training": {"micro_batch_size": -1}}, "training.micro_batch_size"),
    ({"model": "gpt2", "training": {"micro_batch_size": 1.5}}, "training.micro_batch_size"),
    ({"model": "gpt2", "training": {"dtype": "int3"}}, "training.dtype"),
    ({"model": "gpt2", "parallelism": {"zero_stage": 5}}, "parallelism.zero_stage"),
    ({"model": "gpt2", "parallelism": {"fsdp": "sharded"}}, "parallelism.fsdp"),
    ({"model": "gpt2", "training": {"flash": True}}, "training.flash"),
    ({"model": "gpt2", "hardwar": {}}, "hardwar"),
    ({"training": {}}, "model"),
    ({"model": "gpt2", "training": {"compile": "maybe"}}, "training.compile"),
])
def test_bad_values_name_the_field(data, field):
    with pytest.raises(InputError) as e:
        job_from_dict(data)
    assert str(e.value).startswith(field)


def test_enum_errors_list_accepted_values():
    with pytest.raises(InputError, match="accepted: eager, sdpa, flash"):
        job_from_dict({"model": "gpt2", "training": {"attention": "xformers"}})


def test_malformed_json_names_line_and_column():
    with pytest.raises(InputError, match="line 1 column"):
        job_from_json('{"model": ')


def test_strings_from_json_are_coerced():
    job = job_from_dict({"model": "gpt2", "training": {"seq_len": "1024", "compile": "true"}})
    assert job.training.seq_len == 1024 and job.training.compile is True


FM_INPUT = {
    "estimator_metadata": {"method": "theory", "base_data_path": "data.csv"},
    "job_configs": [{
        "hf_training": {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
                        "gradient_checkpointing": True, "num_train_epochs": 3,
                        "fsdp": "full_shard auto_wrap", "output_dir": "./out",
                        "learning_rate": 1e-5},
        "fm": {"base_model_path": "ibm-granite/granite-3b-code-base",
               "flash_attention_v2": True, "block_size": 1024, "torch_dtype": "bfloat16",
               "technique": "lora"},
        "data": {"te_approach": 0, "dataset": "train.jsonl"},
        "infra": {"numGpusPerPod": 4, "numPods": 1, "gpu_memory_in_gb": 80, "gpuModel": "A100"},
        "peft_lora": {"r": 8, "lora_alpha": 16, "lora_dropout": 0.05,
                      "target_modules": "[q_proj, v_proj]"},
    }],
}


def test_fm_training_estimator_input_maps_every_field():
    from fmest.compat.fm_training_estimator import jobs_from_estimate_input

    (job,), ignored = jobs_from_estimate_input(FM_INPUT)
    t, p, h = job.training, job.parallelism, job.hardware
    assert job.model == "ibm-granite/granite-3b-code-base"
    assert (t.micro_batch_size, t.grad_accum_steps, t.activation_checkpointing) == (4, 2, "full")
    assert (t.attention, t.seq_len, t.dtype, t.technique) == ("flash", 1024, "bf16", "lora")
    assert (t.lora_rank, t.lora_alpha, t.lora_target_modules) == (8, 16.0, ("q_proj", "v_proj"))
    assert p.fsdp == "full_shard" and (h.gpus_per_node, h.nodes, h.gpu) == (4, 1, "A100-80GB")
    assert job.workload.epochs == 3 and job.workload.dataset_path == "train.jsonl"
    assert job.options.method == "theory"
    text = "\n".join(ignored)
    for key in ("output_dir", "learning_rate", "lora_dropout", "te_approach", "base_data_path"):
        assert key in text


def test_fm_training_estimator_input_through_api():
    job = fmest.to_job(json.dumps(FM_INPUT))
    assert job.training.micro_batch_size == 4


def test_fm_training_estimator_bad_method():
    bad = dict(FM_INPUT, estimator={"method": "magic"})
    bad.pop("estimator_metadata")
    with pytest.raises(InputError, match="estimator.method"):
        fmest.to_job(bad)
