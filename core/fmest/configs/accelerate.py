"""Hugging Face accelerate config YAML (``accelerate config`` / ``default_config.yaml``).

Schema: https://huggingface.co/docs/accelerate/package_reference/cli#accelerate-config and
https://huggingface.co/docs/accelerate/usage_guides/fsdp ,
https://huggingface.co/docs/accelerate/usage_guides/deepspeed . ``num_processes`` is the total
number of processes (GPUs) over all ``num_machines``. :func:`map_fsdp_config` is shared with the
axolotl and TrainingArguments importers (keys with or without the ``fsdp_`` prefix).
"""

from __future__ import annotations

from fmest.configs._base import NOT_ESTIMATED, Sink, join

FORMAT = "accelerate"

SHARDING = {"FULL_SHARD": "full_shard", "SHARD_GRAD_OP": "shard_grad_op",
            "NO_SHARD": "no_shard", "HYBRID_SHARD": "hybrid_shard",
            "HYBRID_SHARD_ZERO2": "hybrid_shard",
            1: "full_shard", 2: "shard_grad_op", 3: "no_shard", 4: "hybrid_shard",
            5: "hybrid_shard"}

_PREFETCH = {"BACKWARD_PRE": "pre", "BACKWARD_POST": "post", "NO_PREFETCH": "none",
             "NONE": "none", "FALSE": "none"}

_FSDP_IGNORED = {
    "state_dict_type": "checkpoint format only",
    "version": "FSDP1 and FSDP2 shard the same bytes in fmest's model",
    "auto_wrap_policy": "wrapping granularity; fmest assumes one unit per transformer layer",
    "transformer_layer_cls_to_wrap": "wrapping granularity; fmest assumes one unit per "
                                     "transformer layer",
    "min_num_params": "wrapping granularity; fmest assumes one unit per transformer layer",
    "forward_prefetch": "prefetch overlaps communication; fmest does not model the extra "
                        "gathered unit",
    "use_orig_params": "implementation detail; same bytes per GPU",
    "sync_module_states": "initialisation only",
    "cpu_ram_efficient_loading": "loading only",
    "limit_all_gathers": "rate limiting; fmest does not model the extra gathered unit",
    "activation_checkpointing_policy": "fmest knows only whether checkpointing is on",
    "xla": "XLA is not modelled", "xla_fsdp_settings": "XLA is not modelled",
    "xla_fsdp_grad_ckpt": "XLA is not modelled", "xla_fsdp_v2": "XLA is not modelled",
    "mixed_precision_policy": "the dtype comes from mixed_precision / bf16",
}


def map_fsdp_config(cfg: dict, sink: Sink, prefix: str) -> None:
    """FSDP options: sharding strategy (names or accelerate's numbers 1-5), FSDP2's
    ``reshard_after_forward``, parameter offload, activation checkpointing."""
    for raw, value in cfg.items():
        key = join(prefix, raw)
        name = raw[len("fsdp_"):] if raw.startswith("fsdp_") else raw
        if name == "sharding_strategy":
            v = value
            if isinstance(v, str) and v.strip().isdigit():
                v = int(v)
            if isinstance(v, str):
                v = v.strip().upper()
                v = v.split(".")[-1]  # ShardingStrategy.FULL_SHARD
            sink.set("parallelism.fsdp", sink.choice(key, v, SHARDING), key)
            if v in ("HYBRID_SHARD_ZERO2", 5):
                sink.unmodelled(key, "HYBRID_SHARD_ZERO2 is estimated as hybrid_shard (fmest "
                                "has no ZeRO-2 hybrid variant; parameters counted as sharded)")
        elif name == "reshard_after_forward":
            if isinstance(value, str) and value.strip().upper() in SHARDING:
                v = value.strip().upper()
                sink.set("parallelism.fsdp", SHARDING[v], key)
            elif sink.bool_(key, value):
                sink.set("parallelism.fsdp", "full_shard", key)
            else:
                sink.set("parallelism.fsdp", "shard_grad_op", key)
        elif name in ("offload_params", "cpu_offload"):
            sink.set("parallelism.cpu_offload", "params" if sink.bool_(key, value) else "none",
                     key)
        elif name == "activation_checkpointing":
            sink.set("training.activation_checkpointing",
                     "full" if sink.bool_(key, value) else "none", key)
        elif name in ("backward_prefetch", "backward_prefetch_policy"):
            v = "NONE" if value is None else str(value).strip().upper().split(".")[-1]
            sink.set("parallelism.fsdp_backward_prefetch",
                     sink.choice(key, v, _PREFETCH), key)
        elif name in ("forward_prefetch", "limit_all_gathers") and isinstance(value, bool) \
                and value is (name == "forward_prefetch"):
            # FSDP1 forward_prefetch issues the next all-gather before the current forward
            # runs; limit_all_gathers=False lets the CPU run ahead with more gathers in flight
            # (torch/distributed/fsdp/fully_sharded_data_parallel.py docs)
            sink.unmodelled(key, f"{value}: more unsharded units in flight than the two fmest "
                            "counts (current + prefetched)")
        elif name in _FSDP_IGNORED:
            sink.ignore(key, _FSDP_IGNORED[name])
        else:
            sink.ignore(key, "not used by fmest")


_DISTRIBUTED = ("NO", "MULTI_GPU", "FSDP", "DEEPSPEED", "MEGATRON_LM")
_MIXED = {"no": None, "fp16": "fp16", "bf16": "bf16", "fp8": "fp8"}
_DS_OFFLOAD = {"none": "none", "cpu": "cpu", "nvme": "nvme"}
_IGNORED = {
    "compute_environment": "where the job runs, not what it stores",
    "debug": "debug checks only", "machine_rank": "per-machine launch setting",
    "main_process_ip": "launch setting", "main_process_port": "launch setting",
    "main_training_function": "launch setting", "rdzv_backend": "launch setting",
    "same_network": "launch setting", "enable_cpu_affinity": "launch setting",
    "gpu_ids": "which local GPUs; their count is num_processes",
    "tpu_env": "TPUs are not modelled", "tpu_use_cluster": "TPUs are not modelled",
    "tpu_use_sudo": "TPUs are not modelled", "tpu_name": "TPUs are not modelled",
    "tpu_zone": "TPUs are not modelled", "commands": "launch setting",
    "command_file": "launch setting", "downcast_bf16": "TPU setting only",
    "ipex_config": "CPU/XPU setting only", "mpirun_config": "CPU launch setting",
}


def _deepspeed_config(cfg: dict, sink: Sink, prefix: str) -> None:
    from fmest.configs import deepspeed

    offload: dict[str, tuple[str, str]] = {}
    for name, value in cfg.items():
        key = join(prefix, name)
        if name == "deepspeed_config_file":
            if value in (None, "", "none"):
                sink.ignore(key, "no DeepSpeed file")
            else:
                sink.include(key, value, deepspeed.FORMAT)
        elif name == "zero_stage":
            sink.set("parallelism.zero_stage", sink.choice(key, value, {0: 0, 1: 1, 2: 2, 3: 3}),
                     key)
        elif name in ("offload_optimizer_device", "offload_param_device"):
            offload[name] = (sink.choice(key, value, _DS_OFFLOAD), key)
            if offload[name][0] == "nvme":
                sink.ignore(key, "nvme is modelled like cpu: off the GPU either way")
        elif name == "gradient_accumulation_steps":
            if str(value).strip().lower() == "auto":
                sink.auto("training.grad_accum_steps", key)
            else:
                sink.set("training.grad_accum_steps", sink.int_(key, value), key)
        elif name in ("gradient_clipping",):
            sink.ignore(key, "an optimisation hyperparameter")
        elif name in ("zero3_init_flag", "zero3_save_16bit_model", "deepspeed_multinode_launcher",
                      "deepspeed_hostfile", "deepspeed_exclusion_filter",
                      "deepspeed_inclusion_filter", "offload_optimizer_nvme_path",
                      "offload_param_nvme_path", "deepspeed_moe_layer_cls_names"):
            sink.ignore(key, "initialisation, saving or launch setting; same bytes per GPU")
        else:
            sink.ignore(key, "not used by fmest")
    par = offload.get("offload_param_device")
    opt = offload.get("offload_optimizer_device")
    if par and par[0] != "none":
        sink.set("parallelism.cpu_offload", "params", par[1])
    elif opt and opt[0] != "none":
        sink.set("parallelism.cpu_offload", "optimizer", opt[1])
    elif (named := par or opt) is not None:
        sink.set("parallelism.cpu_offload", "none", named[1])


def _megatron(cfg: dict, sink: Sink, prefix: str) -> None:
    for name, value in cfg.items():
        key = join(prefix, name)
        if name == "megatron_lm_tp_degree":
            sink.set("parallelism.tp", sink.int_(key, value), key)
        elif name == "megatron_lm_pp_degree":
            sink.set("parallelism.pp", sink.int_(key, value), key)
        elif name == "megatron_lm_sequence_parallelism":
            sink.set("parallelism.sequence_parallel", sink.bool_(key, value), key)
        elif name == "megatron_lm_recompute_activations":
            sink.set("training.activation_checkpointing",
                     "selective" if sink.bool_(key, value) else "none", key)
        elif name == "megatron_lm_num_micro_batches":
            sink.set("training.grad_accum_steps", sink.int_(key, value), key)
        elif name == "megatron_lm_use_distributed_optimizer":
            sink.set_when_true("parallelism.zero_stage", 1, key, value, "false: optimizer states replicated (fmest's default)")
        else:
            sink.ignore(key, NOT_ESTIMATED)


def map_config(doc: dict, sink: Sink) -> None:
    sink.set("training.stack", "deepspeed" if doc.get("deepspeed_config") or str(
        doc.get("distributed_type", "")).upper() == "DEEPSPEED" else "hf-trainer",
        "(accelerate config)")
    world = nodes = None
    dist = None
    for name, value in doc.items():
        key = name
        if name == "distributed_type":
            dist = sink.choice(key, str(value).split(".")[-1], {d: d for d in _DISTRIBUTED})
            if dist == "MULTI_GPU" or dist == "NO":
                sink.set("parallelism.zero_stage", 0, key)
                sink.set("parallelism.fsdp", "none", key)
            elif dist == "FSDP":
                sink.set("parallelism.zero_stage", 0, key)
                if "fsdp_config" not in doc:
                    sink.set("parallelism.fsdp", "full_shard", key)
            elif dist == "DEEPSPEED":
                sink.set("parallelism.fsdp", "none", key)  # the stage: deepspeed_config
            else:
                sink.ignore(key, "MEGATRON_LM: tp/pp come from megatron_lm_config")
        elif name == "num_processes":
            world = (sink.int_(key, value), key)
        elif name == "num_machines":
            nodes = (sink.int_(key, value), key)
        elif name == "mixed_precision":
            dt = sink.choice(key, value, _MIXED)
            if dt is None:
                sink.ignore(key, "no: no autocast; the dtype is how the script loads the model "
                            "(fmest's default unless another key sets it)")
            else:
                sink.set("training.dtype", dt, key)
                # FSDP's MixedPrecision and torch autocast keep fp32 parameters; DeepSpeed keeps
                # low-precision parameters plus an fp32 master copy.
                ds = str(doc.get("distributed_type", "")).upper().endswith("DEEPSPEED")
                sink.set("training.precision", "master" if ds else "amp", key)
        elif name == "fsdp_config":
            if value:
                map_fsdp_config(sink.mapping(key, value), sink, key)
                if "FSDP" in str(doc.get("distributed_type", "")).upper() and \
                        "parallelism.fsdp" not in sink.values:
                    sink.set("parallelism.fsdp", "full_shard", "distributed_type")
            else:
                sink.ignore(key, "empty")
        elif name == "deepspeed_config":
            if value:
                _deepspeed_config(sink.mapping(key, value), sink, key)
            else:
                sink.ignore(key, "empty")
        elif name == "megatron_lm_config":
            if value:
                _megatron(sink.mapping(key, value), sink, key)
            else:
                sink.ignore(key, "empty")
        elif name in ("dynamo_config", "dynamo_backend"):
            backend = value.get("dynamo_backend", "NO") if isinstance(value, dict) else value
            sink.set("training.compile", str(backend).strip().upper() not in ("NO", "NONE", ""),
                     join(key, "dynamo_backend") if isinstance(value, dict) else key)
            if isinstance(value, dict):
                for k in value:
                    if k != "dynamo_backend":
                        sink.ignore(join(key, k), "compile details; fmest only knows whether "
                                    "the model is compiled")
        elif name == "use_cpu":
            if sink.bool_(key, value):
                raise sink.error(key, "CPU-only training is not estimated by fmest",
                                 value=value, accepted=("false",))
            sink.ignore(key, "false: GPUs are used")
        elif name == "parallelism_config":
            for k, v in sink.mapping(key, value).items():
                kk = join(key, k)
                if k.endswith("tp_size"):
                    sink.set("parallelism.tp", sink.int_(kk, v), kk)
                elif k.endswith("cp_size"):
                    sink.set("parallelism.cp", sink.int_(kk, v), kk)
                else:
                    sink.ignore(kk, "dp sizes follow from num_processes and tp/cp")
        elif name in _IGNORED:
            sink.ignore(key, _IGNORED[name])
        else:
            sink.ignore(key, "not used by fmest")
    n = nodes[0] if nodes else 1
    if nodes:
        sink.set("hardware.nodes", n, nodes[1])
    if world:
        w, key = world
        if w % n:
            raise sink.error(key, f"must be a multiple of num_machines ({n}): it is the total "
                             "number of processes over all machines", value=w)
        sink.set("hardware.gpus_per_node", w // n, key + (" / num_machines" if nodes else ""))
