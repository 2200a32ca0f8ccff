"""``fm_training_estimator.config``: the dataclasses (imported on first use: they import
transformers), ``parse`` and ``is_fsdp``."""

from __future__ import annotations

from typing import Any

from fmest.compat.fm_training_estimator.config.parser import parse
from fmest.compat.fm_training_estimator.config.utils import is_fsdp

_ARGUMENTS = ("FMArguments", "PeftPromptTuningConfig", "PeftLoraConfig", "PeftQLoraConfig",
              "HFTrainingArguments", "InfraArguments", "DataArguments")

__all__ = [*_ARGUMENTS, "parse", "is_fsdp"]


def __getattr__(name: str) -> Any:
    if name in _ARGUMENTS:
        from fmest.compat.fm_training_estimator.config import arguments

        return getattr(arguments, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
