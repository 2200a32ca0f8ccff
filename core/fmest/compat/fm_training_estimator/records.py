"""The original's answer records (``fm_training_estimator/config/arguments.py`` @ 1d04f05),
and the field-by-field reading of its input dataclasses. Kept apart from
:mod:`.config.arguments` so that answering (``fmest estimate --format fm-training-estimator``)
never imports transformers."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, List, Optional


def _plain(value: Any) -> Any:
    """A JSON-able copy of ``value`` (enums by value, nested objects by their fields)."""
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if hasattr(value, "to_dict"):
        try:
            return _plain(value.to_dict())
        except Exception:  # noqa: BLE001 - transformers' nested configs (AcceleratorConfig)
            pass
    return str(value)


def given_fields(obj: Any) -> dict[str, Any]:
    """The fields of one of the blocks above whose values differ from the block's defaults
    (a fresh instance of the same class), as plain values: what the caller set."""
    if isinstance(obj, dict):
        return dict(obj)
    if obj is None:
        return {}
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        raise TypeError(f"expected a dataclass instance, got {type(obj).__name__}")
    try:
        fresh = type(obj)()
    except TypeError:
        fresh = None
    out = {}
    for f in dataclasses.fields(obj):
        if not f.init:
            continue
        value = getattr(obj, f.name, None)
        if fresh is not None and _plain(value) == _plain(getattr(fresh, f.name, None)):
            continue
        out[f.name] = _plain(value)
    out.update(_plain(getattr(obj, "__dict__", {}).get("_fmest_extra") or {}))
    return out



@dataclass
class TimeEstimate:
    """``time``: the whole job in seconds (training + the original's model-load and
    checkpoint allowances); ``train_time``: training steps alone. ``None`` (with a warning)
    when the dataset's tokens cannot be counted."""

    time: Optional[float]
    train_time: Optional[float]
    warnings: List[str] = field(default_factory=list)


@dataclass
class MemoryEstimate:
    """Per-GPU peak memory as the original's human-readable sizes. The four parts add up to
    the total: they are the breakdown of the peak phase (``phase``), with everything that is
    not weights, gradients or optimizer state counted in ``activation_memory`` (activations,
    logits, working buffers, CUDA context, allocator reserve); ``parts`` has fmest's own
    breakdown in bytes."""

    total_mem_estimate: str
    activation_memory: str
    gradient_memory: str
    model_memory: str
    optimizer_memory: str
    num_gpus: int
    phase: str = ""
    parts: dict = field(default_factory=dict)
    warnings: List[str] = field(default_factory=list)


@dataclass
class TokensEstimate:
    """Tokens per second of the whole job."""

    tps: Optional[float]
    warnings: List[str] = field(default_factory=list)


@dataclass
class CostEstimate:
    """Dollars for the whole run on rented instances (``None`` where no price applies)."""

    usd: Optional[float]
    warnings: List[str] = field(default_factory=list)


@dataclass
class Estimate:
    """Memory, time, tokens and cost together."""

    memory: MemoryEstimate
    time: TimeEstimate
    tokens: TokensEstimate
    cost: CostEstimate
