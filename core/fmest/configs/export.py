"""Exporters: write a job as the config file(s) of a training tool (``fmest export --to ...``).

Each format expresses only some job fields (:data:`EXPRESSIBLE`); importing what
:func:`export_job` writes gives back the same values for those fields (tests/test_configs.py).
YAML outputs list the fields the format cannot carry in a header comment.
"""

from __future__ import annotations

import json
from typing import Any

from fmest.errors import InputError
from fmest.job import Job, resolve_layout

EXPORT_FORMATS = ("deepspeed", "accelerate", "axolotl", "training-args")

# Job fields each format carries (round-trip tested).
EXPRESSIBLE = {
    "deepspeed": ("training.micro_batch_size", "training.grad_accum_steps", "training.dtype",
                  "parallelism.zero_stage", "parallelism.cpu_offload", "layout.dp"),
    "accelerate": ("training.dtype", "parallelism.zero_stage", "parallelism.fsdp",
                   "parallelism.cpu_offload", "hardware.nodes", "layout.gpus_per_node",
                   "training.compile"),
    "axolotl": ("model", "training.technique", "training.lora_rank", "training.lora_alpha",
                "training.lora_target_modules", "training.quantization_bits", "training.seq_len",
                "training.micro_batch_size", "training.grad_accum_steps", "training.optimizer",
                "training.attention", "training.activation_checkpointing", "training.dtype",
                "training.loss", "training.compile", "training.activation_offload",
                "workload.epochs", "workload.max_steps",
                "parallelism.fsdp", "parallelism.zero_stage", "parallelism.cpu_offload"),
    "training-args": ("training.micro_batch_size", "training.grad_accum_steps", "training.dtype",
                      "training.activation_checkpointing", "training.optimizer",
                      "training.compile", "training.loss", "workload.epochs",
                      "workload.max_steps", "parallelism.fsdp", "parallelism.zero_stage",
                      "parallelism.cpu_offload"),
}

# fmest optimizer name -> the HF ``optim`` name (also axolotl's ``optimizer``)
_HF_OPTIM = {"adamw": "adamw_torch", "adamw_torch_fused": "adamw_torch_fused",
             "adamw_8bit": "adamw_bnb_8bit", "paged_adamw_8bit": "paged_adamw_8bit",
             "paged_adamw": "paged_adamw_32bit", "adafactor": "adafactor", "sgd": "sgd",
             "lion": "lion_32bit", "lion_8bit": "lion_8bit"}
_DS_FILE = "ds_config.json"


def _canonical_optimizer(name: str) -> str:
    """The optimizer name as given: :func:`export_job` has already replaced it by the
    registry's canonical name."""
    return name.strip().lower()


def _hf_optim(job: Job) -> str:
    opt = _canonical_optimizer(job.training.optimizer)
    if opt == "adamw" and job.training.optimizer_impl == "fused":
        return "adamw_torch_fused"
    return _HF_OPTIM.get(opt, job.training.optimizer)


def _model_id(job: Job) -> str:
    """The model as :func:`export_job` resolved it (a preset's Hub id; anything else as
    given)."""
    return job.model


def _resolved(job: Job, registries) -> Job:
    """``job`` with the optimizer and model named as the registries name them (a registered
    preset's canonical name is its Hub id, which is what the tools load)."""
    import attrs

    opt = registries.optimizers.find(job.training.optimizer)
    model = registries.models.canonical(job.model) or job.model
    training = attrs.evolve(job.training, optimizer=opt.name) if opt is not None \
        else job.training
    return attrs.evolve(job, model=model, training=training)


def _lora_defaults(job: Job, registries) -> Job:
    """``job`` with empty LoRA ``target_modules`` made PEFT's default for its model type, so the
    exported file names the modules the estimate adapted (fmest.physics.counting.resolve_lora_targets)."""
    from fmest.physics.counting import LORA_TECHNIQUES, resolve_lora_targets

    if job.training.lora_target_modules or job.training.technique not in LORA_TECHNIQUES:
        return job
    if job.model_config is not None:
        from fmest.models.hf import spec_from_hf_config

        spec = spec_from_hf_config(dict(job.model_config), name=job.model,
                                   source="inline model_config")
    else:
        from fmest.models.local import resolve_model

        spec = resolve_model(job.model, presets=registries.models)
    return resolve_lora_targets(job, spec)


def _check_sharding(job: Job, to: str, *, fsdp: bool = True, zero: bool = True) -> None:
    par = job.parallelism
    if par.fsdp != "none" and par.zero_stage:
        raise InputError("parallelism", "give either zero_stage or fsdp, not both")
    if not fsdp and par.fsdp != "none":
        raise InputError("parallelism.fsdp", f"{to} cannot express FSDP; use zero_stage "
                         "(full_shard ~ 3, shard_grad_op ~ 2)", value=par.fsdp)
    if not zero and par.zero_stage:
        raise InputError("parallelism.zero_stage", f"{to} cannot express ZeRO",
                         value=par.zero_stage)


def _layout(job: Job):
    try:
        return resolve_layout(job)
    except InputError:
        return None


def deepspeed_dict(job: Job) -> dict:
    """A DeepSpeed config: batch sizes (``train_batch_size`` = micro x accum x dp), ZeRO stage,
    offload, bf16/fp16."""
    _check_sharding(job, "deepspeed", fsdp=False)
    tr, par = job.training, job.parallelism
    lay = _layout(job)
    dp = lay.dp if lay else (par.dp or 1)
    out: dict[str, Any] = {
        "train_batch_size": tr.micro_batch_size * tr.grad_accum_steps * dp,
        "train_micro_batch_size_per_gpu": tr.micro_batch_size,
        "gradient_accumulation_steps": tr.grad_accum_steps,
        "bf16": {"enabled": tr.dtype == "bf16"},
        "fp16": {"enabled": tr.dtype == "fp16"},
    }
    zero: dict[str, Any] = {"stage": par.zero_stage}
    if par.cpu_offload in ("optimizer", "params"):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if par.cpu_offload == "params":
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    out["zero_optimization"] = zero
    opt = _canonical_optimizer(tr.optimizer)
    if opt in ("adamw", "adamw_torch_fused"):
        out["optimizer"] = {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}}
    elif opt == "lion":
        out["optimizer"] = {"type": "Lion", "params": {"lr": "auto"}}
    return out


def _not_carried(job: Job, to: str) -> list[str]:
    """``field=value`` for the job's non-default fields that format ``to`` cannot carry."""
    from fmest.convert import job_to_dict

    carried = set(EXPRESSIBLE[to])
    default = job_to_dict(Job(model=job.model))
    left = []
    for section, values in job_to_dict(job).items():
        if section not in default:  # model_config: an inline config no tool's file carries
            left.append(f"{section}=(inline, {len(values)} keys)")
            continue
        if isinstance(values, dict):
            for name, value in values.items():
                if f"{section}.{name}" not in carried and value != default[section][name]:
                    left.append(f"{section}.{name}={value}")
    return left


def _yaml(data: dict, job: Job, to: str) -> str:
    import yaml

    lines = [f"# Written by 'fmest export --to {to}'. Not expressible in this file (give them "
             "to the tool yourself):"]
    line = "#  "
    for item in _not_carried(job, to) or ["none"]:
        if len(line) + len(item) > 96:
            lines.append(line.rstrip(","))
            line = "#  "
        line += f" {item},"
    lines.append(line.rstrip(","))
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    return "\n".join(lines) + "\n" + body


def _accelerate(job: Job) -> dict[str, str]:
    _check_sharding(job, "accelerate")
    tr, par = job.training, job.parallelism
    lay = _layout(job)
    world = lay.world_size if lay else 1
    nodes = lay.nodes if lay else job.hardware.nodes
    if par.tp > 1 or par.pp > 1:
        dist = "MEGATRON_LM"
    elif par.fsdp != "none":
        dist = "FSDP"
    elif par.zero_stage or par.cpu_offload != "none":
        dist = "DEEPSPEED"
    else:
        dist = "MULTI_GPU" if world > 1 else "NO"
    data: dict[str, Any] = {"compute_environment": "LOCAL_MACHINE", "distributed_type": dist,
                            "machine_rank": 0, "main_training_function": "main",
                            "mixed_precision": tr.dtype if tr.dtype != "fp32" else "no",
                            "num_machines": nodes, "num_processes": world, "use_cpu": False}
    if dist == "FSDP":
        data["fsdp_config"] = {
            "fsdp_sharding_strategy": par.fsdp.upper(),
            "fsdp_offload_params": par.cpu_offload != "none",
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_activation_checkpointing": tr.activation_checkpointing != "none"}
    elif dist == "DEEPSPEED":
        dev = {"none": ("none", "none"), "optimizer": ("cpu", "none"),
               "params": ("cpu", "cpu")}[par.cpu_offload]
        data["deepspeed_config"] = {"zero_stage": par.zero_stage,
                                    "offload_optimizer_device": dev[0],
                                    "offload_param_device": dev[1],
                                    "gradient_accumulation_steps": tr.grad_accum_steps,
                                    "zero3_init_flag": par.zero_stage == 3}
    elif dist == "MEGATRON_LM":
        data["megatron_lm_config"] = {"megatron_lm_tp_degree": par.tp,
                                      "megatron_lm_pp_degree": par.pp,
                                      "megatron_lm_sequence_parallelism": par.sequence_parallel,
                                      "megatron_lm_num_micro_batches": tr.grad_accum_steps}
    if tr.compile:
        data["dynamo_config"] = {"dynamo_backend": "INDUCTOR"}
    return {"accelerate_config.yaml": _yaml(data, job, "accelerate")}


def _axolotl(job: Job) -> dict[str, str]:
    tr, par, wl = job.training, job.parallelism, job.workload
    data: dict[str, Any] = {"base_model": _model_id(job)}
    if tr.technique != "full":
        data["adapter"] = "qlora" if tr.technique == "qlora" and tr.quantization_bits == 4 \
            else "lora"
        if tr.technique == "qlora":
            data["load_in_4bit" if tr.quantization_bits == 4 else "load_in_8bit"] = True
        data["lora_r"] = tr.lora_rank
        data["lora_alpha"] = tr.lora_alpha
        if set(tr.lora_target_modules) & {"all-linear", "all_linear", "linear"}:
            data["lora_target_linear"] = True
        else:
            data["lora_target_modules"] = list(tr.lora_target_modules)
    data.update({"sequence_len": tr.seq_len, "micro_batch_size": tr.micro_batch_size,
                 "gradient_accumulation_steps": tr.grad_accum_steps,
                 "num_epochs": wl.epochs, "optimizer": _hf_optim(job)})
    if wl.max_steps:
        data["max_steps"] = wl.max_steps
    attn = {"flash": "flash_attention", "sdpa": "sdp_attention", "eager": "eager_attention"}
    data[attn[tr.attention]] = True
    data["gradient_checkpointing"] = tr.activation_checkpointing != "none"
    if tr.dtype in ("bf16", "fp16"):
        data[tr.dtype] = True
    elif tr.dtype == "fp8":
        data["fp8"] = True
    if tr.loss == "fused":
        data["plugins"] = ["axolotl.integrations.liger.LigerPlugin"]
        data["liger_fused_linear_cross_entropy"] = True
    elif tr.loss == "chunked":
        data["chunked_cross_entropy"] = True
    if tr.compile:
        data["torch_compile"] = True
    if tr.activation_offload:
        data["activation_offloading"] = True
    files: dict[str, str] = {}
    _check_sharding(job, "axolotl")
    if par.fsdp != "none":
        data["fsdp"] = [par.fsdp, "auto_wrap"] + (["offload"] if par.cpu_offload != "none"
                                                  else [])
        data["fsdp_config"] = {"fsdp_offload_params": par.cpu_offload != "none",
                               "fsdp_state_dict_type": "FULL_STATE_DICT"}
    elif par.zero_stage or par.cpu_offload != "none":
        data["deepspeed"] = _DS_FILE
        files[_DS_FILE] = json.dumps(deepspeed_dict(job), indent=2) + "\n"
    files["axolotl.yaml"] = _yaml(data, job, "axolotl")
    return dict(sorted(files.items(), key=lambda kv: kv[0] != "axolotl.yaml"))


def _training_args(job: Job) -> dict[str, str]:
    tr, par, wl = job.training, job.parallelism, job.workload
    _check_sharding(job, "training-args")
    data: dict[str, Any] = {
        "output_dir": "output",
        "per_device_train_batch_size": tr.micro_batch_size,
        "gradient_accumulation_steps": tr.grad_accum_steps,
        "num_train_epochs": wl.epochs, "max_steps": wl.max_steps or -1,
        "bf16": tr.dtype == "bf16", "fp16": tr.dtype == "fp16",
        "gradient_checkpointing": tr.activation_checkpointing != "none",
        "optim": _hf_optim(job), "torch_compile": tr.compile,
        "use_liger_kernel": tr.loss == "fused",
    }
    files: dict[str, str] = {}
    if par.fsdp != "none":
        data["fsdp"] = " ".join([par.fsdp, "auto_wrap"] + (["offload"] if par.cpu_offload
                                                           != "none" else []))
    elif par.zero_stage or par.cpu_offload != "none":
        data["deepspeed"] = _DS_FILE
        files[_DS_FILE] = json.dumps(deepspeed_dict(job), indent=2) + "\n"
    files["training_args.json"] = json.dumps(data, indent=2) + "\n"
    return dict(sorted(files.items(), key=lambda kv: kv[0] != "training_args.json"))


def export_job(job: Job, to: str, registries=None) -> dict[str, str]:
    """The config file(s) of tool ``to`` for ``job``: ``{file name: text}``, the main file first
    (a DeepSpeed file it names comes second, to be written beside it). Names are read from
    ``registries`` (default: the installed plugins'), so a plugin's presets and optimizers
    export too."""
    if registries is None:
        from fmest.engine import default_engine

        registries = default_engine().registries
    job = _resolved(_lora_defaults(job, registries), registries)
    if to == "deepspeed":
        return {_DS_FILE: json.dumps(deepspeed_dict(job), indent=2) + "\n"}
    if to == "accelerate":
        return _accelerate(job)
    if to == "axolotl":
        return _axolotl(job)
    if to == "training-args":
        return _training_args(job)
    raise InputError("--to", "unknown export format", value=to, accepted=EXPORT_FORMATS)
