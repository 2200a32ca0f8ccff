"""Training-config importers and exporters (issue 7): detection, each format's mapping, merge
order, flags over files, ignored keys, DeepSpeed "auto" and batch arithmetic, errors, round
trips. Example files: tests/data/configs/<format>/ (each cites the tool's documented schema)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fmest.cli import main
from fmest.configs import FORMATS, detect_format, load_configs
from fmest.configs.export import EXPORT_FORMATS, EXPRESSIBLE, export_job
from fmest.convert import job_from_dict
from fmest.errors import InputError
from fmest.job import resolve_layout
from fmest.testing import new_engine

DATA = Path(__file__).parent / "data" / "configs"
EXAMPLES = sorted(p for p in DATA.glob("*/*") if p.suffix in (".json", ".yaml", ".yml"))


def _d(fmt: str, name: str) -> str:
    return str(DATA / fmt / name)


def _cli_json(argv, capsys) -> dict:
    rc = main(["estimate", "--format", "json", *argv], engine=new_engine())
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out)


# -- detection ------------------------------------------------------------------------------
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_detects_every_example_by_content(path, tmp_path):
    assert detect_format(str(path), path.read_text()) == path.parent.name
    # the content decides, not the name
    anon = tmp_path / ("x" + path.suffix)
    anon.write_text(path.read_text())
    assert detect_format(str(anon), anon.read_text()) == path.parent.name


def test_detect_falls_back_to_the_name_and_errors_without_either():
    assert detect_format("conf/ds_config.json", "{}") == "deepspeed"
    assert detect_format("my_accelerate.yaml", "{}") == "accelerate"
    with pytest.raises(InputError) as exc:
        detect_format("x.yaml", "foo: 1\n")
    assert "x.yaml" in str(exc.value) and "--config-format" in str(exc.value)
    assert all(f in str(exc.value) for f in FORMATS)


def test_forced_format_skips_detection(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("batch_size: 3\n")
    assert load_configs([str(f)], "torchtune").data == {"training": {"micro_batch_size": 3,
                                                                     "stack": "torchtune"}}
    with pytest.raises(InputError, match="--config-format.*accepted: training-args"):
        load_configs([str(f)], "nope")


# -- nothing is dropped silently ------------------------------------------------------------
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_key_is_mapped_or_reported(path):
    import re

    from fmest.configs import parse_text

    merge = load_configs([str(path)])
    doc = parse_text(str(path), path.read_text())
    own = re.escape(str(path))
    text = "\n".join([*merge.origins.values(), *merge.ignored, *merge.not_modelled,
                      *merge.unresolved.values()])
    said = []
    for hit in re.finditer(own + r": ([^:()\n]+)", text):
        said += [k.strip() for part in hit.group(1).split(", ") for k in part.split("+")]
    if path.parent.name == "fm-training-estimator":
        doc = {"job_configs": 1}  # the compat reader reports per job config
        said += ["job_configs"]
    if len(merge.files) > 1:  # the key naming the included file: see merge.files
        said += ["deepspeed", "deepspeed_config"]
    for key in doc:
        assert any(s == key or s.startswith((f"{key}.", f"{key} ", f"{key}[", f"model.{key}"))
                   for s in said), f"{path.name}: {key} dropped silently"


# -- each format's mapping ------------------------------------------------------------------
def test_training_args_mapping():
    m = load_configs([_d("training-args", "training_args.json")])
    assert m.data["training"] == {
        "micro_batch_size": 4, "grad_accum_steps": 8, "dtype": "bf16", "precision": "amp",
        "optimizer": "adamw_torch_fused", "activation_checkpointing": "full", "compile": False,
        "stack": "hf-trainer", "tf32": True}
    assert m.data["parallelism"] == {"fsdp": "full_shard", "cpu_offload": "params",
                                     "fsdp_backward_prefetch": "pre"}
    assert m.data["workload"] == {"epochs": 2.0}
    assert m.origins["training.micro_batch_size"].endswith(
        "training_args.json: per_device_train_batch_size")
    # tf32: true is read (an fp32 job's GEMMs on tensor cores), no longer ignored
    assert not any("tf32" in i for i in m.ignored)


def test_training_args_loads_the_deepspeed_file_it_names_and_resolves_its_autos():
    m = load_configs([_d("training-args", "with_deepspeed.json")])
    assert [f for _, f in m.files] == ["training-args", "deepspeed"]
    assert m.data["parallelism"] == {"zero_stage": 3, "cpu_offload": "optimizer",
                                     "zero3_max_live_params": 1000000000,
                                     "zero3_sub_group_elems": 1000000000,
                                     "zero_contiguous_gradients": True,
                                     "zero_overlap_comm": True}
    assert m.data["training"]["micro_batch_size"] == 2
    assert m.data["training"]["precision"] == "master"  # DeepSpeed owns the precision policy
    assert m.origins["training.precision"].endswith("ds_zero3_auto.json: bf16.enabled")
    assert m.unresolved == {}


def test_training_args_missing_deepspeed_file_is_reported(tmp_path):
    f = tmp_path / "args.json"
    f.write_text(json.dumps({"per_device_train_batch_size": 2, "deepspeed": "nowhere.json"}))
    m = load_configs([str(f)])
    assert any("deepspeed: deepspeed config 'nowhere.json' not found" in i for i in m.ignored)


def test_deepspeed_mapping_and_batch_arithmetic_derives_dp():
    m = load_configs([_d("deepspeed", "ds_zero2_offload.json")])
    assert m.data["parallelism"] == {"zero_stage": 2, "cpu_offload": "optimizer", "dp": 8,
                                     "zero_contiguous_gradients": True,
                                     "zero_overlap_comm": True,
                                     "zero_reduce_bucket_elems": 500000000}
    assert m.data["training"] == {"micro_batch_size": 4, "grad_accum_steps": 2, "dtype": "bf16",
                                  "precision": "master", "stack": "deepspeed"}
    assert "train_batch_size" in m.origins["parallelism.dp"]
    assert m.origins["parallelism.zero_reduce_bucket_elems"].endswith(
        "zero_optimization.reduce_bucket_size")
    assert any("offload_optimizer.device: nvme" in i for i in m.ignored)


def test_deepspeed_batch_arithmetic_checks_against_the_gpu_count(tmp_path):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4,
                              "gradient_accumulation_steps": 2}))
    acc = tmp_path / "acc.yaml"
    acc.write_text("distributed_type: DEEPSPEED\nnum_processes: 8\nnum_machines: 1\n")
    m = load_configs([str(acc), str(ds)])  # 64 = 4 x 2 x 8: consistent
    assert "dp" not in m.data.get("parallelism", {})
    acc.write_text("distributed_type: DEEPSPEED\nnum_processes: 4\nnum_machines: 1\n")
    with pytest.raises(InputError) as exc:
        load_configs([str(acc), str(ds)])
    msg = str(exc.value)
    assert "ds.json: train_batch_size" in msg and "4 x 2 x 4 = 32" in msg and "\n" not in msg
    # micro-batch "auto" is derived from train_batch_size / (accum x dp)
    ds.write_text(json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": "auto",
                              "gradient_accumulation_steps": 4}))
    acc.write_text("distributed_type: DEEPSPEED\nnum_processes: 8\n")
    m = load_configs([str(acc), str(ds)])
    assert m.data["training"]["micro_batch_size"] == 2 and m.unresolved == {}


def test_deepspeed_auto_values_unresolved_alone_resolved_by_another_file(tmp_path):
    ds = _d("deepspeed", "ds_zero3_auto.json")
    m = load_configs([ds])
    assert set(m.unresolved) == {"training.micro_batch_size", "training.grad_accum_steps",
                                 "training.dtype"}
    assert "train_micro_batch_size_per_gpu" in m.unresolved["training.micro_batch_size"]
    args = tmp_path / "a.yaml"
    args.write_text("per_device_train_batch_size: 4\ngradient_accumulation_steps: 2\n"
                    "fp16: true\n")
    m = load_configs([ds, str(args)])
    assert m.unresolved == {}
    assert m.data["training"]["dtype"] == "fp16" and m.data["training"]["precision"] == "master"


def test_accelerate_fsdp_mapping():
    m = load_configs([_d("accelerate", "fsdp_config.yaml")])
    assert m.data["parallelism"] == {"zero_stage": 0, "fsdp": "full_shard", "cpu_offload": "none",
                                     "fsdp_backward_prefetch": "pre"}
    assert m.data["hardware"] == {"nodes": 2, "gpus_per_node": 8}
    assert m.data["training"] == {"activation_checkpointing": "full", "dtype": "bf16",
                                  "precision": "amp", "stack": "hf-trainer"}
    assert any("fsdp_state_dict_type: checkpoint format only" in i for i in m.ignored)


@pytest.mark.parametrize("value,expected", [("FULL_SHARD", "full_shard"), (2, "shard_grad_op"),
                                            ("3", "no_shard"), ("HYBRID_SHARD", "hybrid_shard"),
                                            (4, "hybrid_shard")])
def test_accelerate_sharding_names_and_numbers(tmp_path, value, expected):
    f = tmp_path / "acc.yaml"
    f.write_text(f"distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: {value}\n")
    assert load_configs([str(f)]).data["parallelism"]["fsdp"] == expected


def test_accelerate_deepspeed_plugin_and_file():
    m = load_configs([_d("accelerate", "deepspeed_plugin.yaml")])
    assert m.data["parallelism"] == {"fsdp": "none", "zero_stage": 3, "cpu_offload": "optimizer"}
    assert m.data["training"] == {"grad_accum_steps": 4, "dtype": "bf16", "precision": "master",
                                  "stack": "deepspeed"}
    m = load_configs([_d("accelerate", "deepspeed_config.yaml")])
    assert [f for _, f in m.files] == ["accelerate", "deepspeed"]
    assert m.data["parallelism"]["zero_stage"] == 2 and m.data["hardware"]["gpus_per_node"] == 8


def test_axolotl_mapping():
    m = load_configs([_d("axolotl", "llama3_qlora.yaml")])
    assert m.data["model"] == "NousResearch/Meta-Llama-3-8B"
    t = m.data["training"]
    assert (t["technique"], t["quantization_bits"], t["lora_rank"], t["lora_alpha"]) == \
        ("qlora", 4, 32, 16.0)
    assert t["lora_target_modules"] == ["all-linear"] and t["seq_len"] == 4096
    assert (t["micro_batch_size"], t["grad_accum_steps"], t["optimizer"]) == \
        (2, 4, "paged_adamw_32bit")
    assert (t["attention"], t["activation_checkpointing"], t["dtype"]) == ("flash", "full", "bf16")
    # sample_packing: true -> packed batches (fixed shapes, no padding)
    assert t["padding"] == "packed"
    m = load_configs([_d("axolotl", "llama3_lora_fsdp.yaml")])
    assert m.data["parallelism"] == {"fsdp": "full_shard", "cpu_offload": "params"}
    assert m.data["training"]["loss"] == "fused"
    assert m.data["training"]["lora_target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj"]


def test_torchtune_mapping():
    m = load_configs([_d("torchtune", "3B_lora_single_device.yaml")])
    assert m.data["model"] == "meta-llama/Llama-3.2-3B"
    t = m.data["training"]
    assert (t["technique"], t["lora_rank"], t["lora_alpha"]) == ("lora", 8, 16.0)
    assert t["lora_target_modules"] == ["q_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                        "down_proj"]
    assert (t["loss"], t["optimizer"], t["optimizer_impl"]) == ("chunked", "adamw", "fused")
    assert (t["dtype"], t["precision"], t["seq_len"]) == ("bf16", "pure", 2048)
    m = load_configs([_d("torchtune", "8B_qlora_single_device.yaml")])
    t = m.data["training"]
    assert (t["technique"], t["quantization_bits"], t["optimizer"]) == \
        ("qlora", 4, "paged_adamw_8bit")
    assert t["activation_offload"] is True and m.data["workload"]["max_steps"] == 100
    m = load_configs([_d("torchtune", "8B_full_distributed.yaml")])
    assert m.data["model"] == "meta-llama/Llama-3.1-8B"
    assert m.data["parallelism"] == {"cpu_offload": "none", "fsdp": "full_shard"}
    assert m.data["training"]["technique"] == "full"


def test_llama_factory_mapping_and_its_defaults():
    m = load_configs([_d("llama-factory", "llama3_lora_sft.yaml")])
    t = m.data["training"]
    assert m.data["model"] == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert (t["technique"], t["lora_rank"], t["lora_alpha"]) == ("lora", 8, 16.0)
    assert t["lora_target_modules"] == ["all-linear"] and t["seq_len"] == 2048
    assert (t["attention"], t["loss"], t["activation_checkpointing"]) == \
        ("flash", "fused", "full")
    assert "LLaMA-Factory default" in m.origins["training.lora_alpha"]
    m = load_configs([_d("llama-factory", "llama3_qlora_ds.yaml")])
    t = m.data["training"]
    assert (t["technique"], t["quantization_bits"]) == ("qlora", 4)
    assert t["lora_target_modules"] == ["q_proj", "v_proj"]
    assert m.data["parallelism"]["zero_stage"] == 3 and m.unresolved == {}


def test_fm_training_estimator_delegates_to_the_compat_reader():
    m = load_configs([_d("fm-training-estimator", "estimate_input.json")])
    assert m.data["model"] == "ibm-granite/granite-3b-code-base"
    assert m.data["training"]["technique"] == "lora" and m.data["training"]["lora_rank"] == 8
    assert m.data["hardware"] == {"gpus_per_node": 2, "nodes": 1, "gpu": "A100-80GB"}
    assert any("base_data_path" in i for i in m.ignored)


def test_models_resolve_to_presets_through_the_engine():
    engine = new_engine()
    for path in ("axolotl/llama3_qlora.yaml", "llama-factory/llama3_lora_sft.yaml",
                 "torchtune/3B_lora_single_device.yaml"):
        model = load_configs([str(DATA / path)]).data["model"]
        assert engine.resolve_model(job_from_dict({"model": model})).source.startswith(
            "preset"), model


# -- merging and the CLI --------------------------------------------------------------------
def test_later_files_win_and_origins_follow(tmp_path):
    a = tmp_path / "a.yaml"
    a.write_text("base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: 2\nsequence_len: 512\n")
    b = tmp_path / "b.json"
    b.write_text(json.dumps({"per_device_train_batch_size": 8}))
    m = load_configs([str(a), str(b)])
    assert m.data["training"]["micro_batch_size"] == 8
    assert m.origins["training.micro_batch_size"] == f"{b}: per_device_train_batch_size"
    assert m.origins["training.seq_len"] == f"{a}: sequence_len"
    m = load_configs([str(b), str(a)])
    assert m.data["training"]["micro_batch_size"] == 2


def test_cli_flags_win_over_files_and_files_over_input_file(tmp_path, capsys):
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"model": "gpt2", "training": {"seq_len": 128,
                                                             "micro_batch_size": 1}}))
    cfg = _d("axolotl", "llama3_lora_fsdp.yaml")
    out = _cli_json(["-f", str(job), "--config", cfg, "--per-device-batch", "3",
                     "--model", "llama-3.2-1b"], capsys)
    t = out["job"]["training"]
    assert out["job"]["model"] == "llama-3.2-1b"  # flag
    assert t["micro_batch_size"] == 3  # flag over file
    assert t["seq_len"] == 2048 and t["grad_accum_steps"] == 8  # file over input file
    assert out["job"]["parallelism"]["fsdp"] == "full_shard"
    assert out["config"]["origins"]["training.seq_len"].endswith("sequence_len")
    assert any(w.startswith("config key ignored: ") and "datasets" in w
               for w in out["warnings"])


def test_cli_reports_unresolved_autos_unless_a_flag_sets_them(capsys):
    ds = _d("deepspeed", "ds_zero3_auto.json")
    out = _cli_json(["--config", ds, "--model", "gpt2"], capsys)
    assert len(out["config"]["unresolved"]) == 3
    assert any(w.startswith("config value unresolved:") for w in out["warnings"])
    out = _cli_json(["--config", ds, "--model", "gpt2", "--per-device-batch", "2",
                     "--grad-accum", "2", "--dtype", "bf16"], capsys)
    assert out["config"]["unresolved"] == []


def test_cli_explain_prints_where_each_setting_came_from(capsys):
    rc = main(["estimate", "--config", _d("torchtune", "3B_lora_single_device.yaml"),
               "--explain"], engine=new_engine())
    out = capsys.readouterr().out
    assert rc == 0
    assert "Where each setting came from" in out
    assert "training.micro_batch_size" in out and "3B_lora_single_device.yaml: batch_size" in out


def test_cli_config_format_flag(tmp_path, capsys):
    f = tmp_path / "weird.txt"
    f.write_text("batch_size: 5\n")
    out = _cli_json(["--config", str(f), "--config-format", "torchtune", "--model", "gpt2"],
                    capsys)
    assert out["job"]["training"]["micro_batch_size"] == 5


# -- errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name,text,expect", [
    ("bad.yaml", "micro_batch_size: [1, 2\nbase_model: x\n", "malformed YAML at line"),
    ("bad.json", '{"zero_optimization": {"stage": 3,}}', "malformed JSON at line 1"),
    ("ds.json", '{"zero_optimization": {"stage": 5}}',
     "zero_optimization.stage: not an accepted value (got 5); accepted: 0, 1, 2, 3"),
    ("acc.yaml", "distributed_type: TPU\n", "distributed_type: not an accepted value"),
    ("acc2.yaml", "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: HALF\n",
     "fsdp_config.fsdp_sharding_strategy: not an accepted value (got 'HALF'); accepted: "
     "FULL_SHARD"),
    ("ax.yaml", "base_model: gpt2\nmicro_batch_size: 0\n",
     "micro_batch_size: expected a whole number >= 1 (got 0)"),
    ("ax2.yaml", "base_model: gpt2\nadapter: dora\n", "adapter: not an accepted value"),
    ("tt.yaml", "model:\n  _component_: torchtune.models.llama3_2.llama3_2_1b\ndtype: int4\n",
     "dtype: not an accepted value (got 'int4'); accepted: bf16, fp32, fp16"),
    ("lf.yaml", "model_name_or_path: gpt2\nfinetuning_type: full\nquantization_bit: 4\n",
     "quantization_bit: quantisation needs finetuning_type: lora"),
    ("args.json", '{"per_device_train_batch_size": -2}',
     "per_device_train_batch_size (-> training.micro_batch_size): must be a whole number"),
    ("list.yaml", "- a\n- b\n", "expected a mapping of keys at the top level"),
])
def test_malformed_files_exit_2_with_one_line(tmp_path, capsys, name, text, expect):
    f = tmp_path / name
    f.write_text(text)
    rc = main(["estimate", "--config", str(f), "--model", "gpt2"], engine=new_engine())
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert str(f) in err and expect in err, err


def test_missing_config_file_is_an_input_error(capsys):
    rc = main(["estimate", "--config", "/no/such.yaml", "--model", "gpt2"], engine=new_engine())
    err = capsys.readouterr().err
    assert rc == 2 and "/no/such.yaml: cannot read config file" in err


# -- exporters ------------------------------------------------------------------------------
_JOBS = {
    "deepspeed": {"model": "llama-3.2-1b",
                  "training": {"micro_batch_size": 4, "grad_accum_steps": 8, "dtype": "fp16"},
                  "parallelism": {"zero_stage": 3, "cpu_offload": "params", "dp": 4}},
    "accelerate": {"model": "llama-3.2-1b", "training": {"dtype": "bf16", "compile": True},
                   "parallelism": {"fsdp": "hybrid_shard", "cpu_offload": "params"},
                   "hardware": {"gpus_per_node": 4, "nodes": 2}},
    "axolotl": {"model": "llama-3.1-8b",
                "training": {"technique": "qlora", "quantization_bits": 4, "lora_rank": 64,
                             "lora_alpha": 128, "lora_target_modules": ["all-linear"],
                             "seq_len": 4096, "micro_batch_size": 2, "grad_accum_steps": 16,
                             "optimizer": "paged_adamw_8bit", "attention": "flash",
                             "activation_checkpointing": "full", "dtype": "bf16",
                             "loss": "fused", "compile": True, "activation_offload": True},
                "workload": {"epochs": 3, "max_steps": 500},
                "parallelism": {"zero_stage": 2, "cpu_offload": "optimizer"}},
    "training-args": {"model": "llama-3.2-1b",
                      "training": {"micro_batch_size": 8, "grad_accum_steps": 2, "dtype": "bf16",
                                   "activation_checkpointing": "full",
                                   "optimizer": "adamw_8bit", "compile": True, "loss": "fused"},
                      "workload": {"epochs": 2.5},
                      "parallelism": {"fsdp": "shard_grad_op", "cpu_offload": "params"}},
}
_VARIANTS = [
    ("deepspeed", {}), ("accelerate", {}),
    ("accelerate", {"parallelism": {"zero_stage": 2, "cpu_offload": "optimizer"},
                    "training": {"grad_accum_steps": 4}}),
    ("accelerate", {"parallelism": {"tp": 2, "pp": 2, "cpu_offload": "none"}}),
    ("axolotl", {}),
    ("axolotl", {"training": {"technique": "lora", "lora_target_modules": ["q_proj", "v_proj"],
                              "attention": "sdpa", "loss": "chunked"},
                 "parallelism": {"fsdp": "full_shard", "cpu_offload": "params"}}),
    ("training-args", {}),
    ("training-args", {"parallelism": {"zero_stage": 3, "cpu_offload": "none"}}),
]


def _value(job, path: str):
    registries = new_engine().registries
    if path == "model":
        return registries.models.canonical(job.model) or job.model
    section, name = path.split(".")
    obj = resolve_layout(job) if section == "layout" else getattr(job, section)
    value = getattr(obj, name)
    return registries.optimizers.canonical(value) if name == "optimizer" else value


@pytest.mark.parametrize("to,change", _VARIANTS, ids=[f"{t}-{i}" for i, (t, _) in
                                                    enumerate(_VARIANTS)])
def test_export_then_import_round_trips(tmp_path, to, change):
    from fmest.configs import merge_into

    data = json.loads(json.dumps(_JOBS[to]))
    for section, values in change.items():
        data[section] = {**{k: v for k, v in data.get(section, {}).items()
                            if not (section == "parallelism" and k in ("fsdp", "zero_stage"))},
                         **values}
    job = job_from_dict(data)
    files = export_job(job, to)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    main_file = next(iter(files))
    merge = load_configs([str(tmp_path / main_file)])
    assert merge.unresolved == {}
    back = job_from_dict(merge_into({"model": job.model}, merge.data))
    for path in EXPRESSIBLE[to]:
        assert _value(back, path) == _value(job, path), (to, path)


def test_export_rejects_what_the_format_cannot_say():
    job = job_from_dict({"model": "gpt2", "parallelism": {"fsdp": "full_shard"}})
    with pytest.raises(InputError, match="deepspeed cannot express FSDP"):
        export_job(job, "deepspeed")
    with pytest.raises(InputError, match="accepted: deepspeed"):
        export_job(job, "megatron")


def test_cli_export_stdout_and_output_dir(tmp_path, capsys):
    assert set(EXPORT_FORMATS) == {"deepspeed", "accelerate", "axolotl", "training-args"}
    rc = main(["export", "--to", "deepspeed", "--model", "gpt2", "--zero", "2",
               "--per-device-batch", "4", "--dp", "2"])
    out = capsys.readouterr().out
    assert rc == 0
    ds = json.loads(out)
    assert ds["train_batch_size"] == 8 and ds["zero_optimization"]["stage"] == 2
    rc = main(["export", "--to", "training-args", "--config",
               _d("torchtune", "3B_lora_single_device.yaml"), "--zero", "3",
               "--output-dir", str(tmp_path / "out")])
    assert rc == 0
    assert capsys.readouterr().out.count("wrote ") == 2
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["ds_config.json",
                                                                   "training_args.json"]
    args = json.loads((tmp_path / "out" / "training_args.json").read_text())
    assert args["per_device_train_batch_size"] == 4 and args["deepspeed"] == "ds_config.json"
    rc = main(["export", "--to", "accelerate", "--model", "gpt2", "--fsdp", "full_shard",
               "--gpus-per-node", "8"])
    out = capsys.readouterr().out
    assert rc == 0 and out.startswith("# Written by 'fmest export --to accelerate'")
    import yaml

    assert yaml.safe_load(out)["fsdp_config"]["fsdp_sharding_strategy"] == "FULL_SHARD"


def test_fsdp_backward_prefetch_is_mapped(tmp_path):
    from fmest.configs import load_configs

    f = tmp_path / "acc.yaml"
    f.write_text("distributed_type: FSDP\nnum_processes: 8\nfsdp_config:\n"
                 "  fsdp_sharding_strategy: FULL_SHARD\n  fsdp_backward_prefetch: BACKWARD_POST\n")
    merge = load_configs([str(f)], None)
    assert merge.data["parallelism"]["fsdp_backward_prefetch"] == "post"


def test_llama_factory_pure_bf16_keeps_lora_adapters_in_bf16(tmp_path):
    """LLaMA-Factory's init_adapter passes autocast_adapter_dtype = cast_trainable_params_to_fp32,
    False under pure_bf16: the LoRA adapters stay bf16 (lora_adapter_dtype compute); a full
    fine-tune under pure_bf16 gets no adapter dtype."""
    src = (tmp_path / "lf.yaml")
    src.write_text("model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct\nstage: sft\n"
                   "do_train: true\nfinetuning_type: lora\nlora_target: all\npure_bf16: true\n"
                   "cutoff_len: 2048\nper_device_train_batch_size: 1\n")
    t = load_configs([str(src)]).data["training"]
    assert (t["precision"], t["lora_adapter_dtype"]) == ("pure", "compute")
    src.write_text(src.read_text().replace("finetuning_type: lora", "finetuning_type: full")
                   .replace("lora_target: all\n", ""))
    t = load_configs([str(src)]).data["training"]
    assert t["precision"] == "pure" and "lora_adapter_dtype" not in t
