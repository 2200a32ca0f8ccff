"""TRL trainer configs and alignment-handbook recipes (``trl sft --config x.yaml``,
``accelerate launch scripts/run_sft.py recipes/.../config_full.yaml``) -> stack ``trl``
(an alias of ``hf-trainer``).

One YAML holds TRL's ``ModelConfig`` (huggingface/trl at commit
f2cd57710ae345ea6428ae95363267fcf38a3dc8, ``trl/trainer/model_config.py``:
``model_name_or_path``, ``torch_dtype``/``dtype``, ``attn_implementation``, ``use_peft``,
``lora_*``, ``load_in_4bit``/``load_in_8bit``), the script/data arguments
(``trl/scripts/utils.py``; alignment-handbook's ``dataset_mixer`` / ``dataset_mixture``) and
the trainer config (``sft_config.py``: ``max_length``, formerly ``max_seq_length``,
``packing``, ``padding_free``, ``activation_offloading``; ``dpo_config.py``: ``beta``,
``loss_type``, ``precompute_ref_log_probs``; ``grpo_config.py``: ``num_generations``,
``max_completion_length``, ``use_vllm``). The rest is transformers ``TrainingArguments``,
mapped by :func:`fmest.configs.training_args.map_keys`.

DPO, KTO and ORPO recipes set ``training.objective`` (fmest.objectives: the chosen and
rejected sequences of a pair, KTO's KL pass) and DPO/KTO ``training.reference_model`` as TRL
resolves it (``dpo_trainer.py``): ``precomputed`` with ``precompute_ref_log_probs``, ``none``
with ``reference_free``, ``adapter`` for a PEFT model (its adapters disabled for the reference
pass; ``ref_adapter_name`` a second small adapter), ``copy`` otherwise or with
``force_use_ref_model``. GRPO's generations (``num_generations`` completions of
``max_completion_length`` tokens, vLLM's memory when ``use_vllm``) are reported as not
modelled; the estimate is then the policy's training step.
"""

from __future__ import annotations

import os
from typing import Any

from fmest.configs._base import (
    DATA,
    HYPERPARAM,
    LOGGING,
    Sink,
    model_name,
    set_modules_to_save,
    target_list,
)
from fmest.configs.training_args import map_keys

FORMAT = "trl"

#: keys of TRL's ModelConfig / ScriptArguments / alignment-handbook that TrainingArguments
#: and the other formats do not have (detection, with model_name_or_path)
KEYS = frozenset({"use_peft", "lora_target_modules", "torch_dtype", "attn_implementation",
                  "dataset_mixer", "dataset_mixture", "dataset_name", "max_prompt_length",
                  "num_generations", "use_bnb_nested_quant", "dataset_train_split"})

_ATTENTION = {"flash_attention_2": "flash", "flash_attention_3": "flash",
              "kernels-community/flash-attn": "flash", "kernels-community/flash-attn3": "flash",
              "kernels-community/vllm-flash-attn3": "flash", "sdpa": "sdpa", "eager": "eager",
              "flex_attention": "sdpa"}
_DTYPE = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16",
          "float32": "fp32", "fp32": "fp32", "auto": None}
_DATA_KEYS = {"dataset_name", "dataset_config", "dataset_train_split", "dataset_test_split",
              "dataset_streaming", "dataset_mixer", "dataset_mixture", "dataset_splits",
              "dataset_num_proc", "dataset_text_field", "dataset_kwargs", "dataset_configs",
              "chat_template", "chat_template_path", "chat_template_kwargs",
              "preprocessing_num_workers", "truncation_side", "truncation_mode",
              "auto_insert_empty_system_msg", "eos_token", "pad_token", "shuffle_dataset",
              "completion_only_loss", "assistant_only_loss",
              "pad_to_multiple_of", "padding_value", "label_pad_token_id", "max_target_length",
              "remove_unused_columns", "text_column"}
_LOADING = {"model_revision", "trust_remote_code", "model_init_kwargs", "hub_model_revision",
            "tokenizer_name_or_path", "ignore_bias_buffers", "lora_task_type",
            "bnb_4bit_quant_storage", "ref_model_init_kwargs", "model_adapter_name"}
_HYPER = {"beta", "label_smoothing", "rpo_alpha", "loss_weights", "ld_alpha",
          "f_divergence_type", "f_alpha_divergence_coef", "use_weighting", "discopop_tau",
          "use_rslora", "disable_dropout", "router_aux_loss_coef",
          "desirable_weight", "undesirable_weight", "epsilon", "epsilon_high", "delta",
          "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "reward_weights",
          "scale_rewards", "num_iterations", "importance_sampling_level",
          "mask_truncated_completions", "cpo_alpha", "simpo_gamma", "loss_type"}
_LOG = {"generate_during_eval", "log_completions", "num_completions_to_print",
        "eval_packing", "num_generations_eval", "log_level_replica"}


def _trl_packed_attention(doc: dict) -> str:
    """What attention sees in TRL's packed rows: padding-free batches keep each sample causally
    isolated (position_ids for FlashAttention varlen), and ``packing`` with the default
    ``packing_strategy`` ``bfd`` (or ``bfd_split``) turns padding-free on whatever
    ``padding_free`` says; ``wrapped`` packing without it concatenates samples under one causal
    mask (huggingface/trl f2cd57710ae345ea6428ae95363267fcf38a3dc8 trl/trainer/sft_config.py
    lines 81-89, trl/trainer/sft_trainer.py DataCollatorForLanguageModeling)."""
    if doc.get("padding_free"):
        return "document"
    strategy = str(doc.get("packing_strategy") or "bfd").strip().lower()
    return "document" if strategy in ("bfd", "bfd_split", "bfd-requeue") else "sequence"

def detect(doc: dict) -> bool:
    return "model_name_or_path" in doc and bool(set(doc) & KEYS)


def _trainer(sink: Sink, doc: dict) -> tuple[str, str]:
    """Which TRL trainer the recipe is for: (kind, why)."""
    path = sink.name.replace("\\", "/").lower()
    parts = path.split("/")
    base = os.path.basename(path)
    for kind in ("grpo", "orpo", "kto", "dpo", "sft"):
        if kind in parts[:-1] or base.startswith(kind) or f"_{kind}" in base:
            return kind, f"(file path: {kind})"
    if "num_generations" in doc or "use_vllm" in doc:
        return "grpo", "num_generations"
    for k in ("beta", "max_prompt_length", "precompute_ref_log_probs", "reference_free"):
        if k in doc:
            return "dpo", k
    return "sft", "(no preference or RL keys: SFT)"


def _flag(doc: dict, key: str, sink: Sink) -> bool:
    value = doc.get(key)
    return value is not None and sink.bool_(key, value)


def map_config(doc: dict, sink: Sink) -> None:
    sink.set("training.stack", "trl", "(TRL / alignment-handbook recipe)")
    kind, why = _trainer(sink, doc)
    peft = _flag(doc, "use_peft", sink)
    four, eight = _flag(doc, "load_in_4bit", sink), _flag(doc, "load_in_8bit", sink)
    if four and eight:
        raise sink.error("load_in_8bit", "load_in_4bit and load_in_8bit are both true (TRL's "
                         "ModelConfig refuses it)", value=True, accepted=("one of them",))
    if (four or eight) and not peft:
        raise sink.error("load_in_4bit" if four else "load_in_8bit", "a quantised base trains "
                         "only adapters: set use_peft: true", value=True,
                         accepted=("use_peft: true",))
    technique = "qlora" if (four or eight) else ("lora" if peft else "full")
    sink.set("training.technique", technique,
             "use_peft+load_in_4bit" if four else "use_peft+load_in_8bit" if eight else
             ("use_peft" if peft else ("use_peft (unset: TRL default false)"
                                       if "use_peft" not in doc else "use_peft")))
    if technique == "qlora":
        sink.set("training.quantization_bits", 4 if four else 8,
                 "load_in_4bit" if four else "load_in_8bit")
    if peft:
        if "lora_r" not in doc:
            sink.set("training.lora_rank", 16, "lora_r (unset: TRL ModelConfig default 16)")
        if "lora_alpha" not in doc:
            sink.set("training.lora_alpha", 32.0, "lora_alpha (unset: TRL default 32)")
        if "lora_dropout" not in doc:
            # huggingface/trl f2cd57710ae345ea6428ae95363267fcf38a3dc8
            # trl/trainer/model_config.py ModelConfig.lora_dropout = 0.05
            sink.set("training.lora_dropout", 0.05,
                     "lora_dropout (unset: TRL ModelConfig default 0.05)")

    own: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for name, value in doc.items():
        (own if name in _OWN else rest)[name] = value
    for name, value in own.items():
        key = name
        if name == "model_name_or_path":
            sink.set("model", model_name(value), key)
        elif name in ("torch_dtype", "dtype") and value is None:
            sink.ignore(key, "null: the checkpoint's dtype; bf16/fp16 set the compute dtype")
        elif name in ("torch_dtype", "dtype"):
            dtype = sink.choice(key, str(value).strip().lower().replace("torch.", ""), _DTYPE)
            if dtype is None:
                sink.ignore(key, "auto: the checkpoint's dtype; bf16/fp16 below set the "
                            "compute dtype")
            elif "bf16" in doc or "fp16" in doc:
                sink.ignore(key, f"{value}: the loading dtype; bf16/fp16 set the training "
                            "precision")
            else:
                sink.set("training.dtype", dtype, key)
                sink.set("training.precision", "pure", key)
        elif name == "attn_implementation":
            if value is None:
                sink.ignore(key, "null: transformers' default (sdpa)")
            else:
                sink.set("training.attention", sink.choice(key, str(value).strip(),
                                                           _ATTENTION), key)
        elif name in ("use_peft", "load_in_4bit", "load_in_8bit"):
            if not _flag(doc, name, sink):
                sink.ignore(key, "false")
        elif name == "lora_r":
            if peft:
                sink.set("training.lora_rank", sink.int_(key, value), key)
            else:
                sink.ignore(key, "use_peft is false: full fine-tuning")
        elif name == "lora_alpha":
            if peft:
                sink.set("training.lora_alpha", sink.num(key, value), key)
            else:
                sink.ignore(key, "use_peft is false: full fine-tuning")
        elif name == "lora_dropout":
            if peft:
                sink.set("training.lora_dropout",
                     0.0 if value in (0, "0", "0.0") else sink.num(key, value), key)
            else:
                sink.ignore(key, "use_peft is false: full fine-tuning")
        elif name == "lora_target_modules":
            if not peft:
                sink.ignore(key, "use_peft is false: full fine-tuning")
            elif value is None:
                sink.ignore(key, "null: PEFT's default target modules for the model type")
            else:
                targets = ["all-linear"] if value == "all-linear" else target_list(value)
                sink.set("training.lora_target_modules", targets, key)
        elif name == "lora_modules_to_save":
            if not peft:
                sink.ignore(key, "use_peft is false: full fine-tuning")
            else:
                set_modules_to_save(sink, key, value)
        elif name == "lora_target_parameters":
            if value:
                sink.unmodelled(key, "fully trained extra parameters are not counted; the "
                                "estimate trains the LoRA adapters only")
            else:
                sink.ignore(key, "null: none")
        elif name == "use_dora":
            if peft and _flag(doc, name, sink):
                sink.unmodelled(key, "DoRA's magnitude vectors and extra weight-norm pass are "
                                "not modelled; estimated as LoRA")
            else:
                sink.ignore(key, "false or no PEFT")
        elif name in ("bnb_4bit_quant_type",):
            sink.ignore(key, "fmest models NF4 and FP4 bases alike by bit width")
        elif name == "use_bnb_nested_quant":
            sink.set("training.double_quantization", sink.bool_(key, value), key)
        elif name in ("max_length", "max_seq_length"):
            if value is None:
                sink.ignore(key, "null: no truncation; fmest uses --seq-len or its default")
            elif name == "max_seq_length" and "max_length" in doc:
                sink.ignore(key, "the old name of max_length, which is given too")
            else:
                sink.set("training.seq_len", sink.int_(key, value), key)
        elif name in ("packing", "padding_free"):
            # SFTConfig packing / padding_free default False: the collator
            # (DataCollatorForLanguageModeling) pads each batch to its longest sample
            # (huggingface/trl f2cd57710ae345ea6428ae95363267fcf38a3dc8
            # trl/trainer/sft_config.py, sft_trainer.py); packed / padding-free batches
            # concatenate samples into fixed rows (issue 20)
            on = value is not None and sink.bool_(key, value)
            if on:
                sink.set("training.padding", "packed", key)
                sink.set("training.packed_attention", _trl_packed_attention(doc), key)
            elif sink.get("training.padding") is None:
                sink.set("training.padding", "longest", key)
            else:
                sink.ignore(key, "false; the other of packing / padding_free is on")
        elif name == "packing_strategy":
            if doc.get("packing") or doc.get("padding_free"):
                sink.set("training.packed_attention", _trl_packed_attention(doc), key)
            else:
                sink.ignore(key, "packing is off")
        elif name == "activation_offloading":
            sink.set("training.activation_offload", sink.bool_(key, value), key)
        elif name in ("max_prompt_length", "max_completion_length"):
            if kind == "grpo" and name == "max_completion_length":
                continue   # in the GRPO note below
            sink.ignore(key, "a part of max_length (which sets the sequence length)")
        elif name in ("precompute_ref_log_probs", "reference_free", "ref_adapter_name",
                      "force_use_ref_model", "sync_ref_model", "ref_model_mixup_alpha",
                      "ref_model_sync_steps", "precompute_ref_batch_size"):
            continue   # in the reference-model note below
        elif name in ("num_generations", "use_vllm", "vllm_mode", "vllm_gpu_memory_utilization",
                      "vllm_tensor_parallel_size", "generation_batch_size",
                      "steps_per_generation", "vllm_max_model_length"):
            continue   # in the GRPO note below
        elif name in _DATA_KEYS:
            sink.ignore(key, DATA)
        elif name in _LOADING:
            sink.ignore(key, "loading only")
        elif name == "loss_type" and kind == "sft":
            continue   # after TrainingArguments (use_liger_kernel): _sft_loss
        elif name in _HYPER:
            sink.ignore(key, HYPERPARAM)
        elif name in _LOG:
            sink.ignore(key, LOGGING)
    map_keys(rest, sink)
    if kind == "sft":
        _sft_loss(doc, sink)
    _notes(kind, why, doc, peft, sink)


#: SFTConfig ``loss_type`` values (huggingface/trl f2cd57710ae345ea6428ae95363267fcf38a3dc8
#: trl/trainer/sft_config.py): ``chunked_nll`` never materialises the logits
#: (sft_trainer.py ``_chunked_cross_entropy_loss``: the ``lm_head`` projection and the
#: cross-entropy of 256 valid tokens at a time, ``_CHUNKED_LM_HEAD_CHUNK_SIZE``, each chunk
#: under gradient checkpointing): fmest's ``fused`` loss; ``nll`` and ``dft`` project every
#: token: ``standard``
_SFT_LOSSES = {"chunked_nll": "fused", "nll": "standard", "dft": "standard"}


def _sft_loss(doc: dict, sink: Sink) -> None:
    """The SFT trainer's loss: ``loss_type``, unset -> ``chunked_nll`` (TRL >= 1.7.0, commit
    b58947c7e "Default SFT loss to chunked_nll", 2026-06-14) unless ``use_liger_kernel``
    (then ``nll``, and Liger's fused linear cross-entropy, set by TrainingArguments)."""
    liger = sink.get("training.liger") is True
    if "loss_type" not in doc:
        if not liger:
            sink.set("training.loss", "fused", "loss_type (unset: TRL >= 1.7 SFT default "
                     "chunked_nll, the lm_head and cross-entropy in 256-token chunks without "
                     "the logits; before 1.7 the default was nll: --loss standard)")
        return
    value = sink.choice("loss_type", str(doc["loss_type"]).strip().lower(), _SFT_LOSSES)
    if value == "fused" and liger:
        raise sink.error("loss_type", "chunked_nll is not compatible with use_liger_kernel "
                         "(TRL's SFTTrainer refuses it)", value=doc["loss_type"],
                         accepted=("nll", "dft", "use_liger_kernel: false"))
    if liger:
        sink.ignore("loss_type", f"{doc['loss_type']}: Liger's fused linear cross-entropy "
                    "(use_liger_kernel) computes it")
    else:
        sink.set("training.loss", value, "loss_type")


def _notes(kind: str, why: str, doc: dict, peft: bool, sink: Sink) -> None:
    """What the preference / RL trainer adds beyond the policy's training step."""
    if kind == "sft":
        return
    if kind in ("dpo", "kto", "orpo"):
        # fmest.objectives: DPO/ORPO run chosen + rejected sequences, KTO a KL pass
        sink.set("training.objective", kind, why)
    if kind in ("dpo", "kto"):
        skip = [k for k in ("precompute_ref_log_probs", "reference_free")
                if doc.get(k) is not None and sink.bool_(k, doc[k])]
        if skip:
            sink.set("training.reference_model",
                     "precomputed" if skip[0] == "precompute_ref_log_probs" else "none", skip[0])
        elif peft and doc.get("force_use_ref_model") is not None \
                and sink.bool_("force_use_ref_model", doc["force_use_ref_model"]):
            sink.set("training.reference_model", "copy", "force_use_ref_model")
        elif peft:
            # no ref_model with a PEFT model: the adapters are disabled for the reference pass
            # (ref_adapter_name: a second adapter on the same base, a few MB)
            sink.set("training.reference_model", "adapter",
                     "ref_adapter_name" if doc.get("ref_adapter_name") else "use_peft")
        else:
            sink.set("training.reference_model", "copy", f"(reference model: {kind.upper()}, "
                     f"{why})")
    used = {part for _, key in sink.values.values() for part in key.split("+")}
    for k in ("ref_adapter_name", "force_use_ref_model", "sync_ref_model",
              "ref_model_mixup_alpha", "ref_model_sync_steps", "precompute_ref_batch_size"):
        if k in doc and k not in used:
            sink.ignore(k, "a reference-model setting with no memory or step-time effect "
                        "(synchronisation cadence, mixing, precompute batch)")
    if kind == "grpo":
        n = doc.get("num_generations", 8)
        comp = doc.get("max_completion_length", 256)
        sink.unmodelled("num_generations" if "num_generations" in doc else
                        f"(GRPO generations, {why})",
                        f"GRPO samples {n} completions of up to {comp} tokens per prompt "
                        "before each update: the generation time and its KV cache are not "
                        "counted; the estimate is the policy's training step on "
                        "prompt+completion sequences")
        if "max_completion_length" in doc:
            sink.ignore("max_completion_length", "in the num_generations note")
        if doc.get("use_vllm") is not None and sink.bool_("use_vllm", doc["use_vllm"]):
            util = doc.get("vllm_gpu_memory_utilization", 0.3)
            sink.unmodelled("use_vllm", f"vLLM generates the completions; in colocate mode it "
                            f"takes vllm_gpu_memory_utilization ({util}) of each GPU's memory, "
                            "in server mode separate GPUs: neither is counted")
        elif "use_vllm" in doc:
            sink.ignore("use_vllm", "false: generation with the policy's own weights")
        for k in ("vllm_mode", "vllm_gpu_memory_utilization", "vllm_tensor_parallel_size",
                  "generation_batch_size", "steps_per_generation", "vllm_max_model_length"):
            if k in doc:
                sink.ignore(k, "generation detail; see the use_vllm / num_generations notes")
        beta = doc.get("beta", 0.0)
        if beta not in (None, 0, 0.0) and not peft:
            sink.unmodelled("beta", f"beta {beta} > 0: GRPO keeps a frozen reference model "
                            "for the KL term (its weights and a forward pass are not counted)")
    else:
        for k in ("num_generations", "use_vllm", "vllm_mode", "vllm_gpu_memory_utilization",
                  "vllm_tensor_parallel_size", "generation_batch_size",
                  "steps_per_generation", "vllm_max_model_length"):
            if k in doc:
                sink.ignore(k, f"a generation setting; not used by {kind.upper()}")


_OWN = frozenset({
    "model_name_or_path", "torch_dtype", "dtype", "attn_implementation", "use_peft",
    "load_in_4bit", "load_in_8bit", "lora_r", "lora_alpha", "lora_dropout",
    "lora_target_modules",
    "lora_modules_to_save", "lora_target_parameters", "use_dora", "bnb_4bit_quant_type",
    "use_bnb_nested_quant", "max_length", "max_seq_length", "packing", "padding_free",
    "packing_strategy", "activation_offloading", "max_prompt_length", "max_completion_length",
    "precompute_ref_log_probs", "reference_free", "ref_adapter_name", "force_use_ref_model",
    "sync_ref_model", "ref_model_mixup_alpha", "ref_model_sync_steps",
    "precompute_ref_batch_size", "num_generations", "use_vllm", "vllm_mode",
    "vllm_gpu_memory_utilization", "vllm_tensor_parallel_size", "generation_batch_size",
    "steps_per_generation", "vllm_max_model_length",
}) | _DATA_KEYS | _LOADING | _HYPER | _LOG


__all__ = ["FORMAT", "detect", "map_config"]
