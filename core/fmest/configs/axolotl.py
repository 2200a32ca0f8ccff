"""axolotl YAML configs.

Schema: https://docs.axolotl.ai/docs/config-reference.html (formerly
https://axolotl-ai-cloud.github.io/axolotl/docs/config.html). axolotl loads the weights in the
training dtype (``bf16``/``bfloat16`` -> ``torch_dtype=bfloat16`` in ``normalize_config``), so
``bf16: true`` maps to ``precision: pure``; ``load_in_8bit`` with a LoRA adapter is a quantised
base, i.e. fmest's ``qlora`` with 8-bit weights.
"""

from __future__ import annotations

import re

from fmest.configs._base import (
    DATA,
    HYPERPARAM,
    LOGGING,
    Sink,
    model_name,
    set_modules_to_save,
    target_list,
)
from fmest.configs.training_args import map_attention, map_optimizer

FORMAT = "axolotl"

#: the deprecated boolean attention switches (src/axolotl/utils/schemas/config.py @067b021:
#: "Use `attn_implementation: ...` instead") as attn_implementation values
_ATTN = {"flash_attention": "flash_attention_2", "sdp_attention": "sdpa",
         "eager_attention": "eager", "xformers_attention": "xformers",
         "flex_attention": "flex_attention", "s2_attention": "s2", "sage_attention": "sage"}
#: axolotl attention backends beyond transformers' (CANONICAL_ATTN_IMPLS in
#: src/axolotl/utils/schemas/enums.py @067b021): memory-efficient kernels that store no s x s
#: scores, estimated as FlashAttention with a not-modelled warning
_ATTN_AS_FLASH = {"xformers": "xFormers memory-efficient attention",
                  "sage": "SageAttention (8-bit QK)", "fp8": "FP8 attention",
                  "s2": "shifted-sparse (S^2) attention"}
#: the plugin class that turns the liger_* switches on (src/axolotl/integrations/liger)
_LIGER_PLUGIN = "axolotl.integrations.liger"
_LIGER_KERNELS = ("liger_rope", "liger_rms_norm", "liger_glu_activation", "liger_swiglu")
#: each switch's kernel chain (training.fused_kernels) when only some are on
_LIGER_CHAIN = {"liger_rope": "rope", "liger_rms_norm": "norm", "liger_glu_activation": "activation",
                "liger_swiglu": "activation"}
#: PEFT matches a *string* target_modules with re.fullmatch against each module's full name
#: (peft tuners_utils.check_target_module_exists); axolotl passes lora_target_modules through
#: (src/axolotl/loaders/adapter.py @067b021). fmest stores module *names*, so a regex is
#: resolved by matching it against the full names of the common Hugging Face layouts below.
_LINEAR_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "gate_proj", "up_proj",
                 "down_proj", "gate_up_proj", "out_proj", "in_proj", "x_proj", "dt_proj",
                 "fc1", "fc2", "c_attn", "c_proj", "c_fc", "query_key_value", "dense",
                 "dense_h_to_4h", "dense_4h_to_h", "Wqkv", "wqkv", "wo", "w1", "w2", "w3",
                 "in_proj_qkvz", "in_proj_ba", "lm_head")
_CONTAINERS = ("model.layers.{i}.{b}", "model.language_model.layers.{i}.{b}",
               "model.text_model.layers.{i}.{b}", "language_model.model.layers.{i}.{b}",
               "model.model.layers.{i}.{b}", "transformer.h.{i}.{b}",
               "model.layers.{i}.{b}.experts.0", "gpt_neox.layers.{i}.{b}")
_BLOCKS = ("self_attn", "mlp", "cross_attn", "attn", "attention", "linear_attn", "mixer",
           "feed_forward", "block_sparse_moe", "mlp.shared_expert", "mlp.experts")
_LAYERS = 96

_IGNORED_PREFIXES = (("wandb_", LOGGING), ("mlflow_", LOGGING), ("comet_", LOGGING),
                     ("hub_", LOGGING), ("eval", LOGGING), ("save", LOGGING),
                     ("logging", LOGGING), ("lr_", HYPERPARAM), ("warmup", HYPERPARAM),
                     ("adam_", HYPERPARAM), ("dataset", DATA), ("test_", DATA),
                     ("chat_template", DATA), ("tokenizer", "tokenizer choice; fmest sizes the "
                                                         "vocabulary from the model config"),
                     ("lora_dropout", HYPERPARAM), ("lora_fan_in", HYPERPARAM),
                     ("early_stopping", LOGGING), ("neftune", HYPERPARAM),
                     ("rl_", HYPERPARAM))
_IGNORED = {
    "model_type": "fmest reads the architecture from the model config",
    "trust_remote_code": "loading only", "strict": "config validation only",
    "output_dir": LOGGING, "resume_from_checkpoint": LOGGING, "auto_resume_from_checkpoints":
    LOGGING, "local_rank": "launch setting", "debug": LOGGING, "seed": LOGGING,
    "learning_rate": HYPERPARAM, "weight_decay": HYPERPARAM, "max_grad_norm": HYPERPARAM,
    "cosine_min_lr_ratio": HYPERPARAM, "optim_args": HYPERPARAM, "special_tokens": DATA,
    "tokens": DATA, "train_on_inputs": DATA, "group_by_length": DATA, "val_set_size": DATA,
    "shuffle_merged_datasets": DATA, "pretraining_dataset": DATA, "datasets": DATA,
    "dataset_prepared_path": DATA, "push_dataset_to_hub": DATA,
    "eval_sample_packing": LOGGING, "sample_packing_eff_est": DATA,
    "lora_model_dir": "adapter loading only",
    "peft_use_rslora": "a scaling rule; same memory", "lora_on_cpu": "loading only",
    "gradient_checkpointing_kwargs": "use_reentrant does not change what is stored",
    "torch_compile_backend": "compile details; fmest only knows whether the model is compiled",
    "torch_compile_mode": "compile details; fmest only knows whether the model is compiled",
    "ddp_timeout": "launch setting",
    "ddp_broadcast_buffers": "launch setting", "ddp_find_unused_parameters": "launch setting",
    "max_packed_sequence_len": DATA, "sequence_len_overflow_handling": DATA,
    "group_size": DATA, "special_tokens_reference": DATA, "default_system_message": DATA,
    "chat_template_jinja": DATA, "is_preprocess": DATA, "num_dataset_shards_to_save": DATA,
    "fix_untrained_tokens": DATA, "embeddings_skip_upcast": "dtype of embeddings only",
    "low_cpu_mem_usage": "loading only", "load_best_model_at_end": LOGGING,
    "use_tensorboard": LOGGING, "profiler_steps": LOGGING, "include_tokens_per_second": LOGGING,
}
#: keys fmest reads but does not model although they may change memory or time: the answer is
#: given without them and every output format warns (Sink.unmodelled)
_UNMODELLED = {
    "peft_use_dora": "DoRA's magnitude vectors and weight-norm recomputation are not modelled "
                     "(estimated as LoRA)",
    "unfrozen_parameters": "partial freezing is estimated as full fine-tuning, an upper bound",
    "ddp_bucket_cap_mb": "DDP gradient-bucket size is not modelled (PyTorch's 25 MB assumed)",
    "bnb_config_kwargs": "quantisation details are not modelled; NF4 with double quantisation "
                         "assumed",
    "gptq": "a GPTQ-quantised base is estimated as a bitsandbytes 4-bit base",
    "lora_mlp_kernel": "axolotl's fused LoRA MLP kernel is not modelled (unfused LoRA assumed)",
    "lora_qkv_kernel": "axolotl's fused LoRA QKV kernel is not modelled (unfused LoRA assumed)",
    "lora_o_kernel": "axolotl's fused LoRA O kernel is not modelled (unfused LoRA assumed)",
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
        sink.set("training.technique", "qlora",
                 "adapter" if tech == "qlora" or key == "adapter" else f"adapter+{key}")
        sink.set("training.quantization_bits", 8 if (k8 and not k4) else 4, key)
    else:
        sink.set("training.technique", "lora", "adapter")


def _suffixes(entries: list[str]) -> list[str]:
    """PEFT list targets match a module whose full name equals the entry or ends with
    ``"." + entry`` (peft tuners_utils.check_target_module_exists): the module name is the
    entry's last dotted part (``self_attn.q_proj`` -> ``q_proj``)."""
    out: list[str] = []
    for entry in entries:
        name = entry.rsplit(".", 1)[-1]
        if name not in out:
            out.append(name)
    return out


def resolve_regex(pattern: str) -> tuple[list[str], bool]:
    """The module names a PEFT regex ``target_modules`` selects in the common Hugging Face
    layouts (:data:`_CONTAINERS` x :data:`_BLOCKS` x :data:`_LINEAR_NAMES`, layers
    0..:data:`_LAYERS`-1), and whether it selects them in only some layers. ``([], False)`` when
    it matches none of them (or is not a valid regex)."""
    try:
        rx = re.compile(pattern)
    except re.error:
        return [], False
    names: dict[str, set[int]] = {}
    for name in _LINEAR_NAMES:
        if rx.fullmatch(name) or rx.fullmatch(f"model.{name}"):
            names.setdefault(name, set()).update(range(_LAYERS))
        for block in _BLOCKS:
            for container in _CONTAINERS:
                for i in range(_LAYERS):
                    if rx.fullmatch(container.format(i=i, b=block) + "." + name):
                        names.setdefault(name, set()).add(i)
    if not names:
        return [], False
    return list(names), any(len(layers) < _LAYERS for layers in names.values())


def _targets(sink: Sink, key: str, value, linear: bool) -> None:
    """``lora_target_modules``: a list of module names/suffixes, or a string (PEFT: a regex
    over full module names; a plain name is the regex matching only itself)."""
    if linear:
        sink.ignore(key, "lora_target_linear: true adds every linear layer, so all-linear")
        return
    if isinstance(value, str) and re.search(r"[\\^$*+?()\[\]|{}]", value):
        names, partial = resolve_regex(value)
        if not names:
            sink.set("training.lora_target_modules", ["all-linear"], key)
            sink.unmodelled(key, f"the regex {value!r} matches no module fmest can name; "
                            "estimated as all-linear LoRA, an upper bound")
            return
        sink.set("training.lora_target_modules", names, key)
        if re.search(r"vision|visual|audio", value):
            sink.unmodelled(key, f"the regex {value!r} also names vision/audio-tower modules; "
                            "LoRA there is not counted (language-model modules only)")
        if partial:
            sink.unmodelled(key, f"the regex {value!r} selects {', '.join(names)} in some "
                            "layers only; estimated on every layer, an upper bound")
        return
    sink.set("training.lora_target_modules", _suffixes(target_list(value)), key)


def _liger(doc: dict, sink: Sink, plugins: list[str]) -> None:
    """axolotl's Liger plugin (``plugins: [axolotl.integrations.liger.LigerPlugin]``) patches
    the kernels its ``liger_*`` switches name: RMSNorm, SwiGLU/GLU, RoPE -> training.liger
    (which also fuses the loss) when all three are on, else the ones on ->
    training.fused_kernels (Liger's one-read-one-write bytes, fmest.stacks.FUSED_KERNEL_BYTES);
    ``liger_fused_linear_cross_entropy`` -> training.loss fused."""
    on = [k for k in _LIGER_KERNELS if doc.get(k) is not None and sink.bool_(k, doc[k])]
    has_plugin = any(_LIGER_PLUGIN in p.lower() for p in plugins)
    for key in _LIGER_KERNELS + ("liger_layer_norm", "liger_cross_entropy",
                                 "liger_rms_norm_gated", "liger_use_token_scaling"):
        if key not in doc or doc[key] is None:
            continue
        if not has_plugin:
            sink.ignore(key, "no effect: plugins does not list the Liger plugin "
                        f"({_LIGER_PLUGIN}.LigerPlugin)")
        elif key in on:
            continue   # set once below, naming every switch that turned it on
        elif key in _LIGER_KERNELS or not sink.bool_(key, doc[key]):
            sink.ignore(key, "false")
        else:
            sink.unmodelled(key, "this Liger kernel alone is not modelled (unfused op assumed)")
    if not (has_plugin and on):
        return
    if {_LIGER_CHAIN[k] for k in on} == {"rope", "norm", "activation"}:
        sink.set("training.liger", True, "+".join(on))
    else:   # only some: each as the job's own fused chain
        sink.set("training.fused_kernels", sorted({_LIGER_CHAIN[k] for k in on}), "+".join(on))


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
    plugins = [str(p) for p in (doc.get("plugins") or [])] \
        if isinstance(doc.get("plugins") or [], list) else [str(doc["plugins"])]
    _liger(doc, sink, plugins)
    lora = sink.get("training.technique") in ("lora", "qlora")
    linear = doc.get("lora_target_linear") is not None and \
        sink.bool_("lora_target_linear", doc["lora_target_linear"])
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
            if doc.get("base_model_config"):
                sink.ignore(key, "the weights; axolotl reads the architecture from "
                            "base_model_config")
            else:
                sink.set("model", model_name(value), key)
        elif name == "base_model_config":
            # axolotl loads the model config from base_model_config (defaults to base_model)
            sink.set("model", model_name(value), key)
        elif not lora and (name in ("lora_r", "lora_alpha", "lora_target_modules",
                                    "lora_target_linear") or name.startswith("lora_")) \
                and name not in _IGNORED and not name.startswith(("lora_dropout",
                                                                   "lora_fan_in")):
            sink.ignore(key, "no adapter (full fine-tuning): axolotl applies no LoRA, so the "
                        "LoRA keys have no effect")
        elif name == "lora_r":
            sink.set("training.lora_rank", sink.int_(key, value), key)
        elif name == "lora_alpha":
            sink.set("training.lora_alpha", sink.num(key, value), key)
        elif name == "lora_dropout" and value is not None:
            sink.set("training.lora_dropout",
                     0.0 if value in (0, "0", "0.0") else sink.num(key, value), key)
        elif name == "lora_target_modules":
            if value:
                _targets(sink, key, value, linear)
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
            map_optimizer(sink, key, value)
        elif name in _ATTN or name == "attn_implementation":
            if name in _ATTN and not sink.bool_(key, value):
                sink.ignore(key, "false")
                continue
            impl = _ATTN.get(name) or str(value).strip().lower()
            if impl in _ATTN_AS_FLASH:
                sink.set("training.attention", "flash", key)
                sink.unmodelled(key, f"{_ATTN_AS_FLASH[impl]} estimated as FlashAttention (no "
                                "stored s x s scores)")
            else:
                map_attention(sink, key, impl)
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
            plugin = _LIGER_PLUGIN if name.startswith("liger") else \
                "axolotl.integrations.cut_cross_entropy"
            if any(plugin in p.lower() for p in plugins):
                sink.set_when_true("training.loss", "fused", key, value)
            else:
                sink.ignore(key, f"no effect: plugins does not list {plugin}")
        elif name == "chunked_cross_entropy":
            sink.set_when_true("training.loss", "chunked", key, value)
        elif name in ("sequence_parallel_degree", "context_parallel_size"):
            sink.set("parallelism.cp", sink.int_(key, value), key)
        elif name == "tensor_parallel_size":
            sink.set("parallelism.tp", sink.int_(key, value), key)
        elif name.startswith("liger_"):
            continue   # _liger
        elif name == "plugins":
            other = [p for p in plugins if _LIGER_PLUGIN not in p.lower()
                     and "cut_cross_entropy" not in p.lower()]
            if other:
                sink.unmodelled(key, f"{other}: these plugins are not modelled (the Liger and "
                                "Cut Cross Entropy plugins are, through their switches)")
            else:
                sink.ignore(key, "the Liger / Cut Cross Entropy plugins: modelled through "
                            "their switches (liger_*, cut_cross_entropy)")
        elif name == "rl":
            _rl(doc, sink, key, value)
        elif name in ("precompute_ref_log_probs", "rl_adapter_ref_model") and str(
                doc.get("rl", "")).strip().lower() in ("dpo", "ipo", "kto"):
            if not (doc.get("adapter") or name == "precompute_ref_log_probs"):
                sink.ignore(key, "no adapter: the reference is a copy either way")
            elif not sink.bool_(key, value):
                sink.ignore(key, "false")
            # else read by _rl
        elif name in ("trl", "vllm"):
            sink.unmodelled(key, "RL generation settings (vLLM server / colocated engine) are "
                            "not modelled")
        elif name == "lora_modules_to_save":
            set_modules_to_save(sink, key, value)
        elif name in _UNMODELLED:
            if isinstance(value, bool) and not value:
                sink.ignore(key, "false")
            else:
                sink.unmodelled(key, _UNMODELLED[name])
        elif name == "tf32":
            # axolotl passes tf32 to TrainingArguments (torch allow_tf32 for fp32 matmuls)
            sink.set("training.tf32", sink.bool_(key, value), key)
        elif name in ("sample_packing", "pad_to_sequence_len"):
            # axolotl (axolotl-ai-cloud/axolotl 067b021c8b87a9e5e380b9173c704cf7340e30f5
            # src/axolotl/utils/schemas/config.py): sample_packing packs samples into
            # sequence_len rows; pad_to_sequence_len pads every batch to sequence_len ("constant
            # sized buffers", on by default with sample_packing); neither: the collator
            # (DataCollatorForSeq2Seq, padding=True) pads each batch to its longest sample
            on = value is not None and sink.bool_(key, value)
            packed = bool(doc.get("sample_packing"))
            fixed = doc.get("pad_to_sequence_len")
            if packed:
                sink.set("training.padding", "packed", key)
                # "multi-packing with block diagonal attention and per sequence position_ids"
                # (schemas/config.py sample_packing, line 688 @ 067b021c8; monkeypatch/
                # multipack.py patches transformers' _get_unpad_data for FlashAttention varlen)
                sink.set("training.packed_attention", "document", key)
            elif on or fixed:
                sink.set("training.padding", "max_length", key)
            else:
                sink.set("training.padding", "longest", key)
        elif name in _IGNORED:
            sink.ignore(key, _IGNORED[name])
        else:
            reason = next((r for p, r in _IGNORED_PREFIXES if name.startswith(p)), None)
            sink.ignore(key, reason or "not used by fmest")


def _rl(doc: dict, sink: Sink, key: str, value) -> None:
    """``rl:`` -> training.objective / reference_model (fmest.objectives), as axolotl runs it
    (axolotl-ai-cloud/axolotl at 067b021c8b87a9e5e380b9173c704cf7340e30f5: ``RLType`` in
    ``utils/schemas/enums.py``; ``train.py`` ``setup_reference_model``: no reference for ORPO,
    None with an adapter unless ``rl_adapter_ref_model`` (TRL then disables the adapter for the
    reference pass), else the model loaded again; ``precompute_ref_log_probs`` passed to TRL).
    IPO is DPO with another loss; GRPO/GDPO/EBFT generate, which is not modelled."""
    rl = str(value).strip().lower()
    objective = {"dpo": "dpo", "ipo": "dpo", "kto": "kto", "orpo": "orpo",
                 "simpo": "simpo"}.get(rl)
    if objective is None:
        sink.unmodelled(key, f"{value}: the reference/reward models and generation of this RL "
                        "method are not modelled; the estimate is the trained model's step")
        return
    sink.set("training.objective", objective, key)
    if objective not in ("dpo", "kto"):
        return
    pre = doc.get("precompute_ref_log_probs")
    own_ref = doc.get("rl_adapter_ref_model")
    if pre is not None and sink.bool_("precompute_ref_log_probs", pre):
        sink.set("training.reference_model", "precomputed", "precompute_ref_log_probs")
    elif doc.get("adapter") and not (own_ref is not None
                                     and sink.bool_("rl_adapter_ref_model", own_ref)):
        sink.set("training.reference_model", "adapter", "adapter")
    else:
        sink.set("training.reference_model", "copy",
                 "rl_adapter_ref_model" if own_ref else f"{key} (full: the model loaded again)")
