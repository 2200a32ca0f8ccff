"""DeepSpeed JSON configs.

Schema: https://www.deepspeed.ai/docs/config-json/ . ``"auto"`` (the transformers/accelerate
integration's placeholder) sets nothing here: the value comes from another file, or is reported
as unresolved. ``train_batch_size`` must equal micro-batch x accumulation x data-parallel GPUs;
it is checked (or the missing factor derived) once all files are merged, see
:func:`fmest.configs.load_configs`, and again with the flags' GPU count when the job is built
(:func:`fmest.inputs.build_job`); with no GPU count anywhere it is reported unresolved.
"""

from __future__ import annotations

from typing import Any

from fmest.configs._base import HYPERPARAM, LOGGING, NOT_ESTIMATED, Sink, join

FORMAT = "deepspeed"

_OPTIMIZERS = {"adam": "adamw", "adamw": "adamw", "fusedadam": "adamw", "cpuadam": "adamw",
               "deepspeedcpuadam": "adamw", "lion": "lion", "fusedlion": "lion",
               "cpulion": "lion", "sgd": "sgd", "adafactor": "adafactor", "adagrad": "adagrad",
               "cpuadagrad": "adagrad", "deepspeedcpuadagrad": "adagrad",
               # FusedLamb (deepspeed/ops/lamb/fused_lamb.py) keeps Adam's exp_avg and
               # exp_avg_sq: two fp32 states
               "lamb": "adamw", "fusedlamb": "adamw",
               "onebitadam": "adamw", "zerooneadam": "adamw", "onebitlamb": "adamw",
               "muadam": "adamw", "muadamw": "adamw", "musgd": "sgd", "muon": "sgd_momentum"}
# what the communication-compressing optimizers keep beyond the two Adam states
# (deepspeed/runtime/fp16/onebit/{adam,zoadam,lamb}.py at deepspeedai/DeepSpeed edaa7221)
_EXTRA_STATES = {
    "onebitadam": "1-bit Adam's error-feedback buffers worker_error (one fp32 copy of the "
                  "parameters) and server_error (1/dp of it), onebit/adam.py, are not counted",
    "zerooneadam": "0/1 Adam's error-feedback buffers worker_error (one fp32 copy of the "
                   "parameters) and server_error (1/dp of it), onebit/zoadam.py, are not "
                   "counted",
    "onebitlamb": "1-bit LAMB's exp_avg_sq_fresh (a third fp32 state) and its error-feedback "
                  "buffers worker_error/server_error, onebit/lamb.py, are not counted",
    "muon": "Muon keeps a momentum buffer for the hidden matrices and Adam states for the "
            "rest; estimated as one momentum buffer for all parameters, without its "
            "Newton-Schulz temporaries",
}

# ZeRO buffer keys -> job field (deepspeed/runtime/zero/config.py at deepspeedai/DeepSpeed
# edaa7221267243c7be7fb49c5d5f5c4fb97b4641; the ``stage3_`` spellings are pydantic aliases)
_BUFFER_FIELDS = {
    "reduce_bucket_size": "parallelism.zero_reduce_bucket_elems",
    "stage3_prefetch_bucket_size": "parallelism.zero3_prefetch_bucket_elems",
    "prefetch_bucket_size": "parallelism.zero3_prefetch_bucket_elems",
    "stage3_max_live_parameters": "parallelism.zero3_max_live_params",
    "max_live_parameters": "parallelism.zero3_max_live_params",
    "sub_group_size": "parallelism.zero3_sub_group_elems",
}
_SWITCH_FIELDS = {"overlap_comm": "parallelism.zero_overlap_comm",
                  "contiguous_gradients": "parallelism.zero_contiguous_gradients"}
_BUFFER_UNMODELLED = {
    "stage3_param_persistence_threshold": "parameters smaller than this stay unpartitioned on "
    "every GPU (stage3.py persistent parameters); estimated as all parameters sharded",
    "param_persistence_threshold": "parameters smaller than this stay unpartitioned on every "
    "GPU; estimated as all parameters sharded",
    "model_persistence_threshold": "caps the unpartitioned persistent parameters; estimated as "
    "all parameters sharded",
    "stage3_model_persistence_threshold": "caps the unpartitioned persistent parameters; "
    "estimated as all parameters sharded",
}
_BUFFER_IGNORED = {
    # utils.all_gather_dp_groups: all_gather_into_tensor writes straight into the flat
    # parameter buffer; the bucket only splits the legacy all_gather into shards (views)
    "allgather_bucket_size": "splits the stage 1/2 parameter all-gather into shards that are "
    "views of the flat parameter buffer (deepspeed/runtime/utils.py all_gather_dp_groups): no "
    "buffer of its own",
    "stage3_max_reuse_distance": "when a released parameter is kept for reuse; bounded by "
    "stage3_max_live_parameters",
    "max_reuse_distance": "when a released parameter is kept for reuse; bounded by "
    "stage3_max_live_parameters",
}
_ZERO_IGNORED = {
    "reduce_scatter": "collective choice; same bytes per GPU",
    "allgather_partitions": "collective choice; same bytes per GPU",
    "round_robin_gradients": "CPU-offload scheduling; same bytes per GPU",
    "load_from_fp32_weights": "checkpoint loading only",
    "elastic_checkpoint": "checkpoint format only",
    "stage3_gather_16bit_weights_on_model_save": "checkpoint saving only",
    "gather_16bit_weights_on_model_save": "checkpoint saving only",
    "ignore_unused_parameters": "error handling only",
    "legacy_stage1": "implementation choice; same bytes per GPU",
    "zero_hpz_partition_size": "ZeRO++ hierarchical partitioning has no fmest field",
    "zero_quantized_weights": "ZeRO++ quantized communication has no fmest field",
    "zero_quantized_gradients": "ZeRO++ quantized communication has no fmest field",
    "zero_quantized_nontrainable_weights": "ZeRO++ quantized weights have no fmest field",
    "mics_shard_size": "MiCS sharding has no fmest field",
    "mics_hierarchical_params_gather": "MiCS sharding has no fmest field",
    "memory_efficient_linear": "implementation detail of ZeRO-3 linear layers",
    "round_robin": "CPU-offload scheduling; same bytes per GPU",
    "use_multi_rank_bucket_allreduce": "collective choice; same bytes per GPU",
    "log_trace_cache_warnings": "logging only",
}
#: keys that change memory or time but have no fmest field: warned, not ignored
_ZERO_UNMODELLED = {"zero_hpz_partition_size", "zero_quantized_weights",
                    "zero_quantized_gradients", "zero_quantized_nontrainable_weights",
                    "mics_shard_size", "mics_hierarchical_params_gather"}
_TOP_UNMODELLED = {"amp", "data_types", "compression_training", "sparse_attention",
                   "sequence_parallel_size", "communication_data_type"}
_TOP_IGNORED = {
    "gradient_clipping": HYPERPARAM, "scheduler": HYPERPARAM,
    "prescale_gradients": HYPERPARAM, "gradient_predivide_factor": HYPERPARAM,
    "steps_per_print": LOGGING, "wall_clock_breakdown": LOGGING, "dump_state": LOGGING,
    "memory_breakdown": LOGGING, "tensorboard": LOGGING, "wandb": LOGGING, "csv_monitor": LOGGING,
    "comet": LOGGING, "flops_profiler": LOGGING, "comms_logger": LOGGING, "timers": LOGGING,
    "zero_allow_untested_optimizer": "a safety switch only",
    "zero_force_ds_cpu_optimizer": "which CPU optimizer runs; same bytes per GPU",
    "communication_data_type": "collective dtype; fmest sizes communication in the compute dtype",
    "seq_parallel_communication_data_type": "collective dtype only",
    "checkpoint": "checkpoint format only", "amp": "apex AMP is not modelled; use bf16/fp16",
    "data_types": "grad_accum_dtype has no fmest field; gradients are sized by the precision "
                  "policy",
    "autotuning": "tuning run settings", "elasticity": "elastic scheduling settings",
    "compression_training": "compression is not modelled", "data_efficiency": NOT_ESTIMATED,
    "curriculum_learning": NOT_ESTIMATED, "sparse_attention": "sparse attention is not modelled",
    "aio": "NVMe I/O tuning only", "sparse_gradients": NOT_ESTIMATED,
    "sequence_parallel_size": "DeepSpeed-Ulysses has no fmest field (--cp models ring "
                              "attention context parallelism)",
    "pipeline": "pipeline settings live in the training script; use --pp",
    "activation_checkpointing": "configures deepspeed.checkpointing for models that call it "
                                "(Megatron-DeepSpeed); it does not turn checkpointing on: use "
                                "gradient_checkpointing or --grad-checkpoint",
}
_OFFLOAD_DEVICES = {"none": "none", "cpu": "cpu", "nvme": "nvme"}


def _is_auto(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lower() == "auto"


def _offload(zero: dict, sink: Sink, prefix: str) -> None:
    """``offload_param`` wins over ``offload_optimizer`` (it moves both off the GPU)."""
    devices: dict[str, tuple[str, str]] = {}
    for block, what in (("offload_optimizer", "optimizer"), ("offload_param", "params")):
        if block not in zero:
            continue
        key = join(prefix, block)
        cfg = zero[block]
        if cfg is None:
            sink.ignore(key, "null: no offload")
            continue
        cfg = sink.mapping(key, cfg)
        for name, value in cfg.items():
            k = join(key, name)
            if name == "device":
                dev = sink.choice(k, value, _OFFLOAD_DEVICES)
                devices[what] = (dev, k)
                if dev == "nvme":
                    sink.ignore(k, "nvme is modelled like cpu: off the GPU either way")
            elif name in ("ratio",):
                sink.unmodelled(k, "partial offload has no fmest field; estimated as full "
                                "offload")
            else:
                sink.ignore(k, "host-side offload setting; per-GPU memory unchanged")
    for legacy, moves in (("cpu_offload", "optimizer"), ("cpu_offload_params", "params"),
                          ("cpu_offload_use_pin_memory", None)):
        if legacy in zero:
            k = join(prefix, legacy)
            if moves is None:
                sink.ignore(k, "host-side offload setting; per-GPU memory unchanged")
            else:
                devices.setdefault(moves, ("cpu" if sink.bool_(k, zero[legacy]) else "none", k))
    if "params" in devices and devices["params"][0] != "none":
        # fmest's "params" offload moves the optimizer state too (ZeRO-Infinity): both keys
        where = devices["params"][1]
        if "optimizer" in devices and devices["optimizer"][0] != "none":
            where = f"{devices['optimizer'][1]}+{where}"
        sink.set("parallelism.cpu_offload", "params", where)
    elif "optimizer" in devices and devices["optimizer"][0] != "none":
        sink.set("parallelism.cpu_offload", "optimizer", devices["optimizer"][1])
    elif devices:
        key = next(iter(devices.values()))[1]
        sink.set("parallelism.cpu_offload", "none", key)


def _zero(zero: Any, sink: Sink, prefix: str) -> None:
    zero = sink.mapping(prefix, zero)
    handled = {"offload_optimizer", "offload_param", "cpu_offload", "cpu_offload_params",
               "cpu_offload_use_pin_memory"}
    _offload(zero, sink, prefix)
    for name, value in zero.items():
        key = join(prefix, name)
        if name in handled:
            continue
        if name == "stage":
            sink.set("parallelism.zero_stage", sink.choice(key, value, {0: 0, 1: 1, 2: 2, 3: 3}),
                     key)
        elif name in _BUFFER_FIELDS and _is_auto(value):
            # transformers' HfDeepSpeedConfig fills reduce_bucket_size = hidden^2,
            # stage3_prefetch_bucket_size = 0.9 x hidden^2 from the model (integrations/
            # deepspeed.py); fmest has no hidden size here, so DeepSpeed's default is used
            sink.unmodelled(key, "\"auto\" (hidden_size^2 in the HF integration): sized with "
                            "DeepSpeed's default instead")
        elif name in _BUFFER_FIELDS:
            sink.set(_BUFFER_FIELDS[name], int(sink.num(key, value)) if value else 0, key)
            if _BUFFER_FIELDS[name] in ("parallelism.zero3_prefetch_bucket_elems",
                                        "parallelism.zero3_max_live_params"):
                sink.unmodelled(key, "kept in the job, not used by the memory model yet: "
                                "ZeRO-3's gathered parameters are estimated as two layers and "
                                "the root module")
        elif name in _SWITCH_FIELDS:
            sink.set(_SWITCH_FIELDS[name], sink.bool_(key, value), key)
        elif name in _BUFFER_UNMODELLED:
            sink.unmodelled(key, _BUFFER_UNMODELLED[name])
        elif name in _BUFFER_IGNORED:
            sink.ignore(key, _BUFFER_IGNORED[name])
        elif name in _ZERO_IGNORED and name in _ZERO_UNMODELLED:
            sink.unmodelled(key, _ZERO_IGNORED[name] + "; estimated without it")
        elif name in _ZERO_IGNORED:
            sink.ignore(key, _ZERO_IGNORED[name])
        else:
            sink.ignore(key, "not used by fmest")


def _precision(name: str, block: Any, sink: Sink, prefix: str) -> None:
    dtype = "bf16" if name in ("bf16", "bfloat16") else "fp16"
    if not isinstance(block, dict):
        raise sink.error(prefix, "expected a mapping such as {\"enabled\": true}", value=block)
    for k, value in block.items():
        key = join(prefix, k)
        if k != "enabled":
            sink.ignore(key, "loss scaling / fp16 details; same bytes per GPU")
        elif _is_auto(value):
            sink.auto("training.dtype", key)
            sink.master_keys[dtype] = key
        elif sink.bool_(key, value):
            sink.set("training.dtype", dtype, key)
            sink.set("training.precision", "master", key)  # bf16/fp16 weights + fp32 master
            sink.master_keys[dtype] = key
        else:
            sink.ignore(key, f"false: {dtype} off")


def _optimizer(block: Any, sink: Sink, prefix: str) -> None:
    block = sink.mapping(prefix, block)
    for name, value in block.items():
        key = join(prefix, name)
        if name == "type":
            text = str(value).strip().lower().replace("_", "")
            opt = _OPTIMIZERS.get(text, str(value).strip().lower())
            params = block.get("params") if isinstance(block.get("params"), dict) else {}
            if opt == "sgd" and float(params.get("momentum", 0) or 0) > 0:
                opt = "sgd_momentum"   # torch.optim.SGD keeps momentum_buffer when momentum>0
            sink.set("training.optimizer", opt, key)
            if text in _EXTRA_STATES:
                sink.unmodelled(key, f"{value}: estimated as {opt}; " + _EXTRA_STATES[text])
        else:
            sink.ignore(key, HYPERPARAM)


def map_config(doc: dict, sink: Sink, prefix: str = "") -> None:
    # a DeepSpeed config means the DeepSpeed engine runs the step (issue 12 stack inference)
    sink.set("training.stack", "deepspeed", prefix or "(DeepSpeed config)")
    enabled = [name for name in ("bf16", "bfloat16", "fp16") if isinstance(doc.get(name), dict)
               and not _is_auto(doc[name].get("enabled"))
               and str(doc[name].get("enabled")).strip().lower() in ("true", "1", "yes", "on")]
    if len({"fp16" if n == "fp16" else "bf16" for n in enabled}) > 1:
        raise sink.error(join(join(prefix, "fp16"), "enabled"), "bf16 and fp16 are both "
                         "enabled; a run computes in one (DeepSpeed asserts 'bfloat16 and fp16 "
                         "modes cannot be simultaneously enabled', deepspeed/runtime/config.py)",
                         value=True)
    for name, value in doc.items():
        key = join(prefix, name)
        if name == "train_batch_size":
            if _is_auto(value):
                sink.ignore(key, "\"auto\": fmest computes it as micro-batch x accumulation x "
                            "data-parallel GPUs")
            else:
                sink.train_batch.append((sink.int_(key, value), key))
        elif name in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
            field = ("training.micro_batch_size" if name.startswith("train_micro")
                     else "training.grad_accum_steps")
            if _is_auto(value):
                sink.auto(field, key)
            else:
                sink.set(field, sink.int_(key, value), key)
        elif name == "zero_optimization":
            _zero(value, sink, key)
        elif name in ("bf16", "bfloat16", "fp16"):
            _precision(name, value, sink, key)
        elif name == "torch_autocast":
            block = sink.mapping(key, value)
            if sink.bool_(join(key, "enabled"), block.get("enabled", False)):
                dt = {"bfloat16": "bf16", "torch.bfloat16": "bf16", "float16": "fp16",
                      "torch.float16": "fp16"}.get(str(block.get("dtype", "bfloat16")), "bf16")
                sink.set("training.dtype", dt, join(key, "enabled"))
                sink.set("training.precision", "amp", join(key, "enabled"))
            for k in block:
                if k not in ("enabled",):
                    sink.ignore(join(key, k), "autocast details; the dtype is taken from "
                                "torch_autocast.dtype")
        elif name == "optimizer":
            _optimizer(value, sink, key)
        elif name == "tensor_parallel":
            block = sink.mapping(key, value)
            for k, v in block.items():
                if k in ("autotp_size", "tp_size"):
                    sink.set("parallelism.tp", sink.int_(join(key, k), v), join(key, k))
                else:
                    sink.ignore(join(key, k), "tensor-parallel detail; fmest knows only the "
                                "degree")
        elif name in _TOP_IGNORED and name in _TOP_UNMODELLED:
            sink.unmodelled(key, _TOP_IGNORED[name] + "; estimated without it")
        elif name in _TOP_IGNORED:
            sink.ignore(key, _TOP_IGNORED[name])
        else:
            sink.ignore(key, "not used by fmest")
