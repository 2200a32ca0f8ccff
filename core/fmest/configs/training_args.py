"""Hugging Face ``TrainingArguments`` dumps (``args.to_json_string()``, ``to_dict()``, YAML).

Field names: transformers ``training_args.py``
(https://huggingface.co/docs/transformers/main_classes/trainer#transformers.TrainingArguments).
The mapping itself is :func:`fmest.compat.fm_training_estimator.training_arguments_fields`
(shared with the EstimateInput reader), called key by key so each field knows its key; this
module adds the keys that reader leaves to ``--config``: ``deepspeed`` (the DeepSpeed file is
loaded too), ``fsdp_config`` (the FSDP options), ``torch_compile`` and ``use_liger_kernel``.
"""

from __future__ import annotations

from typing import Any

from fmest.compat.fm_training_estimator import training_arguments_fields
from fmest.compat.fm_training_estimator.reader import HALF_BOTH
from fmest.configs._base import Sink, join
from fmest.errors import InputError

FORMAT = "training-args"


def optimizer_name(value: Any) -> str:
    """HF ``optim`` as fmest's optimizer registry spells it (``OptimizerNames.ADAMW_TORCH`` in
    ``repr`` dumps -> ``adamw_torch``); the registry knows the HF names as aliases."""
    text = str(getattr(value, "value", value)).strip()
    if text.startswith("OptimizerNames."):
        text = text.split(".", 1)[1]
    return text.lower()


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
            sink.set("training.loss", "fused", key)
        else:
            sink.ignore(key, "false: the standard loss (fmest's default unless another key sets "
                        "it)")
    elif name == "optim":
        sink.set("training.optimizer", optimizer_name(value), key)
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


def map_config(doc: dict, sink: Sink) -> None:
    # the transformers Trainer runs the step; a ``deepspeed`` key below switches to deepspeed
    sink.set("training.stack", "hf-trainer", "(TrainingArguments)")
    map_keys(doc, sink)
