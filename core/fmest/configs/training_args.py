"""Hugging Face ``TrainingArguments`` dumps (``args.to_json_string()``, ``to_dict()``, YAML).

Field names: transformers ``training_args.py``
(https://huggingface.co/docs/transformers/main_classes/trainer#transformers.TrainingArguments).
The mapping itself is :func:`fmest.compat.fm_training_estimator.training_arguments_fields`
(shared with the EstimateInput reader), called key by key so each field knows its key; this
module adds the keys that reader leaves to ``--config``: ``deepspeed`` (the DeepSpeed file is
loaded too), ``fsdp_config`` (the FSDP options), ``torch_compile``, ``use_liger_kernel``, ``optim``
(every ``transformers.training_args.OptimizerNames`` value, transformers 5.24), and the keys
training scripts put beside TrainingArguments in one file: ``model_name_or_path`` (the model),
``attn_implementation`` (transformers ``ALL_ATTENTION_FUNCTIONS`` keys) and TRL's
``max_seq_length`` / ``max_length`` (``SFTConfig``: the training sequence length).
"""

from __future__ import annotations

from typing import Any

from fmest.compat.fm_training_estimator import training_arguments_fields
from fmest.compat.fm_training_estimator.reader import HALF_BOTH
from fmest.configs._base import Sink, join, model_name
from fmest.errors import InputError

FORMAT = "training-args"


def optimizer_name(value: Any) -> str:
    """HF ``optim`` as fmest's optimizer registry spells it (``OptimizerNames.ADAMW_TORCH`` in
    ``repr`` dumps -> ``adamw_torch``); the registry knows the HF names as aliases."""
    text = str(getattr(value, "value", value)).strip()
    if text.startswith("OptimizerNames."):
        text = text.split(".", 1)[1]
    return text.lower()


#: transformers ``OptimizerNames`` (and axolotl ``CustomSupportedOptimizers``) whose states
#: fmest cannot size: low-rank projected (GaLore, APOLLO, Q-GaLore), fused into backward (LOMO,
#: AdaLomo), or orthogonalised / extra-state (Muon, Dion, GrokAdamW, CAME, SinkGD, FlashOptim).
#: Each is answered with the optimizer on the right (AdamW states on the trainable parameters, or
#: the 8-bit / factored variant) and a not-modelled warning.
_UNMODELLED_OPTIMIZERS = (
    ("galore_adamw_8bit", "adamw_8bit"), ("galore_adafactor", "adafactor"),
    ("q_galore_adamw8bit", "adamw_8bit"), ("galore_", "adamw"), ("apollo_", "adamw"),
    ("adalomo", "adamw"), ("lomo", "adamw"), ("grokadamw", "adamw"), ("muon", "adamw"),
    ("dion", "adamw"), ("came_pytorch", "adafactor"), ("sinkgd", "adamw"),
    ("flash_adamw", "adamw"), ("flash_adam", "adamw"), ("flash_sgdw", "sgd_momentum"),
    ("flash_sgd", "sgd_momentum"), ("flash_lion", "lion"),
)
UNMODELLED_OPTIMIZER = ("estimated as {opt} states on the trainable parameters, an upper bound "
                        "({name} keeps projected, fused or otherwise smaller optimizer state "
                        "fmest does not model)")


def map_optimizer(sink: Sink, key: str, value: Any) -> None:
    """``optim`` / axolotl ``optimizer``: a registered optimizer name is set as given (the
    registry refuses unknown names listing the known ones); a projected / low-memory optimizer
    fmest cannot size is estimated with the optimizer :data:`_UNMODELLED_OPTIMIZERS` names and
    reported as not modelled."""
    name = optimizer_name(value)
    for prefix, stand_in in _UNMODELLED_OPTIMIZERS:
        if name.startswith(prefix):
            sink.set("training.optimizer", stand_in, key)
            sink.unmodelled(key, UNMODELLED_OPTIMIZER.format(opt=stand_in, name=name))
            return
    sink.set("training.optimizer", name, key)


#: ``attn_implementation`` -> training.attention: transformers 5.24 ``ALL_ATTENTION_FUNCTIONS``
#: (flash_attention_2/3/4, flex_attention, sdpa, eager; a ``paged|`` prefix is the generation
#: cache layout) and Hub kernels (``kernels-community/...flash-attn...``).
ATTN_IMPLEMENTATIONS = {"eager": "eager", "sdpa": "sdpa", "flash_attention_2": "flash",
                        "flash_attention_3": "flash", "flash_attention_4": "flash",
                        "flex_attention": "flash", "fa2": "flash", "fa3": "flash"}


def map_attention(sink: Sink, key: str, value: Any) -> None:
    """An ``attn_implementation`` value into ``training.attention``; flex attention (no stored
    s x s scores, like FlashAttention) is estimated as flash with a not-modelled warning."""
    text = str(getattr(value, "value", value)).strip().lower()
    base = text.split("|", 1)[1] if text.startswith("paged|") else text
    if base.startswith("kernels-community/") and "flash" in base:
        base = "flash_attention_2"
    if base not in ATTN_IMPLEMENTATIONS:
        raise sink.error(key, "not an attention implementation fmest knows", value=value,
                         accepted=list(ATTN_IMPLEMENTATIONS))
    sink.set("training.attention", ATTN_IMPLEMENTATIONS[base], key)
    if base == "flex_attention":
        sink.unmodelled(key, "flex_attention estimated as FlashAttention (no stored s x s "
                        "scores; a score_mod/block mask's own memory is not counted)")


def _deepspeed(sink: Sink, key: str, value: Any) -> None:
    from fmest.configs import deepspeed

    if isinstance(value, dict):  # TrainingArguments also accepts the config inline
        deepspeed.map_config(value, sink, prefix=key)
    elif value in (None, "", False):
        sink.ignore(key, "no DeepSpeed config (DeepSpeed off)")
    else:
        sink.include(key, value, deepspeed.FORMAT)


def _fsdp_config(sink: Sink, key: str, value: Any) -> None:
    from fmest.configs.accelerate import map_fsdp_config

    if isinstance(value, dict):
        map_fsdp_config(value, sink, key)
    elif value in (None, ""):
        sink.ignore(key, "no FSDP options given")
    else:
        sink.ignore(key, "an FSDP config file path; pass the file's options inline or with "
                    "--fsdp/--cpu-offload")


def _own(sink: Sink, key: str, name: str, value: Any) -> bool:
    """Keys this importer maps itself; False leaves the key to the shared mapping."""
    if name == "deepspeed":
        _deepspeed(sink, key, value)
    elif name == "fsdp_config":
        _fsdp_config(sink, key, value)
    elif name == "torch_compile":
        sink.set("training.compile", sink.bool_(key, value), key)
    elif name == "use_liger_kernel":
        if sink.bool_(key, value):
            # transformers Trainer: _apply_liger_kernel_to_instance patches RMSNorm, SwiGLU,
            # RoPE and the fused linear cross-entropy (liger_kernel_config defaults)
            sink.set("training.liger", True, key)
            sink.set("training.loss", "fused", key)
        else:
            sink.ignore(key, "false: the standard loss (fmest's default unless another key sets "
                        "it)")
    elif name == "optim":
        map_optimizer(sink, key, value)
    elif name == "model_name_or_path":
        if value in (None, ""):
            sink.ignore(key, "empty: no model named")
        else:
            sink.set("model", model_name(value), key)
    elif name == "attn_implementation":
        if value in (None, ""):
            sink.ignore(key, "null: the model's default (sdpa in transformers)")
        else:
            map_attention(sink, key, value)
    elif name in ("max_seq_length", "max_length"):
        # TRL SFTConfig: max_length (max_seq_length before TRL 0.20) truncates every sample
        if value in (None, ""):
            sink.ignore(key, "null: no truncation; fmest keeps its seq_len default")
        else:
            sink.set("training.seq_len", sink.int_(key, value), key)
    elif name in ("gradient_checkpointing_kwargs", "optim_args", "optim_target_modules"):
        sink.ignore(key, "does not change what is stored in fmest's model (use_reentrant, "
                    "optimizer arguments)")
    elif name in ("torch_compile_backend", "torch_compile_mode"):
        sink.ignore(key, "compile details; fmest only knows whether the model is compiled")
    else:
        return False
    return True


def map_keys(doc: dict, sink: Sink, prefix: str = "", skip: frozenset = frozenset()) -> None:
    """Map TrainingArguments keys of ``doc`` (minus ``skip``) into ``sink``."""
    if all(str(doc.get(k)).strip().lower() in ("true", "1", "yes", "on")
           for k in ("bf16", "fp16")) and not skip & {"bf16", "fp16"}:
        raise sink.error(join(prefix, "fp16"), HALF_BOTH, value=True)
    for name, value in doc.items():
        if name in skip:
            continue
        key = join(prefix, name)
        if _own(sink, key, name, value):
            continue
        try:
            mapped, ignored = training_arguments_fields({name: value}, "")
        except InputError as exc:  # a boolean key's "maybe": keep the reader's own message
            raise exc.at(f"{sink.name}: {key}") from None
        except (TypeError, ValueError):
            raise sink.error(key, "expected a number", value=value) from None
        for section, fields in mapped.items():
            for field, v in fields.items():
                sink.set(f"{section}.{field}", v, key)
        for entry in ignored:
            sink.ignored.append(join(prefix, entry.lstrip(".")))
        if not mapped and not ignored:
            sink.ignore(key, f"{value!r} sets nothing (fmest keeps its default unless another "
                        "key sets it)")


#: fms-hf-tuning's flat ``sft_trainer`` JSON (foundation-model-stack/fms-hf-tuning
#: 0202bc952076333edf203ec1d35306ba51e409c9): TrainingArguments beside ``peft_method``
#: (tuning/utils/config_utils.py ``create_tuning_config``: ``lora``, ``pt`` prompt tuning,
#: None = full fine-tuning; ``alora`` in tuning/config/peft_config.py ``PEFT_METHOD``), the
#: ``LoraConfig`` fields with its defaults (tuning/config/peft_config.py: r 8, lora_alpha 32,
#: lora_dropout 0.05, target_modules None = PEFT's per-model default, ``["all-linear"]``), the
#: quantized-LoRA switches (``auto_gptq`` / ``bnb_qlora``) and the fused-ops-and-kernels plugin's
#: ``fast_kernels = [fast_loss, fast_rms_layernorm, fast_rope_embeddings]`` and
#: ``fused_lora = [base_layer, fast_lora]``
#: (tuning/config/acceleration_configs/fused_ops_and_kernels.py).
FMS_LORA_DEFAULTS = {"r": 8, "lora_alpha": 32, "lora_dropout": 0.05}
_FMS_LORA_KEYS = ("r", "lora_alpha", "lora_dropout", "target_modules")
_FMS_FAST_KERNELS = ("loss", "norm", "rope")


def _fms_hf_tuning(doc: dict, sink: Sink) -> frozenset:
    """The fms-hf-tuning keys of ``doc`` (only where ``peft_method`` marks the file as one),
    mapped; returns the keys handled."""
    if "peft_method" not in doc:
        return frozenset()
    handled = {"peft_method", *(k for k in _FMS_LORA_KEYS if k in doc)}
    method = str(doc["peft_method"]).strip().lower()
    if method in ("lora", "alora"):
        technique = "qlora" if ("bnb_qlora" in doc or "auto_gptq" in doc) else "lora"
        sink.set("training.technique", technique, "peft_method")
        if method == "alora":
            sink.unmodelled("peft_method", "activated LoRA estimated as LoRA (its invocation "
                            "tokens change nothing fmest counts)")
        values = {**FMS_LORA_DEFAULTS, **{k: doc[k] for k in _FMS_LORA_KEYS if k in doc}}
        sink.set("training.lora_rank", sink.int_("r", values["r"]), "r" if "r" in doc else
                 "peft_method (fms-hf-tuning LoraConfig default r)")
        sink.set("training.lora_alpha", float(values["lora_alpha"]),
                 "lora_alpha" if "lora_alpha" in doc else "peft_method (default lora_alpha)")
        sink.set("training.lora_dropout", float(values["lora_dropout"]),
                 "lora_dropout" if "lora_dropout" in doc else "peft_method (default dropout)")
        if doc.get("target_modules"):
            targets = doc["target_modules"]
            names = [targets] if isinstance(targets, str) else [str(t) for t in targets]
            sink.set("training.lora_target_modules",
                     ["all-linear"] if names == ["all-linear"] else names, "target_modules")
        for key, method_name in (("bnb_qlora", "bnb"), ("auto_gptq", "gptq")):
            if key in doc:
                handled.add(key)
                sink.set("training.quantization_method", method_name, key)
    else:
        if method in ("pt",):
            sink.unmodelled("peft_method", "prompt tuning is not modelled: estimated as full "
                            "fine-tuning, an upper bound")
        else:
            sink.ignore("peft_method", f"{doc['peft_method']!r}: full fine-tuning")
        for key in handled - {"peft_method"}:
            sink.ignore(key, "peft_method is not lora: no LoRA adapters")
    kernels: set[str] = set()
    if "fast_kernels" in doc:
        handled.add("fast_kernels")
        flags = doc["fast_kernels"] or []
        if isinstance(flags, str):
            flags = flags.replace(",", " ").split()
        if len(flags) != len(_FMS_FAST_KERNELS):
            raise sink.error("fast_kernels", "expected three booleans [fast_loss, "
                             "fast_rms_layernorm, fast_rope_embeddings]", value=flags)
        kernels |= {op for op, on in zip(_FMS_FAST_KERNELS, flags, strict=True)
                    if sink.bool_("fast_kernels", on)}
    if "fused_lora" in doc:
        handled.add("fused_lora")
        pair = doc["fused_lora"] or []
        if isinstance(pair, str):
            pair = pair.replace(",", " ").split()
        if len(pair) == 2 and sink.bool_("fused_lora", pair[1]):
            kernels.add("lora")
        elif len(pair) != 2:
            raise sink.error("fused_lora", "expected [base_layer, fast_lora], e.g. "
                             "[auto_gptq, true]", value=pair)
    if kernels:
        sink.set("training.fused_kernels", sorted(kernels),
                 "+".join(k for k in ("fast_kernels", "fused_lora") if k in doc))
    return frozenset(handled)


def map_config(doc: dict, sink: Sink) -> None:
    # the transformers Trainer runs the step; a ``deepspeed`` key below switches to deepspeed
    sink.set("training.stack", "hf-trainer", "(TrainingArguments)")
    map_keys(doc, sink, skip=_fms_hf_tuning(doc, sink))
