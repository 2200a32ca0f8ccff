"""A drop-in for IBM fm-training-estimator (foundation-model-stack/fm-training-estimator @
1d04f05): its inputs, public Python surface, CLI and REST route, answered by fmest's estimators.

The switch is the import: ``fm_training_estimator.X`` becomes
``fmest.compat.fm_training_estimator.X`` for the modules its users import
(``config.arguments``, ``config``, ``sdk``, ``utils``, ``data``, ``ui.core``, ``ui.cli``,
``ui.api``); docs/compat.md lists every difference.

This package's top level re-exports the readers (:mod:`.reader`: an ``EstimateInput`` as fmest
jobs), the SDK functions (:mod:`.sdk`) and, on first use, the dataclasses of
:mod:`.config.arguments` (which import transformers' ``TrainingArguments``, as the original's
do, so a reader of EstimateInput JSON never pays for that import).
"""

from __future__ import annotations

from typing import Any

from fmest.compat.fm_training_estimator.reader import (
    estimate_input_jobs,
    is_estimate_input,
    jobs_from_estimate_input,
    training_arguments_fields,
)

_SDK = ("estimate_memory", "estimate_time", "estimate_tokens", "estimate_cost", "estimate")
_ARGUMENTS = ("EstimateInput", "JobConfig", "FMArguments", "HFTrainingArguments",
              "DataArguments", "InfraArguments", "PeftLoraConfig", "PeftQLoraConfig",
              "PeftPromptTuningConfig", "EstimatorMetadata", "EstimatorMethod", "MemoryEstimate",
              "TimeEstimate", "TokensEstimate", "CostEstimate", "Estimate")

__all__ = ["estimate_input_jobs", "is_estimate_input", "jobs_from_estimate_input",
           "training_arguments_fields", *_SDK, *_ARGUMENTS]


def __getattr__(name: str) -> Any:
    if name in _SDK:
        from fmest.compat.fm_training_estimator import sdk

        return getattr(sdk, name)
    if name in _ARGUMENTS:
        from fmest.compat.fm_training_estimator.config import arguments

        return getattr(arguments, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
