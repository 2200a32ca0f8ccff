"""torchtune, DeepSpeed, accelerate and torchtitan configs read faithfully (issue 23), on the real
files of tests/data/configs/corpus/ (MANIFEST.tsv gives each file's repository and commit)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fmest.cli import main
from fmest.configs import load_configs
from fmest.errors import InputError, NotTrainingError
from fmest.testing import new_engine

CORPUS = Path(__file__).parent / "data" / "configs" / "corpus"
TUNE = CORPUS / "torchtune" / "recipes" / "configs"
TITAN = CORPUS / "torchtitan" / "torchtitan"
TUNE_FILES = sorted(TUNE.rglob("*.yaml"))
TITAN_FILES = sorted(TITAN.rglob("*.toml"))


def _load(path: Path):
    return load_configs([str(path)])


def _said(merge, text: str) -> bool:
    return any(text in line for line in (*merge.ignored, *merge.not_modelled))


# -- torchtune ---------------------------------------------------------------------------------
def test_torchtune_distributed_recipe_takes_the_gpu_count_from_the_header():
    m = _load(TUNE / "llama3_1" / "70B_lora.yaml")
    assert m.data["model"] == "meta-llama/Llama-3.1-70B"
    assert m.data["hardware"]["gpus_per_node"] == 8
    assert m.origins["hardware.gpus_per_node"].endswith(
        "header comment: tune run --nproc_per_node 8 lora_finetune_distributed --config "
        "llama3_1/70B_lora")
    assert m.data["parallelism"]["fsdp"] == "full_shard"
    m = _load(TUNE / "llama3_1" / "8B_lora_dpo.yaml")   # --nnodes 1 --nproc_per_node 2
    assert (m.data["hardware"]["gpus_per_node"], m.data["hardware"]["nodes"]) == (2, 1)


def test_torchtune_single_device_recipe_is_one_gpu():
    m = _load(TUNE / "llama3_2" / "3B_lora_single_device.yaml")
    assert m.data["hardware"]["gpus_per_node"] == 1
    assert "single-device" in m.origins["hardware.gpus_per_node"]
    assert "fsdp" not in m.data.get("parallelism", {})


def test_torchtune_builders_map_to_presets_and_unknown_ones_name_the_builder():
    assert _load(TUNE / "llama3_2_vision" / "11B_lora.yaml").data["model"] == \
        "meta-llama/Llama-3.2-11B-Vision"
    assert _load(TUNE / "qwen2_5" / "7B_lora_single_device.yaml").data["model"] == \
        "Qwen/Qwen2.5-7B"
    m = _load(TUNE / "qwen3" / "0.6B_full_single_device.yaml")
    assert m.data["model"] == "torchtune.models.qwen3.qwen3_0_6b_instruct"


def test_torchtune_phi3_lora_targets_the_fused_modules():
    m = _load(TUNE / "phi3" / "mini_lora_single_device.yaml")
    targets = m.data["training"]["lora_target_modules"]
    assert "qkv_proj" in targets and "q_proj" not in targets
    assert _said(m, "fused qkv_proj")


def test_torchtune_qat_is_estimated_as_plain_training_with_a_warning():
    m = _load(TUNE / "llama3_1" / "8B_qat_full.yaml")
    assert m.data["hardware"]["gpus_per_node"] == 4
    assert any("quantizer._component_" in w and "estimated as plain bf16 training" in w
               for w in m.not_modelled)


@pytest.mark.parametrize("name,expect", [
    ("dev/3B_full_grpo.yaml", "frozen reference copy"),
    ("qwen2/1.5_to_0.5B_KD_lora_distributed.yaml", "teacher model"),
    ("mistral/7B_full_ppo_low_memory.yaml", "reward and value models"),
])
def test_torchtune_preference_and_rl_recipes_name_their_second_model(name, expect):
    m = _load(TUNE / name)
    assert m.data["training"]["loss"] in ("standard", "chunked")
    assert any(expect in w for w in m.not_modelled), m.not_modelled


def test_torchtune_lora_dpo_reference_costs_nothing_extra():
    m = _load(TUNE / "llama3_1" / "8B_lora_dpo.yaml")
    assert not any("reference" in w for w in m.not_modelled)
    assert m.data["training"]["objective"] == "dpo"
    assert m.data["training"]["reference_model"] == "adapter"


def test_torchtune_full_dpo_counts_its_reference_copy():
    # recipes/full_dpo_distributed.py builds ref_model with the policy's architecture
    m = _load(TUNE / "llama3_1" / "8B_full_dpo.yaml")
    assert m.data["training"]["objective"] == "dpo"
    assert m.data["training"]["reference_model"] == "copy"
    assert not any("reference" in w for w in m.not_modelled)


def test_torchtune_generation_is_inference():
    m = _load(TUNE / "generation.yaml")
    assert m.data["mode"] == "inference"
    assert m.data["inference"]["output_tokens"] == 300
    m = _load(TUNE / "llama3" / "70B_generation_distributed.yaml")
    assert (m.data["hardware"]["gpus_per_node"], m.data["parallelism"]["tp"]) == (8, 8)


@pytest.mark.parametrize("name,kind", [("eleuther_evaluation.yaml", "evaluation"),
                                       ("qwen3/evaluation.yaml", "evaluation"),
                                       ("quantization.yaml", "quantization")])
def test_torchtune_evaluation_and_quantization_are_not_training(name, kind):
    with pytest.raises(NotTrainingError, match=f"an? {kind} recipe"):
        _load(TUNE / name)


@pytest.mark.parametrize("path", TUNE_FILES + TITAN_FILES,
                         ids=lambda p: str(p.relative_to(CORPUS)))
def test_every_torchtune_and_torchtitan_corpus_file_maps_or_refuses_cleanly(path):
    try:
        _load(path)
    except InputError:
        pass


# -- DeepSpeed ---------------------------------------------------------------------------------
def test_deepspeed_zero_buffers_become_job_fields():
    m = _load(CORPUS / "axolotl" / "deepspeed_configs" / "zero2.json")
    p = m.data["parallelism"]
    assert p["zero_stage"] == 2
    assert p["zero_overlap_comm"] is True and p["zero_contiguous_gradients"] is True
    m = _load(CORPUS / "axolotl" / "deepspeed_configs" / "zero3_bf16.json")
    p = m.data["parallelism"]
    assert p["zero3_max_live_params"] == 0   # "max_live_parameters": 0 in the file
    assert "zero_reduce_bucket_elems" not in p   # "auto": DeepSpeed's default, with a warning
    assert any("reduce_bucket_size" in w and "auto" in w for w in m.not_modelled)
    assert any("stage3_param_persistence_threshold" in w for w in m.not_modelled)


def test_deepspeed_bucket_values_are_read(tmp_path):
    f = tmp_path / "ds.json"
    f.write_text(json.dumps({"zero_optimization": {
        "stage": 2, "overlap_comm": False, "contiguous_gradients": True,
        "reduce_bucket_size": 2e8, "allgather_bucket_size": 2e8, "sub_group_size": 1e9,
        "stage3_prefetch_bucket_size": 5e7, "stage3_max_live_parameters": 1e9}}))
    m = _load(f)
    p = m.data["parallelism"]
    assert p["zero_reduce_bucket_elems"] == 200_000_000
    assert p["zero_overlap_comm"] is False
    assert p["zero3_prefetch_bucket_elems"] == 50_000_000
    assert p["zero3_max_live_params"] == 1_000_000_000
    assert _said(m, "allgather_bucket_size: splits")
    assert p["zero3_sub_group_elems"] == 1_000_000_000   # read, not warned about
    assert not any("sub_group_size" in w for w in m.not_modelled)


@pytest.mark.parametrize("kind,expect", [("OneBitAdam", "adamw"), ("ZeroOneAdam", "adamw"),
                                         ("OneBitLamb", "adamw"), ("Lamb", "adamw"),
                                         ("Adagrad", "adagrad"), ("SGD", "sgd")])
def test_deepspeed_optimizers_are_accepted(tmp_path, kind, expect):
    f = tmp_path / "ds.json"
    f.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1,
                             "optimizer": {"type": kind, "params": {"lr": 1e-4}}}))
    m = _load(f)
    assert m.data["training"]["optimizer"] == expect
    if kind.startswith(("OneBit", "ZeroOne")):
        assert any("worker_error" in w for w in m.not_modelled)


def test_deepspeed_sgd_with_momentum_keeps_a_buffer(tmp_path):
    f = tmp_path / "ds.json"
    f.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1,
                             "optimizer": {"type": "SGD", "params": {"momentum": 0.9}}}))
    assert _load(f).data["training"]["optimizer"] == "sgd_momentum"


def test_deepspeed_onebit_adam_corpus_file_estimates():
    path = next(p for p in sorted((CORPUS / "deepspeed-examples").rglob("*.json"))
                if '"OneBitAdam"' in p.read_text())
    rc = main(["estimate", "--config", str(path), "--model", "gpt2", "--format", "json"],
              engine=new_engine(entrypoints=False))
    assert rc == 0


# -- accelerate --------------------------------------------------------------------------------
def test_accelerate_num_processes_is_the_total_over_machines():
    m = _load(CORPUS / "llama-factory" / "examples" / "accelerate"
              / "fsdp_config_multiple_nodes.yaml")
    hw = m.data["hardware"]
    assert hw["nodes"] == 2 and hw["gpus_per_node"] * hw["nodes"] == 16


def test_accelerate_fsdp2_and_deepspeed_sections():
    m = _load(CORPUS / "trl" / "examples" / "accelerate_configs" / "fsdp2.yaml")
    assert m.data["parallelism"]["fsdp"] in ("full_shard", "shard_grad_op")
    assert m.data["training"]["dtype"] == "bf16"
    m = _load(CORPUS / "trl" / "examples" / "accelerate_configs" / "deepspeed_zero3.yaml")
    assert m.data["parallelism"]["zero_stage"] == 3


def test_accelerate_use_cpu_is_refused(tmp_path):
    f = tmp_path / "a.yaml"
    f.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nuse_cpu: true\n")
    with pytest.raises(InputError, match="use_cpu"):
        _load(f)


# -- torchtitan --------------------------------------------------------------------------------
def test_torchtitan_flavors_without_a_preset_use_the_model_args_table():
    m = _load(TITAN / "models" / "qwen3" / "train_configs" / "qwen3_0.6b.toml")
    cfg = m.data["model_config"]
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]) == \
        (1024, 28, 3072)
    rc = main(["estimate", "--config",
               str(TITAN / "models" / "qwen3" / "train_configs" / "qwen3_0.6b.toml"),
               "--format", "json"], engine=new_engine(entrypoints=False))
    assert rc == 0


def test_torchtitan_deepseek_16b_is_deepseek_v2_lite_and_flux_is_refused():
    m = _load(TITAN / "models" / "deepseek_v3" / "train_configs" / "deepseek_v3_16b.toml")
    assert m.data["model"] == "deepseek-ai/DeepSeek-V2-Lite"
    with pytest.raises(InputError, match="diffusion"):
        _load(TITAN / "models" / "flux" / "train_configs" / "flux_dev_model.toml")
