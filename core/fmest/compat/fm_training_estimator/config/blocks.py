"""The original's input blocks that are plain dataclasses (``fm_training_estimator/config/
arguments.py`` @ 1d04f05), apart from :mod:`.arguments` so that reading a flat config or an
``EstimateInput`` dict never imports transformers (whose ``TrainingArguments`` import takes
seconds: it loads peft and torch)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, List, Optional


@dataclass
class PeftLoraConfig:
    """LoRA settings (the original's defaults)."""

    r: int = field(default=4, metadata={"help": "Lora rank parameter"})
    lora_alpha: int = field(default=8)
    lora_dropout: float = field(default=0.1)
    target_modules: List[str] = field(default_factory=lambda: ["q_proj", "v_proj"])


@dataclass
class PeftQLoraConfig:
    """QLoRA settings (the original's defaults)."""

    quant_type: str = field(default="nf4")
    use_double_quant: bool = field(default=False)


@dataclass
class InfraArguments:
    """Infrastructure (the original's camel-case names and defaults)."""

    numGpusPerPod: int = field(default=0, metadata={
        "help": "number of gpus requested per pod. Setting to 0 for auto-discover."})
    numPods: int = field(default=1, metadata={"help": "number of pods requested"})
    gpu_memory_in_gb: int = field(default=80, metadata={"help": "GPU RAM in GBs"})
    gpuModel: str = field(default="A100", metadata={"help": "model of gpu used"})


@dataclass
class FMArguments:
    """Model and tuning settings (the original's defaults)."""

    base_model_path: str = field(default="ibm-granite/granite-3b-code-base")
    flash_attention_v2: bool = field(default=False)
    lora_config: Optional[str] = field(default=None)
    max_seq_length: int = field(default=2048)
    block_size: int = field(default=2048)
    data_config_file: str = field(default="data_config.json")
    prompt_tuning_config: Optional[str] = field(default=None)
    torch_dtype: str = field(default="float32")
    technique: str = field(default="full")


@dataclass
class DataArguments:
    """The dataset whose tokens set the run's length (the original's defaults)."""

    te_approach: int = field(default=0)
    dataset: Optional[str] = field(default=None)
    dataset_text_field: str = field(default="text")
    dataset_split: str = field(default="test")
    dataset_config_name: Optional[str] = field(default=None)
    trust_remote_code: bool = field(default=True)
    dataset_config_file: Optional[str] = field(default=None)


class EstimatorMethod(enum.Enum):
    """Which estimator answers (the original's enum)."""

    THEORY = "theory"
    LEARNED = "learned"
    HYBRID = "hybrid"


@dataclass
class EstimatorMetadata:
    """Where learned answers come from and which method answers."""

    base_data_path: Optional[str] = field(default=None)
    method: EstimatorMethod = field(default=EstimatorMethod.HYBRID)
    token_estimation_version: Any = field(default=0)
