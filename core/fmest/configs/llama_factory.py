"""LLaMA-Factory training YAML (``llamafactory-cli train config.yaml``).

Schema: https://llamafactory.readthedocs.io/en/latest/advanced/arguments.html and
``src/llamafactory/hparams/{model,data,finetuning}_args.py``; the rest of the file is
transformers ``Seq2SeqTrainingArguments``, mapped by :mod:`fmest.configs.training_args`.
LLaMA-Factory defaults that differ from fmest's are applied when the file leaves them unset:
``finetuning_type: lora``, ``lora_rank: 8``, ``lora_alpha: 2 x lora_rank``,
``lora_target: all`` and gradient checkpointing on (``disable_gradient_checkpointing: false``).

Recipes that do not train (mirror hiyouga/LLaMA-Factory @ff6d4d12): ``export_dir``
(``llamafactory-cli export``: merge, or GPTQ quantisation with ``export_quantization_bit``) is
refused as merge/quantization/export; ``do_predict`` without ``do_train: true``, or ``do_train:
false`` (``run_sft`` trains only ``if training_args.do_train``) as evaluation; ``infer_backend``
(``llamafactory-cli chat/webchat/api``, src/llamafactory/hparams/model_args.py) is answered as
serving (``mode: inference``). The v1 format (``model:`` plus ``peft_config`` /
``dist_config`` / ``kernel_config`` / ``quant_config`` / ``optim_config`` plugin tables,
src/llamafactory/v1/config/{model,training}_args.py) is read by :func:`map_v1`.
"""

from __future__ import annotations

from typing import Any

from fmest.configs._base import DATA, HYPERPARAM, LOGGING, Sink, model_name, target_list
from fmest.configs.training_args import (
    UNMODELLED_OPTIMIZER,
    map_attention,
    map_keys,
    map_optimizer,
)

FORMAT = "llama-factory"

#: v0 ``flash_attn`` (AttentionFunction in src/llamafactory/extras/constants.py); the v1 format
#: takes transformers' names (eager, sdpa, flash_attention_2, ...)
_FLASH = {"auto": None, "disabled": "eager", "sdpa": "sdpa", "fa2": "flash", "fa3": "flash",
          "eager": "eager", "flash_attention_2": "flash", "flash_attention_3": "flash"}
_OWN = frozenset({
    "model_name_or_path", "finetuning_type", "lora_rank", "lora_alpha", "lora_target",
    "lora_dropout",
    "quantization_bit", "double_quantization", "cutoff_len", "flash_attn",
    "enable_liger_kernel", "pure_bf16", "disable_gradient_checkpointing", "stage",
    "use_unsloth_gc", "sequence_parallel_size", "oft_target", "freeze_vision_tower",
    "packing", "neat_packing",
})
#: switches (``use_*: true``) and keys fmest reads but does not model: the answer is given
#: without them and every output format warns (Sink.unmodelled)
_GALORE = UNMODELLED_OPTIMIZER.format(opt="adamw", name="{}")
_UNMODELLED_SWITCHES = {
    "use_galore": _GALORE.format("GaLore"), "use_apollo": _GALORE.format("APOLLO"),
    "use_badam": _GALORE.format("BAdam (one block trained at a time)"),
    "use_adam_mini": _GALORE.format("Adam-mini (one second moment per block)"),
    "use_muon": _GALORE.format("Muon (momentum only on matrices)"),
    "use_dora": "DoRA's magnitude vectors and weight-norm recomputation are not modelled "
                "(estimated as LoRA)",
    "shift_attn": "S^2-attention's shifted groups are not modelled (full attention assumed)",
    "use_unsloth": "unsloth's own kernels are modelled only through the unsloth stack profile",
    "use_llama_pro": "LLaMA Pro's expanded blocks are not added; the estimate is for the model "
                     "as named",
    "use_kt": "KTransformers' CPU-resident experts are not modelled (all weights on GPU assumed)",
    "use_mca": "the mcore_adapter (Megatron) trainer is not modelled; estimated as the HF Trainer",
    "use_megatron_bridge": "the Megatron-Bridge trainer is not modelled; estimated as the HF "
                           "Trainer",
    "use_hyper_parallel": "hyper-parallel training is not modelled; estimated as the HF Trainer",
    "use_dft_loss": "the DFT loss is estimated as the standard loss",
    "use_asft_loss": "the ASFT loss (it keeps a reference model) is estimated as the standard "
                     "loss",
    "use_eaft_loss": "the EAFT loss is estimated as the standard loss",
    "freeze_multi_modal_projector": "which multimodal parts train is not modelled beyond "
                                    "freeze_vision_tower",
    "freeze_language_model": "a frozen language model is estimated as trained, an upper bound",
    "upcast_lmhead_output": "fp32 logits from the head are not modelled separately",
}
_UNMODELLED = {
    "additional_target": "fully trained extra modules are not modelled; the estimate counts "
                         "LoRA adapters only",
    "ref_model": "a named reference model is counted (stage dpo/kto) as a frozen copy of the "
                 "trained model: its own size and quantization are not read; PPO's is not "
                 "counted",
    "reward_model": "the PPO reward model is not modelled; the estimate is for the trained "
                    "model alone",
    "freeze_trainable_layers": "freeze tuning is estimated as full fine-tuning, an upper bound",
    "freeze_trainable_modules": "freeze tuning is estimated as full fine-tuning, an upper bound",
    "freeze_extra_modules": "freeze tuning is estimated as full fine-tuning, an upper bound",
    "oft_rank": "OFT's orthogonal blocks are estimated as LoRA adapters of lora_rank",
    "oft_block_size": "OFT's orthogonal blocks are estimated as LoRA adapters of lora_rank",
    "quantization_method": "the base is estimated as a bitsandbytes-style block-quantised base "
                           "of quantization_bit bits",
    "mixture_of_depths": "mixture-of-depths (convert/load) is not modelled; the dense model is "
                         "estimated",
}
_IGNORED = {
    "template": DATA, "dataset": DATA, "dataset_dir": DATA, "eval_dataset": DATA,
    "max_samples": DATA, "val_size": DATA, "overwrite_cache": DATA, "preprocessing_num_workers": DATA, "tokenized_path": DATA,
    "mix_strategy": DATA, "streaming": DATA, "buffer_size": DATA, "train_on_prompt": DATA,
    "mask_history": DATA, "interleave_probs": DATA, "media_dir": DATA,
    "dataloader_num_workers": DATA, "tool_format": DATA, "default_system": DATA,
    "enable_thinking": DATA, "image_max_pixels": DATA, "video_max_pixels": DATA,
    "trust_remote_code": "loading only", "cache_dir": "loading only",
    "model_revision": "loading only", "use_fast_tokenizer": "loading only",
    "adapter_name_or_path": "adapter loading only",
    "loraplus_lr_ratio": HYPERPARAM, "pref_beta": HYPERPARAM, "pref_loss": HYPERPARAM,
    "pref_ftx": HYPERPARAM,
    "use_rslora": "a scaling rule; same memory", "pissa_init": "initialisation only",
    "pissa_iter": "initialisation only", "pissa_convert": "initialisation only",
    "create_new_adapter": "adapter bookkeeping only",
    "quantization_type": "fmest models NF4/int8 bases alike by bit width",
    "upcast_layernorm": "layer-norm dtype; negligible memory",
    "rope_scaling": "position-encoding scaling; same memory at the given cutoff_len",
    "plot_loss": LOGGING, "print_param_status": LOGGING,
    "ref_model_adapters": "the reference model's own adapters are not read (see ref_model)",
    "ref_model_quantization_bit": "the reference model's own quantization is not read (see "
                                  "ref_model)",
    "reward_model_adapters": "the reward model is not modelled (see reward_model)",
    "reward_model_quantization_bit": "the reward model is not modelled (see reward_model)",
    "reward_model_type": "the reward model is not modelled (see reward_model)",
    "module_dropout": HYPERPARAM, "loraplus_lr_embedding": HYPERPARAM,
    "use_reentrant_gc": "use_reentrant does not change what is stored",
    "low_cpu_mem_usage": "loading only", "compute_accuracy": LOGGING,
    "moe_aux_loss_coef": HYPERPARAM, "include_effective_tokens_per_second": LOGGING,
}


def _not_training(doc: dict, sink: Sink) -> None:
    """Raise for the recipes that do not train: export/merge/quantise, prediction/evaluation."""
    if doc.get("export_dir") not in (None, ""):
        if doc.get("export_quantization_bit") is not None:
            raise sink.not_training("export_quantization_bit", "quantization",
                                    "llamafactory-cli export with GPTQ quantisation")
        if doc.get("adapter_name_or_path") not in (None, ""):
            raise sink.not_training("export_dir", "merge",
                                    "llamafactory-cli export merges adapter_name_or_path")
        raise sink.not_training("export_dir", "export", "llamafactory-cli export")
    train = doc.get("do_train")
    trains = train is not None and sink.bool_("do_train", train)
    if train is not None and not trains:
        raise sink.not_training("do_train", "evaluation", "do_train: false; LLaMA-Factory "
                                "trains only when do_train is true")
    for key in ("do_predict", "do_eval"):
        if not trains and doc.get(key) is not None and sink.bool_(key, doc[key]):
            raise sink.not_training(key, "evaluation", f"{key}: true without do_train: true")


_RUNTIMES = {"huggingface": "transformers", "hf": "transformers", "vllm": "vllm",
             "sglang": "vllm", "ktransformers": "transformers"}
_INFER_DTYPES = {"auto": None, "float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


def _map_inference(doc: dict, sink: Sink) -> None:
    """``llamafactory-cli chat/api`` recipes: serving memory (ModelArguments' infer_backend,
    vllm_*/sglang_* and GeneratingArguments' max_new_tokens, default 1024)."""
    sink.set("mode", "inference", "infer_backend")
    if "max_new_tokens" not in doc:
        sink.set("inference.output_tokens", 1024,
                 "max_new_tokens (unset: LLaMA-Factory GeneratingArguments default 1024)")
    for name, value in doc.items():
        key = name
        if value is None:
            sink.ignore(key, "null: not set (LLaMA-Factory's default)")
        elif name == "infer_backend":
            backend = str(value).strip().lower()
            runtime = sink.choice(key, backend, _RUNTIMES)
            sink.set("inference.runtime", runtime, key)
            if backend in ("sglang", "ktransformers"):
                sink.unmodelled(key, f"{backend}'s memory pool is estimated as {runtime}'s")
        elif name == "model_name_or_path":
            sink.set("model", model_name(value), key)
        elif name in ("vllm_maxlen", "sglang_maxlen"):
            sink.set("inference.context", sink.int_(key, value), key)
        elif name in ("vllm_gpu_util", "sglang_mem_fraction"):
            sink.set("inference.gpu_memory_utilization", sink.num(key, value), key)
        elif name == "vllm_enforce_eager":
            sink.set("inference.cuda_graphs", not sink.bool_(key, value), key)
        elif name == "max_new_tokens":
            sink.set("inference.output_tokens", sink.int_(key, value), key)
        elif name == "infer_dtype":
            dtype = sink.choice(key, value, _INFER_DTYPES)
            if dtype is None:
                sink.ignore(key, "auto: the model's dtype (fmest's training.dtype default)")
            else:
                sink.set("training.dtype", dtype, key)
        elif name == "quantization_bit":
            bits = sink.choice(key, value, {4: "nf4", 8: "int8"})
            sink.set("inference.quantization", bits, key)
        elif name == "adapter_name_or_path":
            sink.unmodelled(key, "the LoRA adapter's weights are not counted (a small share "
                            "of the base)")
        else:
            sink.ignore(key, "a template, loading or sampling setting; no effect on serving "
                        "memory in fmest's model")


def map_config(doc: dict, sink: Sink) -> None:
    if "model" in doc and "model_name_or_path" not in doc:
        map_v1(doc, sink)
        return
    _not_training(doc, sink)
    if doc.get("infer_backend") is not None:
        _map_inference(doc, sink)
        return
    sink.set("training.stack", "unsloth" if str(doc.get("use_unsloth", "")).lower()
             in ("true", "1", "yes") else "hf-trainer", "(LLaMA-Factory config)")
    tech_key = "finetuning_type"
    ftype = str(doc.get("finetuning_type", "lora")).strip().lower()
    if "finetuning_type" not in doc:
        tech_key = "finetuning_type (unset: LLaMA-Factory default lora)"
    # FinetuningArguments.finetuning_type: Literal["lora", "oft", "freeze", "full"]
    tech = sink.choice("finetuning_type", ftype, {"lora": "lora", "full": "full",
                                                  "freeze": "full", "oft": "lora"})
    if ftype == "freeze":
        sink.unmodelled("finetuning_type", "freeze tuning (only some layers trained) is "
                        "estimated as full fine-tuning, an upper bound")
    elif ftype == "oft":
        sink.unmodelled("finetuning_type", "OFT (orthogonal fine-tuning) is estimated as LoRA "
                        "adapters of lora_rank on the oft_target modules")
    bits = doc.get("quantization_bit")
    if bits is not None:
        bits = sink.choice("quantization_bit", bits, {4: 4, 8: 8})
        if tech != "lora":
            raise sink.error("quantization_bit", "quantisation needs finetuning_type: lora",
                             value=bits, accepted=("lora",))
        tech = "qlora"
        sink.set("training.quantization_bits", bits, "quantization_bit")
    sink.set("training.technique", tech,
             f"{tech_key}+quantization_bit" if tech == "qlora" else tech_key)
    if tech in ("lora", "qlora"):
        rank = sink.int_("lora_rank", doc.get("lora_rank", 8))
        sink.set("training.lora_rank", rank,
                 "lora_rank" if "lora_rank" in doc else "lora_rank (unset: default 8)")
        if doc.get("lora_alpha") is None:
            sink.set("training.lora_alpha", float(rank * 2),
                     "lora_alpha (unset: LLaMA-Factory default lora_rank x 2)")
        target = "oft_target" if ftype == "oft" else "lora_target"
        if target not in doc:
            sink.set("training.lora_target_modules", ["all-linear"],
                     f"{target} (unset: LLaMA-Factory default all)")
    if not sink.bool_("disable_gradient_checkpointing",
                      doc.get("disable_gradient_checkpointing", False)):
        sink.set("training.activation_checkpointing", "full",
                 "disable_gradient_checkpointing" if "disable_gradient_checkpointing" in doc
                 else "disable_gradient_checkpointing (unset: LLaMA-Factory checkpoints by "
                      "default)")
    # TrainingArguments keys first, so LLaMA-Factory's own keys (pure_bf16 over bf16's amp,
    # disable_gradient_checkpointing over gradient_checkpointing) win.
    for name in [k for k, v in doc.items() if v is None and k not in ("lora_alpha",)]:
        sink.ignore(name, "null: not set (LLaMA-Factory's default)")
    doc = {k: v for k, v in doc.items() if v is not None or k == "lora_alpha"}
    rest = {k: v for k, v in doc.items() if k not in _OWN}
    for name in [k for k in rest if k in _IGNORED]:
        sink.ignore(name, _IGNORED[name])
    for name in [k for k in rest if k in _UNMODELLED_SWITCHES]:
        if sink.bool_(name, rest[name]):
            sink.unmodelled(name, _UNMODELLED_SWITCHES[name])
        else:
            sink.ignore(name, "false")
    for name in [k for k in rest if k in _UNMODELLED]:
        if name == "quantization_method" and str(rest[name]).strip().lower() in (
                "bnb", "bitsandbytes"):
            sink.ignore(name, "bitsandbytes: the block quantisation fmest models")
        else:
            sink.unmodelled(name, _UNMODELLED[name])
    for name in [k for k in rest if k.startswith(("galore_", "apollo_", "badam_"))]:
        switch = "use_" + name.split("_", 1)[0]
        if rest.get(switch) is not None and sink.bool_(switch, rest[switch]):
            sink.ignore(name, f"a {switch} setting (see {switch})")
        else:
            sink.ignore(name, f"no effect: {switch} is not true")
    for name in [k for k in rest if k in ("do_train", "do_eval", "do_predict")]:
        sink.ignore(name, "checked above: a training recipe")
    rest = {k: v for k, v in rest.items()
            if k not in _UNMODELLED_SWITCHES and k not in _UNMODELLED
            and not k.startswith(("galore_", "apollo_", "badam_"))
            and k not in ("do_train", "do_eval", "do_predict")}
    map_keys({k: v for k, v in rest.items() if k not in _IGNORED}, sink)
    for name, value in doc.items():
        key = name
        if name not in _OWN:
            continue
        if name == "model_name_or_path":
            sink.set("model", model_name(value), key)
        elif name in ("finetuning_type", "quantization_bit", "lora_rank"):
            if tech == "full" and name == "lora_rank":
                sink.ignore(key, "finetuning_type is not lora")
        elif name == "lora_alpha":
            if value is None:
                continue
            if tech == "full":
                sink.ignore(key, "finetuning_type is not lora")
            else:
                sink.set("training.lora_alpha", sink.num(key, value), key)
        elif name == "lora_dropout":
            # LLaMA-Factory FinetuningArguments lora_dropout (default 0.0) -> LoraConfig
            if tech == "full":
                sink.ignore(key, "finetuning_type is not lora")
            else:
                sink.set("training.lora_dropout",
                     0.0 if value in (0, "0", "0.0") else sink.num(key, value), key)
        elif name in ("lora_target", "oft_target"):
            targets = target_list(value)
            if (name == "oft_target") != (ftype == "oft"):
                sink.ignore(key, f"finetuning_type is {ftype}")
            elif tech == "full":
                sink.ignore(key, "finetuning_type is not lora")
            else:
                sink.set("training.lora_target_modules",
                         ["all-linear" if t == "all" else t for t in targets], key)
        elif name == "double_quantization":
            sink.set("training.double_quantization", sink.bool_(key, value), key)
        elif name == "cutoff_len":
            sink.set("training.seq_len", sink.int_(key, value), key)
        elif name == "flash_attn":
            attn = sink.choice(key, value, _FLASH)
            if attn is None:
                sink.ignore(key, "auto: FlashAttention-2 when installed, else SDPA; fmest keeps "
                            "sdpa (give --attn flash if installed)")
            else:
                sink.set("training.attention", attn, key)
        elif name == "enable_liger_kernel":
            # model/model_utils/liger_kernel.py: RoPE, RMSNorm, SwiGLU and fused linear CE
            sink.set_when_true("training.liger", True, key, value, "false: no Liger kernels")
            sink.set_when_true("training.loss", "fused", key, value, "false: standard loss")
        elif name == "freeze_vision_tower":
            # FinetuningArguments.freeze_vision_tower: default True (frozen)
            sink.set("training.train_vision_tower", not sink.bool_(key, value), key)
        elif name == "pure_bf16":
            if sink.bool_(key, value):
                sink.set("training.dtype", "bf16", key)
                sink.set("training.precision", "pure", key)
                if ftype in ("lora", "oft"):
                    # model/adapter.py init_adapter: pure_bf16 leaves
                    # cast_trainable_params_to_fp32 False, passed to get_peft_model as
                    # autocast_adapter_dtype: the adapters stay bf16 (hiyouga/LLaMA-Factory
                    # ff6d4d12e src/llamafactory/model/adapter.py)
                    sink.set("training.lora_adapter_dtype", "compute", key)
            else:
                sink.ignore(key, "false: bf16 autocast over fp32 trainable weights (see bf16)")
        elif name == "disable_gradient_checkpointing":
            if sink.bool_(key, value):
                sink.set("training.activation_checkpointing", "none", key)
        elif name == "use_unsloth_gc":
            sink.set_when_true("training.activation_offload", True, key, value)
        elif name in ("packing", "neat_packing"):
            sink.bool_(key, value)
            sink.set("training.padding", _padding(doc), key)
            if _padding(doc) == "packed" and (name == "neat_packing"
                                               or not doc.get("neat_packing")):
                # neat_packing: "Enable sequence packing without cross-attention"
                # (src/llamafactory/hparams/data_args.py line 112 @ ff6d4d12e); packing alone
                # concatenates samples under one causal mask
                sink.set("training.packed_attention",
                         "document" if doc.get("neat_packing") else "sequence", key)
        elif name == "stage":
            stage = str(value).strip().lower()
            if stage in ("sft", "pt"):
                sink.set("training.padding", _padding(doc), key)
            elif stage in ("dpo", "kto"):
                _preference(doc, sink, key, stage)
            else:
                sink.unmodelled(key, f"{stage}: reference/reward/value models and generation of "
                                "this stage are not modelled; the estimate is for the trained "
                                "model's step alone")
        elif name == "sequence_parallel_size":
            sink.set("parallelism.cp", sink.int_(key, value), key)


def _padding(doc: dict) -> str:
    """How LLaMA-Factory forms batches: ``packing`` defaults to on for stage pt only
    (src/llamafactory/hparams/parser.py: ``data_args.packing = data_args.packing if not None
    else finetuning_args.stage == "pt"``; neat_packing packs too), else the SFT collator pads
    each batch to its longest sample (SFTDataCollatorWith4DAttentionMask, pad_to_multiple_of=8,
    src/llamafactory/train/sft/workflow.py; hiyouga/LLaMA-Factory
    3602360a562313afbf2ef6065fdf61f271a2c5b9)."""
    stage = str(doc.get("stage") or "sft").strip().lower()
    packing = doc.get("packing")
    if doc.get("neat_packing") or (packing if packing is not None else stage == "pt"):
        return "packed"
    return "longest"


def _preference(doc: dict, sink: Sink, key: str, stage: str) -> None:
    """``stage: dpo`` / ``kto`` -> training.objective and reference_model (fmest.objectives), as
    LLaMA-Factory resolves them (hiyouga/LLaMA-Factory at ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30,
    ``hparams/finetuning_args.py``: ``use_ref_model = stage == "dpo" and pref_loss not in
    ["orpo", "simpo"]``, ``pref_loss`` default ``sigmoid``; ``train/trainer_utils.py``
    ``create_ref_model``: the ``ref_model`` path when given, else None for LoRA (the trainers
    disable the adapter for the reference pass) and a frozen copy of the model otherwise;
    ``train/kto/trainer.py``: a no-grad KL pass)."""
    pref = str(doc.get("pref_loss", "sigmoid")).strip().lower()
    if stage == "kto":
        objective, why = "kto", key
    elif pref in ("orpo", "simpo"):
        objective, why = pref, f"{key}+pref_loss"
    else:   # sigmoid, hinge, ipo, kto_pair, bco ...: DPO-style pairs with a reference
        objective, why = "dpo", key
    sink.set("training.objective", objective, why)
    if objective not in ("dpo", "kto"):
        return
    ftype = str(doc.get("finetuning_type", "lora")).strip().lower()
    if doc.get("ref_model"):
        sink.set("training.reference_model", "copy", "ref_model")
    elif ftype in ("lora", "oft"):
        sink.set("training.reference_model", "adapter",
                 "finetuning_type" if "finetuning_type" in doc else
                 "finetuning_type (unset: lora)")
    else:
        sink.set("training.reference_model", "copy", "finetuning_type")


# -- the v1 format ------------------------------------------------------------------------------
#: v1 top-level keys with no effect on memory, time or cost
_V1_IGNORED = {
    "model_class": "the Auto class used to load the model (llm/cls/other)",
    "trust_remote_code": "loading only", "custom_chat_template": DATA,
    "init_config": "model initialisation (meta device / rank 0); not the training footprint",
    "train_dataset": DATA, "eval_dataset": DATA, "output_dir": LOGGING,
    "learning_rate": HYPERPARAM, "max_grad_norm": HYPERPARAM, "seed": LOGGING,
    "full_determinism": LOGGING, "resume_from_checkpoint": LOGGING, "save_steps": LOGGING,
    "save_epochs": LOGGING, "save_ckpt_as_hf": LOGGING, "save_total_limit": LOGGING,
    "logging_steps": LOGGING, "lr_scheduler_config": HYPERPARAM, "dist_timeout": "launch setting",
    "pref_loss": HYPERPARAM, "pref_beta": HYPERPARAM, "pref_ftx": HYPERPARAM,
    "simpo_gamma": HYPERPARAM, "dpo_label_smoothing": HYPERPARAM, "ld_alpha": HYPERPARAM,
    "batching_strategy": "padding-free / dynamic batching fills cutoff_len; fmest sizes "
                         "activations at cutoff_len",
    "batching_workers": DATA, "cp_mode": "Ulysses and ring context parallelism split the same "
                                         "activations in fmest's model",
    "sample_backend": "sampling after training; not the training footprint",
    "max_new_tokens": "sampling after training; not the training footprint",
}
_V1_DIST = {"fsdp2": "full_shard", "fsdp": "full_shard", "fsdpturbo": "full_shard"}


def _plugin(sink: Sink, key: str, value: Any) -> dict:
    """A v1 ``*_config`` plugin table (v1/config/arg_utils.py ``get_plugin_config``: a mapping
    with ``name``, or a bare name string)."""
    if isinstance(value, str):
        return {"name": value}
    table = sink.mapping(key, value)
    if "name" not in table:
        raise sink.error(f"{key}.name", "a plugin table needs a name")
    return table


def _v1_peft(sink: Sink, key: str, table: dict) -> None:
    name = str(table["name"]).strip().lower()
    if name == "freeze":
        sink.set("training.technique", "full", f"{key}.name")
        sink.unmodelled(f"{key}.name", "freeze tuning (only some layers trained) is estimated "
                        "as full fine-tuning, an upper bound")
        for k in table:
            if k != "name":
                sink.ignore(f"{key}.{k}", "a freeze-tuning setting (see name)")
        return
    if name != "lora":
        raise sink.error(f"{key}.name", "not a PEFT method fmest models", value=table["name"],
                         accepted=("lora", "freeze"))
    quant = sink.get("training.quantization_bits")
    sink.set("training.technique", "qlora" if quant else "lora", f"{key}.name")
    for k, v in table.items():
        sub = f"{key}.{k}"
        if k == "name":
            continue
        if v is None:
            sink.ignore(sub, "null: the plugin's default")
        elif k == "r":
            sink.set("training.lora_rank", sink.int_(sub, v), sub)
        elif k == "lora_alpha":
            sink.set("training.lora_alpha", sink.num(sub, v), sub)
        elif k == "target_modules":
            targets = target_list(v)
            sink.set("training.lora_target_modules",
                     ["all-linear" if t == "all" else t for t in targets], sub)
        elif k in ("lora_dropout",):
            sink.set("training.lora_dropout",
                     0.0 if v in (0, "0", "0.0") else sink.num(sub, v), sub)
        elif k in ("adapter_name_or_path",):
            sink.ignore(sub, "adapter loading only")
        else:
            sink.unmodelled(sub, "a PEFT option fmest does not model (plain LoRA assumed)")


def _v1_dist(sink: Sink, key: str, table: dict) -> None:
    name = str(table["name"]).strip().lower()
    if name == "deepspeed":
        from fmest.configs import deepspeed

        if table.get("config_file"):
            sink.include(f"{key}.config_file", table["config_file"], deepspeed.FORMAT)
        else:
            sink.ignore(f"{key}.name", "deepspeed without config_file: ZeRO stage unknown")
        sink.set("training.stack", "deepspeed", f"{key}.name")
    elif name in _V1_DIST:
        sink.set("parallelism.fsdp", _V1_DIST[name], f"{key}.name")
    else:
        raise sink.error(f"{key}.name", "not a distributed backend fmest models",
                         value=table["name"], accepted=("fsdp2", "fsdpturbo", "deepspeed"))
    for k, v in table.items():
        sub = f"{key}.{k}"
        if k in ("name", "config_file"):
            continue
        if k == "ep_size":
            sink.set("parallelism.ep", sink.int_(sub, v), sub)
        elif k in ("dcp_path", "ep_dispatcher"):
            sink.ignore(sub, "checkpoint conversion / dispatch detail; same memory")
        else:
            sink.unmodelled(sub, "a distributed option fmest does not model")


def _v1_kernel(sink: Sink, key: str, table: dict) -> None:
    names = [n.strip().lower() for n in str(table["name"]).split(",") if n.strip()]
    if "liger_kernel" in names:
        sink.set("training.liger", True, f"{key}.name")
        sink.set("training.loss", "fused", f"{key}.name")
    other = [n for n in names if n != "liger_kernel"]
    if other:
        sink.unmodelled(f"{key}.name", f"kernels {other} are not modelled (auto: the kernels "
                        "installed; unfused ops assumed)")
    for k in table:
        if k != "name":
            sink.ignore(f"{key}.{k}", "a kernel option (see name)")


def map_v1(doc: dict, sink: Sink) -> None:
    """The v1 format (src/llamafactory/v1/config/{model,training}_args.py @ff6d4d12): full
    fine-tuning unless ``peft_config`` names lora; defaults that differ from fmest's are set
    when unset: ``bf16: true``, ``enable_activation_checkpointing: true``, ``cutoff_len:
    2048``, ``num_train_epochs: 3``."""
    peft = doc.get("peft_config")
    if isinstance(peft, dict) and peft.get("export_dir") not in (None, ""):
        raise sink.not_training("peft_config.export_dir", "merge", "the v1 export recipe merges "
                                "adapter_name_or_path into the model")
    sink.set("training.stack", "hf-trainer", "(LLaMA-Factory v1 config)")
    sink.set("training.technique", "full", "peft_config (unset: full fine-tuning)")
    defaults = (("bf16", True), ("enable_activation_checkpointing", True),
                ("cutoff_len", 2048), ("num_train_epochs", 3))
    for name, value in defaults:
        if name not in doc:
            _v1_key(sink, name, value, f"{name} (unset: LLaMA-Factory v1 default {value})")
    quant = doc.get("quant_config")
    if quant is not None:
        table = _plugin(sink, "quant_config", quant)
        bits = sink.choice("quant_config.quantization_bit", table.get("quantization_bit", 4),
                           {4: 4, 8: 8})
        sink.set("training.quantization_bits", bits, "quant_config.quantization_bit")
        for k in table:
            if k not in ("quantization_bit",):
                sink.ignore(f"quant_config.{k}", "bitsandbytes (bnb) or auto: fmest models a "
                            "block-quantised base by its bit width")
    for name, value in doc.items():
        _v1_key(sink, name, value, name)
    if quant is not None and sink.get("training.technique") != "qlora":
        raise sink.error("quant_config", "a quantised base needs peft_config: {name: lora}",
                         value=quant)


def _v1_key(sink: Sink, name: str, value: Any, key: str) -> None:
    if value is None:
        sink.ignore(key, "null: not set (the v1 default)")
    elif name == "model":
        sink.set("model", model_name(value), key)
    elif name == "flash_attn":
        map_attention(sink, key, value)
    elif name == "peft_config":
        _v1_peft(sink, key, _plugin(sink, key, value))
    elif name == "dist_config":
        _v1_dist(sink, key, _plugin(sink, key, value))
    elif name == "kernel_config":
        _v1_kernel(sink, key, _plugin(sink, key, value))
    elif name == "optim_config":
        table = _plugin(sink, key, value)
        map_optimizer(sink, f"{key}.name", table["name"])
        for k in table:
            if k != "name":
                sink.ignore(f"{key}.{k}", HYPERPARAM)
    elif name == "quant_config":
        pass   # read first, in map_v1
    elif name == "micro_batch_size":
        sink.set("training.micro_batch_size", sink.int_(key, value), key)
    elif name == "global_batch_size":
        sink.train_batch.append((sink.int_(key, value), key))
    elif name == "cutoff_len":
        sink.set("training.seq_len", sink.int_(key, value), key)
    elif name == "num_train_epochs":
        sink.set("workload.epochs", sink.num(key, value), key)
    elif name == "max_steps":
        sink.set("workload.max_steps", sink.int_(key, value), key)
    elif name == "bf16":
        sink.set("training.dtype", "bf16" if sink.bool_(key, value) else "fp32", key)
    elif name == "enable_activation_checkpointing":
        sink.set("training.activation_checkpointing",
                 "full" if sink.bool_(key, value) else "none", key)
    elif name == "dp_size":
        sink.set("parallelism.dp", sink.int_(key, value), key)
    elif name == "cp_size":
        sink.set("parallelism.cp", sink.int_(key, value), key)
    elif name in ("mp_replicate_size", "mp_shard_size"):
        if sink.int_(key, value) == 1 and name == "mp_replicate_size":
            sink.ignore(key, "1: no replication (plain FSDP)")
        else:
            sink.unmodelled(key, "hybrid sharding sizes are not modelled (all GPUs shard)")
    elif name in _V1_IGNORED:
        sink.ignore(key, _V1_IGNORED[name])
    else:
        sink.ignore(key, "not a v1 key fmest knows; no effect assumed")
