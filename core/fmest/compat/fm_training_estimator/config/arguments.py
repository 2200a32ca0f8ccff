"""fm-training-estimator's dataclasses, field by field
(``fm_training_estimator/config/arguments.py`` @ 1d04f05), so code written against the original
builds its inputs unchanged.

Differences, each on purpose (docs/compat.md):

* ``HFTrainingArguments`` subclasses transformers' ``TrainingArguments`` as the original's does,
  but keeps the values as given: TrainingArguments' ``__post_init__`` checks the machine it runs
  on (``bf16=True`` is refused on a computer without a bf16 GPU; a DeepSpeed file needs DeepSpeed
  installed; FSDP strategies are rewritten), and an estimate is made where the training does
  not run. Without transformers installed it is a plain dataclass of the fields fmest reads.
* ``PeftPromptTuningConfig`` subclasses peft's ``PromptTuningConfig`` when peft is installed.
* ``EstimateInput`` has dataclass-wizard's ``from_dict``/``from_json``/``to_dict``/``to_json``
  without the package; ``to_dict`` writes what fmest's reader reads (blocks in snake case,
  TrainingArguments fields that differ from their defaults) and never raises on
  transformers' nested objects.
* The answer records hold what the original's do (floats where the original returns floats:
  ``TimeEstimate.time`` is seconds) plus ``warnings``, and ``MemoryEstimate`` adds ``phase``
  and ``parts`` (fmest's breakdown of the peak, in bytes).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, List, Optional

from fmest.compat.fm_training_estimator.config.blocks import (  # noqa: F401 (the original's)
    DataArguments,
    EstimatorMetadata,
    EstimatorMethod,
    FMArguments,
    InfraArguments,
    PeftLoraConfig,
    PeftQLoraConfig,
)
from fmest.compat.fm_training_estimator.records import (  # noqa: F401 (the original's names)
    CostEstimate,
    Estimate,
    MemoryEstimate,
    TimeEstimate,
    TokensEstimate,
    _plain,
    given_fields,
)

try:  # the original subclasses transformers' TrainingArguments
    from transformers import TrainingArguments as _TrainingArguments
except ImportError:  # pragma: no cover - exercised where transformers is absent
    _TrainingArguments = None  # type: ignore[assignment,misc]


try:
    from peft.tuners.prompt_tuning import PromptTuningConfig as _PromptTuningConfig

    @dataclass
    class PeftPromptTuningConfig(_PromptTuningConfig):
        """peft's prompt-tuning config (fmest does not estimate prompt tuning)."""

except ImportError:  # pragma: no cover - peft is optional
    @dataclass
    class PeftPromptTuningConfig:  # type: ignore[no-redef]
        """A stand-in for peft's ``PromptTuningConfig`` (peft is not installed)."""

        num_virtual_tokens: Optional[int] = None


if _TrainingArguments is not None:
    @dataclass
    class HFTrainingArguments(_TrainingArguments):
        """transformers' ``TrainingArguments`` with ``output_dir`` defaulting to
        ``./output`` (as the original's), values kept as given (see the module's text)."""

        output_dir: str = field(default="./output",
                                metadata={"help": "temporary output dir for HF"})

        def __post_init__(self) -> None:  # no checks of this machine; nothing rewritten
            pass
else:  # pragma: no cover - exercised where transformers is absent
    @dataclass
    class HFTrainingArguments:  # type: ignore[no-redef]
        """The TrainingArguments fields fmest reads, with transformers' defaults."""

        output_dir: str = "./output"
        per_device_train_batch_size: int = 8
        gradient_accumulation_steps: int = 1
        num_train_epochs: float = 3.0
        max_steps: int = -1
        gradient_checkpointing: bool = False
        bf16: bool = False
        fp16: bool = False
        optim: str = "adamw_torch"
        fsdp: Any = None
        fsdp_config: Any = None
        deepspeed: Any = None
        save_strategy: str = "steps"
        save_steps: float = 500


@dataclass
class JobConfig:
    """One training job (the original's blocks, in its positional order)."""

    hf_training: HFTrainingArguments = field(default_factory=HFTrainingArguments)
    fm: FMArguments = field(default_factory=FMArguments)
    data: DataArguments = field(default_factory=DataArguments)
    infra: InfraArguments = field(default_factory=InfraArguments)
    peft_lora: PeftLoraConfig = field(default_factory=PeftLoraConfig)
    peft_qlora: PeftQLoraConfig = field(default_factory=PeftQLoraConfig)


_BLOCKS = {"hf_training": HFTrainingArguments, "fm": FMArguments, "data": DataArguments,
           "infra": InfraArguments, "peft_lora": PeftLoraConfig, "peft_qlora": PeftQLoraConfig}


def _snake(key: str) -> str:
    import re

    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def _build(cls: type, data: Any, path: str, unknown: list[str]) -> Any:
    if data is None:
        return cls()
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        from fmest.errors import InputError

        raise InputError(path, "expected an object (mapping of keys to values)",
                         value=type(data).__name__)
    names = {f.name: f.name for f in dataclasses.fields(cls) if f.init}
    names.update({_snake(n): n for n in list(names)})
    kwargs = {}
    for key, value in data.items():
        name = names.get(key) or names.get(_snake(key))
        if name is None:
            unknown.append(f"{path}.{key}")
            continue
        kwargs[name] = value
    if cls is EstimatorMetadata and "method" in kwargs and isinstance(kwargs["method"], str):
        try:
            kwargs["method"] = EstimatorMethod(kwargs["method"].lower())
        except ValueError:
            from fmest.errors import InputError

            raise InputError(f"{path}.method", "unknown method", value=kwargs["method"],
                             accepted=[m.value for m in EstimatorMethod]) from None
    return cls(**kwargs)


@dataclass
class EstimateInput:
    """Training jobs to estimate and the estimator's metadata (the original's input; its
    JSON methods, those of dataclass-wizard's ``JSONWizard``, are provided here)."""

    job_configs: List[JobConfig]
    estimator_metadata: Optional[EstimatorMetadata] = None

    @classmethod
    def from_dict(cls, data: dict) -> "EstimateInput":
        """Build from the JSON layout; keys in snake or camel case (as dataclass-wizard
        reads them). Keys no dataclass has are kept and reported on every answer."""
        from fmest.errors import InputError

        if not isinstance(data, dict):
            raise InputError("EstimateInput", "expected a JSON object",
                             value=type(data).__name__)
        unknown: list[str] = []
        meta_raw = next((data[k] for k in ("estimator_metadata", "estimatorMetadata",
                                           "estimator") if k in data), None)
        meta = None if meta_raw is None else _build(EstimatorMetadata, meta_raw,
                                                    "estimator_metadata", unknown)
        configs = data.get("job_configs", data.get("jobConfigs"))
        if not isinstance(configs, list):
            raise InputError("job_configs", "expected a list of job configs")
        jobs = []
        for i, cfg in enumerate(configs):
            if not isinstance(cfg, dict):
                raise InputError(f"job_configs[{i}]", "expected an object")
            blocks = {}
            for key, value in cfg.items():
                name = _snake(key)
                if name not in _BLOCKS:
                    unknown.append(f"job_configs[{i}].{key}")
                    continue
                if name == "hf_training":
                    # kept as given, not through TrainingArguments' constructor (it refuses
                    # unknown keys); fmest's reader reads and reports every key
                    blocks[name] = _training_arguments(value, f"job_configs[{i}].{key}",
                                                       unknown)
                else:
                    blocks[name] = _build(_BLOCKS[name], value, f"job_configs[{i}].{key}",
                                          unknown)
            jobs.append(JobConfig(**blocks))
        for key in data:
            if key not in ("estimator_metadata", "estimatorMetadata", "estimator",
                           "job_configs", "jobConfigs"):
                unknown.append(key)
        out = cls(job_configs=jobs, estimator_metadata=meta)
        out.__dict__["_unknown_keys"] = tuple(unknown)
        return out

    @classmethod
    def from_json(cls, text: str) -> "EstimateInput":
        return cls.from_dict(json.loads(text))

    def to_dict(self) -> dict:
        """The JSON layout fmest's reader reads (never raises on nested objects)."""
        out: dict[str, Any] = {"job_configs": [
            {name: given_fields(getattr(cfg, name)) for name in _BLOCKS}
            for cfg in (self.job_configs or [])]}
        if self.estimator_metadata is not None:
            out["estimator_metadata"] = _plain(self.estimator_metadata)
        return out

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)


def _training_arguments(value: Any, path: str, unknown: list[str]) -> Any:
    if value is None:
        return HFTrainingArguments()
    if isinstance(value, HFTrainingArguments) or not isinstance(value, dict):
        return _build(HFTrainingArguments, value, path, unknown)
    names = {f.name for f in dataclasses.fields(HFTrainingArguments) if f.init}
    known = {k: v for k, v in value.items() if k in names}
    args = HFTrainingArguments(**known)
    extra = {k: v for k, v in value.items() if k not in names}
    args.__dict__["_fmest_extra"] = extra     # read (and reported) by fmest's reader
    return args
