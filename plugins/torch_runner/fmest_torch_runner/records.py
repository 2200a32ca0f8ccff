"""The runner's records: what a run is asked to do (:class:`RunSpec`), what it measured
(:class:`RunResult`), and the names both use (modes, memory categories, the runner version).

Importing this module does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import attrs
from attrs import define, field, frozen

if TYPE_CHECKING:
    import torch

MODES = ("fake", "cpu", "cuda")
#: what each live storage is counted as (the tracker's labels, the breakdown's keys)
CATEGORIES = ("params", "grads", "optimizer_state", "activations", "temporaries")
RUNNER_VERSION = "2"  # 2: fsdp_world_size (FSDP2 on a fake process group)


class Unsupported(Exception):
    """The job uses something this runner cannot execute on the requested device."""


@frozen(kw_only=True)
class RunSpec:
    """Everything the runner needs, derived from a job (see
    :func:`fmest_torch_runner.from_job.run_spec_from_job`)."""

    hf_config: dict[str, Any]
    model_name: str = "model"
    param_dtype: str = "fp32"  # dtype weights are built in
    autocast_dtype: Optional[str] = None  # torch.autocast dtype, None = off
    precision: str = "pure"  # resolved: pure / amp / master
    technique: str = "full"
    lora_rank: int = 16
    lora_alpha: float = 32.0
    lora_targets: tuple[str, ...] = ("q_proj", "v_proj")
    quantization_bits: int = 4
    double_quantization: bool = True
    gradient_checkpointing: bool = False
    attention: str = "sdpa"
    optimizer: str = "adamw"
    optimizer_impl: str = "foreach"
    seq_len: int = 128
    micro_batch_size: int = 1
    micro_batches: int = 1  # micro-batches run per step: min(grad_accum_steps, 2)
    steps: int = 2
    num_layers: Optional[int] = None  # override the config's layer count (calibration)
    #: > 1: trace FSDP2 ``fully_shard`` on a fake process group of this many ranks (fake mode
    #: only; per-rank memory of rank 0). 1 = single process, sharding left to the caller.
    fsdp_world_size: int = 1
    #: encoder-decoders: encoder (source) and decoder (target) tokens; None = seq_len
    source_len: Optional[int] = None
    target_len: Optional[int] = None
    #: LLaVA-style VLMs: images per sample, and whether the vision tower trains
    images_per_sample: int = 1
    train_vision_tower: bool = False
    #: ``PYTORCH_CUDA_ALLOC_CONF`` the job's launcher sets (the training stack's
    #: ``expandable_segments``), for the caching-allocator replay; "" = PyTorch's defaults
    alloc_conf: str = ""

    def key(self) -> dict[str, Any]:
        """A JSON-able dict identifying the run (for cache hashes)."""
        d = attrs.asdict(self)
        d["lora_targets"] = list(self.lora_targets)
        if not self.alloc_conf:  # the default: keys (and cached traces) as before the field
            del d["alloc_conf"]
        return d


@define
class RunResult:
    """What one run measured. Bytes are per device; ``peak_bytes`` is the figure of record
    (fake: tracker; cpu: allocator truth; cuda: ``max_memory_allocated``)."""

    mode: str
    status: str = "ok"  # ok / oom / error / unsupported
    error: str = ""
    peak_bytes: Optional[int] = None
    tracker_peak_bytes: Optional[int] = None
    reserved_peak_bytes: Optional[int] = None
    #: the largest storage the trace allocated and freed again (bytes, exact): the step's
    #: largest transient block, the caching-allocator reserve's abscissa
    #: (fmest.physics.device_terms.allocator_reserve_bytes); None in traces cached before it
    transient_block_bytes: Optional[int] = None
    peak_window: str = ""
    phase_peaks_bytes: dict[str, int] = field(factory=dict)
    breakdown_bytes: dict[str, int] = field(factory=dict)
    phase_breakdowns: dict[str, dict[str, int]] = field(factory=dict)
    #: category bytes alive at each window's end
    window_end_bytes: dict[str, dict[str, int]] = field(factory=dict)
    step_seconds: list[float] = field(factory=list)
    start_bytes: Optional[int] = None
    params: Optional[int] = None
    trainable_params: Optional[int] = None
    wall_seconds: Optional[float] = None
    notes: list[str] = field(factory=list)

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunResult:
        return cls(**d)


def torch_dtype(name: Optional[str]) -> Optional[torch.dtype]:
    """The torch dtype of a :class:`RunSpec` dtype name (``None``: none)."""
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
            None: None}[name]
