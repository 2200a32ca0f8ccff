"""axolotl YAML configs.

Schema: https://docs.axolotl.ai/docs/config-reference.html (formerly
https://axolotl-ai-cloud.github.io/axolotl/docs/config.html). axolotl loads the weights in the
training dtype (``bf16``/``bfloat16`` -> ``torch_dtype=bfloat16`` in ``normalize_config``), so
``bf16: true`` maps to ``precision: pure``; ``load_in_8bit`` with a LoRA adapter is a quantised
base, i.e. fmest's ``qlora`` with 8-bit weights.
"""

from __future__ import annotations

from fmest.configs._base import DATA, HYPERPARAM, LOGGING, Sink, model_name, target_list

FORMAT = "axolotl"

_ATTN = {"flash_attention": "flash", "sdp_attention": "sdpa", "eager_attention": "eager",
         "xformers_attention": "flash", "flex_attention": "flash", "s2_attention": "flash"}

_IGNORED_PREFIXES = (("wandb_", LOGGING), ("mlflow_", LOGGING), ("comet_", LOGGING),
                     ("hub_", LOGGING), ("eval", LOGGING), ("save", LOGGING),
                     ("logging", LOGGING), ("lr_", HYPERPARAM), ("warmup", HYPERPARAM),
                     ("adam_", HYPERPARAM), ("dataset", DATA), ("test_", DATA),
                     ("chat_template", DATA), ("tokenizer", "tokenizer choice; fmest sizes the "
                                                         "vocabulary from the model config"),
                     ("lora_dropout", HYPERPARAM), ("lora_fan_in", HYPERPARAM),
                     ("early_stopping", LOGGING), ("neftune", HYPERPARAM),
                     ("rl", "RL stages' reference/reward models are not modelled; the "
                            "estimate is for the trained model"))
_IGNORED = {
    "base_model_config": "fmest reads the model config from base_model",
    "model_type": "fmest reads the architecture from the model config",
    "trust_remote_code": "loading only", "strict": "config validation only",
    "output_dir": LOGGING, "resume_from_checkpoint": LOGGING, "auto_resume_from_checkpoints":
    LOGGING, "local_rank": "launch setting", "debug": LOGGING, "seed": LOGGING,
    "learning_rate": HYPERPARAM, "weight_decay": HYPERPARAM, "max_grad_norm": HYPERPARAM,
    "cosine_min_lr_ratio": HYPERPARAM, "optim_args": HYPERPARAM, "special_tokens": DATA,
    "tokens": DATA, "train_on_inputs": DATA, "group_by_length": DATA, "val_set_size": DATA,
    "shuffle_merged_datasets": DATA, "pretraining_dataset": DATA, "datasets": DATA,
    "dataset_prepared_path": DATA, "push_dataset_to_hub": DATA,
    "sample_packing": "packed samples fill sequence_len; fmest already sizes activations at "
                      "sequence_len",
    "pad_to_sequence_len": "fmest sizes activations at sequence_len (padded) already",
    "eval_sample_packing": LOGGING, "sample_packing_eff_est": DATA,
    "lora_modules_to_save": "fully trained extra modules (embeddings/head) are not modelled; "
                            "the estimate counts LoRA adapters only",
    "lora_model_dir": "adapter loading only",
    "peft_use_dora": "DoRA's magnitude vectors are not modelled (estimated as LoRA)",
    "peft_use_rslora": "a scaling rule; same memory", "lora_on_cpu": "loading only",
    "unfrozen_parameters": "partial freezing has no fmest field",
    "gradient_checkpointing_kwargs": "use_reentrant does not change what is stored",
    "torch_compile_backend": "compile details; fmest only knows whether the model is compiled",
    "torch_compile_mode": "compile details; fmest only knows whether the model is compiled",
    "ddp_timeout": "launch setting", "ddp_bucket_cap_mb": "DDP buffer size; not modelled",
    "ddp_broadcast_buffers": "launch setting", "ddp_find_unused_parameters": "launch setting",
    "bnb_config_kwargs": "quantisation details; fmest uses NF4 with double quantisation",
    "gptq": "GPTQ bases are not modelled", "tf32": "tf32 changes speed, not memory",
    "max_packed_sequence_len": DATA, "sequence_len_overflow_handling": DATA,
    "group_size": DATA, "special_tokens_reference": DATA, "default_system_message": DATA,
    "chat_template_jinja": DATA, "is_preprocess": DATA, "num_dataset_shards_to_save": DATA,
    "fix_untrained_tokens": DATA, "embeddings_skip_upcast": "dtype of embeddings only",
    "low_cpu_mem_usage": "loading only", "load_best_model_at_end": LOGGING,
    "use_tensorboard": LOGGING, "profiler_steps": LOGGING, "include_tokens_per_second": LOGGING,
    "plugins": "plugins other than liger/cut-cross-entropy are not modelled",
}


def _adapter(doc: dict, sink: Sink) -> None:
    """``adapter`` + ``load_in_4bit``/``load_in_8bit`` -> technique and base-weight bits."""
    adapter = doc.get("adapter")
    # never truthiness: "false" / "no" are false, "maybe" is refused naming the key
    k4, k8 = (doc.get(key) is not None and sink.bool_(key, doc[key])
              for key in ("load_in_4bit", "load_in_8bit"))
    if k4 and k8:
        raise sink.error("load_in_8bit", "load_in_4bit and load_in_8bit are both true; the "
                         "base loads one way (transformers BitsAndBytesConfig raises 'load_in_4bit "
                         "and load_in_8bit are both True, but only one can be used')", value=True)
    if adapter in (None, "", False):
        if "adapter" in doc:
            sink.set("training.technique", "full", "adapter")
            # reported like every other null: the user may have meant an adapter
            shown = "null" if adapter is None else repr(adapter)
            sink.ignore("adapter", f"{shown}: no adapter, so full fine-tuning (set "
                        "adapter: lora or qlora for LoRA)")
        if k4 or k8:
            raise sink.error("load_in_4bit" if k4 else "load_in_8bit",
                             "a quantised base needs adapter: lora or qlora", value=True)
        return
    tech = sink.choice("adapter", adapter, {"lora": "lora", "qlora": "qlora"})
    if tech == "qlora" or k4 or k8:
        key = "load_in_8bit" if (k8 and not k4) else ("load_in_4bit" if k4 else "adapter")
        sink.set("training.technique", "qlora", "adapter" if tech == "qlora" else key)
        sink.set("training.quantization_bits", 8 if (k8 and not k4) else 4, key)
    else:
        sink.set("training.technique", "lora", "adapter")


def map_config(doc: dict, sink: Sink) -> None:
    sink.set("training.stack", "hf-trainer", "(axolotl config: transformers Trainer)")
    if doc.get("unsloth_lora_mlp") or doc.get("unsloth_cross_entropy_loss") \
            or doc.get("unsloth_rms_norm"):
        sink.set("training.stack", "unsloth", "unsloth_*")
    _adapter(doc, sink)
    if all(doc.get(k) is not None and str(doc[k]).strip().lower() != "auto"
           and sink.bool_(k, doc[k]) for k in ("bf16", "fp16")):
        raise sink.error("fp16", "bf16 and fp16 are both true; a run computes in one (axolotl "
                         "passes both to transformers TrainingArguments, which raises 'At most "
                         "one of fp16 and bf16 can be True')", value=True)
    if str(doc.get("bf16")).strip().lower() == "auto" and doc.get("fp16") is not None \
            and sink.bool_("fp16", doc["fp16"]):
        sink.ignore("bf16", "auto, but fp16: true is set: estimated in fp16")
    plugins = doc.get("plugins") or []
    for name, value in doc.items():
        key = name
        if value is None and name != "adapter":
            sink.ignore(key, "null: not set (axolotl's default)")
            continue
        if name in ("adapter", "load_in_4bit", "load_in_8bit"):
            if name != "adapter" and not sink.bool_(key, value):
                sink.ignore(key, "false: base weights not quantised")
            continue
        if name == "base_model":
            sink.set("model", model_name(value), key)
        elif name == "lora_r":
            sink.set("training.lora_rank", sink.int_(key, value), key)
        elif name == "lora_alpha":
            sink.set("training.lora_alpha", sink.num(key, value), key)
        elif name == "lora_target_modules":
            if value:
                sink.set("training.lora_target_modules", target_list(value), key)
            else:
                sink.ignore(key, "empty")
        elif name == "lora_target_linear":
            sink.set_when_true("training.lora_target_modules", ["all-linear"], key, value,
                               "false: lora_target_modules choose the modules")
        elif name == "sequence_len":
            sink.set("training.seq_len", sink.int_(key, value), key)
        elif name == "micro_batch_size":
            sink.set("training.micro_batch_size", sink.int_(key, value), key)
        elif name == "gradient_accumulation_steps":
            sink.set("training.grad_accum_steps", sink.int_(key, value), key)
        elif name == "batch_size":
            if "gradient_accumulation_steps" in doc:
                sink.ignore(key, "gradient_accumulation_steps is given and wins")
            else:
                total = sink.int_(key, value)
                micro = sink.int_("micro_batch_size", doc.get("micro_batch_size", 1))
                if total % micro:
                    raise sink.error(key, f"must be a multiple of micro_batch_size ({micro})",
                                     value=total)
                sink.set("training.grad_accum_steps", total // micro,
                         "batch_size / micro_batch_size")
        elif name == "num_epochs":
            sink.set("workload.epochs", sink.num(key, value), key)
        elif name == "max_steps":
            if value in (None, -1):
                sink.ignore(key, "not set")
            else:
                sink.set("workload.max_steps", sink.int_(key, value), key)
        elif name == "optimizer":
            from fmest.configs.training_args import optimizer_name

            sink.set("training.optimizer", optimizer_name(value), key)
        elif name in _ATTN:
            if sink.bool_(key, value):
                sink.set("training.attention", _ATTN[name], key)
                if name in ("xformers_attention", "flex_attention", "s2_attention"):
                    sink.ignore(key, "estimated as flash attention (no stored s x s scores)")
            else:
                sink.ignore(key, "false")
        elif name == "gradient_checkpointing":
            text = str(value).strip().lower()
            if text in ("offload", "unsloth"):
                sink.set("training.activation_checkpointing", "full", key)
                sink.set("training.activation_offload", True, key)
            else:
                sink.set("training.activation_checkpointing",
                         "full" if sink.bool_(key, value) else "none", key)
        elif name in ("activation_offloading",):
            text = str(value).strip().lower()
            sink.set("training.activation_offload", text in ("legacy", "true", "yes") or
                     value is True, key)
        elif name in ("bf16", "fp16", "bfloat16", "float16"):
            dt = "bf16" if name.startswith("b") else "fp16"
            if str(value).strip().lower() == "auto" and dt == "bf16" \
                    and doc.get("fp16") is not None and sink.bool_("fp16", doc["fp16"]):
                continue   # reported above: fp16 wins over bf16 auto
            if str(value).strip().lower() == "auto" or sink.bool_(key, value):
                sink.set("training.dtype", dt, key)
                sink.set("training.precision", "pure", key)
            else:
                sink.ignore(key, "false")
        elif name == "fp8":
            sink.set_when_true("training.dtype", "fp8", key, value)
        elif name == "deepspeed":
            from fmest.configs import deepspeed

            if value:
                sink.include(key, value, deepspeed.FORMAT)
            else:
                sink.ignore(key, "empty")
        elif name == "fsdp":
            from fmest.compat.fm_training_estimator import training_arguments_fields

            mapped, _ = training_arguments_fields({"fsdp": value}, "")
            for field, v in mapped.get("parallelism", {}).items():
                sink.set(f"parallelism.{field}", v, key)
            if not mapped:
                sink.ignore(key, "no sharding strategy named (full_shard, shard_grad_op, ...)")
        elif name == "fsdp_config":
            from fmest.configs.accelerate import map_fsdp_config

            map_fsdp_config(sink.mapping(key, value or {}), sink, key)
            if "parallelism.fsdp" not in sink.values and "fsdp" not in doc:
                sink.set("parallelism.fsdp", "full_shard", key)
        elif name == "fsdp_version":
            sink.ignore(key, "FSDP1 and FSDP2 shard the same bytes in fmest's model")
        elif name == "torch_compile":
            sink.set("training.compile", str(value).strip().lower() != "auto" and
                     sink.bool_(key, value), key)
        elif name in ("liger_fused_linear_cross_entropy", "cut_cross_entropy"):
            sink.set_when_true("training.loss", "fused", key, value)
        elif name == "chunked_cross_entropy":
            sink.set_when_true("training.loss", "chunked", key, value)
        elif name in ("sequence_parallel_degree", "context_parallel_size"):
            sink.set("parallelism.cp", sink.int_(key, value), key)
        elif name == "tensor_parallel_size":
            sink.set("parallelism.tp", sink.int_(key, value), key)
        elif name in ("liger_rope", "liger_rms_norm", "liger_glu_activation",
                      "liger_layer_norm", "liger_swiglu"):
            sink.ignore(key, "fused kernels other than the loss are not modelled")
        elif name == "plugins":
            names = [str(p) for p in (plugins if isinstance(plugins, list) else [plugins])]
            sink.ignore(key, f"{names}: plugins are not modelled (their flags, e.g. "
                        "liger_fused_linear_cross_entropy / cut_cross_entropy, are)")
        elif name in _IGNORED:
            sink.ignore(key, _IGNORED[name])
        else:
            reason = next((r for p, r in _IGNORED_PREFIXES if name.startswith(p)), None)
            sink.ignore(key, reason or "not used by fmest")
