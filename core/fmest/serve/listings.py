"""The registry listings the service serves (``/v1/models``, ``/v1/gpus``, ``/v1/prices``,
``/v1/stacks``), each the same records ``fmest models|gpus --format json`` prints."""

from __future__ import annotations

from typing import Any

from fmest.convert import unstructure


def models_listing(engine) -> list[dict[str, Any]]:
    """The model registry as ``fmest models --format json`` prints it."""
    from fmest.cli import models_rows

    return models_rows(engine.registries)


def gpus_listing(engine) -> list[dict[str, Any]]:
    """The GPU registry as ``fmest gpus --format json`` prints it."""
    from fmest.cli import gpus_rows

    return gpus_rows(engine.registries)


def prices_listing(engine) -> list[dict[str, Any]]:
    out = []
    for quote, source in engine.registries.prices.with_sources():
        row = unstructure(quote)
        row["usd_per_gpu_hour"] = quote.usd_per_gpu_hour
        row["plugin"] = source
        out.append(row)
    return out


def stacks_listing(engine) -> tuple[list[dict[str, Any]], str]:
    """``(stacks, note)``: the training-stack registry when this fmest has one."""
    registry = getattr(engine.registries, "stacks", None)
    if registry is None:
        return [], "this fmest has no training-stack registry yet; the list is empty"
    return [unstructure(s) for s in registry.values()], ""
