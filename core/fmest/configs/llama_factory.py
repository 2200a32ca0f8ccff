"""LLaMA-Factory training YAML (``llamafactory-cli train config.yaml``).

Schema: https://llamafactory.readthedocs.io/en/latest/advanced/arguments.html and
``src/llamafactory/hparams/{model,data,finetuning}_args.py``; the rest of the file is
transformers ``Seq2SeqTrainingArguments``, mapped by :mod:`fmest.configs.training_args`.
LLaMA-Factory defaults that differ from fmest's are applied when the file leaves them unset:
``finetuning_type: lora``, ``lora_rank: 8``, ``lora_alpha: 2 x lora_rank``,
``lora_target: all`` and gradient checkpointing on (``disable_gradient_checkpointing: false``).
"""

from __future__ import annotations

from fmest.configs._base import DATA, HYPERPARAM, LOGGING, Sink, model_name, target_list
from fmest.configs.training_args import map_keys

FORMAT = "llama-factory"

_FLASH = {"auto": None, "disabled": "eager", "sdpa": "sdpa", "fa2": "flash", "fa3": "flash"}
_OWN = frozenset({
    "model_name_or_path", "finetuning_type", "lora_rank", "lora_alpha", "lora_target",
    "quantization_bit", "double_quantization", "cutoff_len", "flash_attn",
    "enable_liger_kernel", "pure_bf16", "disable_gradient_checkpointing", "stage",
    "use_unsloth_gc", "sequence_parallel_size",
})
_IGNORED = {
    "template": DATA, "dataset": DATA, "dataset_dir": DATA, "eval_dataset": DATA,
    "max_samples": DATA, "val_size": DATA, "overwrite_cache": DATA, "packing": DATA,
    "neat_packing": DATA, "preprocessing_num_workers": DATA, "tokenized_path": DATA,
    "mix_strategy": DATA, "streaming": DATA, "buffer_size": DATA, "train_on_prompt": DATA,
    "mask_history": DATA, "interleave_probs": DATA, "media_dir": DATA,
    "dataloader_num_workers": DATA, "tool_format": DATA, "default_system": DATA,
    "enable_thinking": DATA, "image_max_pixels": DATA, "video_max_pixels": DATA,
    "trust_remote_code": "loading only", "cache_dir": "loading only",
    "model_revision": "loading only", "use_fast_tokenizer": "loading only",
    "adapter_name_or_path": "adapter loading only", "lora_dropout": HYPERPARAM,
    "loraplus_lr_ratio": HYPERPARAM, "pref_beta": HYPERPARAM, "pref_loss": HYPERPARAM,
    "pref_ftx": HYPERPARAM, "ref_model": "the DPO/PPO reference model is not modelled",
    "additional_target": "fully trained extra modules are not modelled; the estimate counts "
                         "LoRA adapters only",
    "use_dora": "DoRA's magnitude vectors are not modelled (estimated as LoRA)",
    "use_rslora": "a scaling rule; same memory", "pissa_init": "initialisation only",
    "pissa_iter": "initialisation only", "pissa_convert": "initialisation only",
    "create_new_adapter": "adapter bookkeeping only", "freeze_vision_tower": "vision towers are "
                                                                           "not modelled",
    "quantization_method": "fmest models bitsandbytes-style block quantisation",
    "quantization_type": "fmest models NF4/int8 bases alike by bit width",
    "upcast_layernorm": "layer-norm dtype; negligible memory",
    "upcast_lmhead_output": "fp32 logits; give --loss standard (the default) to count them",
    "rope_scaling": "position-encoding scaling; same memory at the given cutoff_len",
    "shift_attn": "S^2-attention is not modelled", "use_unsloth": "unsloth kernels are not "
                                                                  "modelled",
    "plot_loss": LOGGING, "use_badam": "BAdam's block-wise optimizer is not modelled",
    "use_galore": "GaLore's projected optimizer states are not modelled",
    "use_apollo": "APOLLO's optimizer states are not modelled",
    "freeze_trainable_layers": "freeze tuning is estimated as full fine-tuning",
    "freeze_trainable_modules": "freeze tuning is estimated as full fine-tuning",
    "freeze_extra_modules": "freeze tuning is estimated as full fine-tuning",
    "print_param_status": LOGGING, "infer_backend": "inference only", "export_dir": "export only",
    "moe_aux_loss_coef": HYPERPARAM, "include_effective_tokens_per_second": LOGGING,
}


def map_config(doc: dict, sink: Sink) -> None:
    sink.set("training.stack", "unsloth" if str(doc.get("use_unsloth", "")).lower()
             in ("true", "1", "yes") else "hf-trainer", "(LLaMA-Factory config)")
    tech_key = "finetuning_type"
    ftype = str(doc.get("finetuning_type", "lora")).strip().lower()
    if "finetuning_type" not in doc:
        tech_key = "finetuning_type (unset: LLaMA-Factory default lora)"
    tech = sink.choice("finetuning_type", ftype, {"lora": "lora", "full": "full",
                                                  "freeze": "full"})
    if ftype == "freeze":
        sink.ignore("finetuning_type", "freeze tuning (only some layers trained) is estimated "
                    "as full fine-tuning, an upper bound")
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
        if "lora_target" not in doc:
            sink.set("training.lora_target_modules", ["all-linear"],
                     "lora_target (unset: LLaMA-Factory default all)")
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
        elif name == "lora_target":
            targets = target_list(value)
            if tech == "full":
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
            sink.set_when_true("training.loss", "fused", key, value, "false: standard loss")
        elif name == "pure_bf16":
            if sink.bool_(key, value):
                sink.set("training.dtype", "bf16", key)
                sink.set("training.precision", "pure", key)
            else:
                sink.ignore(key, "false: bf16 autocast over fp32 trainable weights (see bf16)")
        elif name == "disable_gradient_checkpointing":
            if sink.bool_(key, value):
                sink.set("training.activation_checkpointing", "none", key)
        elif name == "use_unsloth_gc":
            sink.set_when_true("training.activation_offload", True, key, value)
        elif name == "stage":
            stage = str(value).strip().lower()
            if stage in ("sft", "pt"):
                sink.ignore(key, f"{stage}: plain causal-LM training, what fmest estimates")
            else:
                sink.ignore(key, f"{stage}: reference/reward/value models of this stage are not "
                            "modelled; the estimate is for the trained model alone")
        elif name == "sequence_parallel_size":
            sink.set("parallelism.cp", sink.int_(key, value), key)
