"""The registry listings the service serves (``/v1/models``, ``/v1/gpus``, ``/v1/prices``,
``/v1/stacks``), each the same records ``fmest models|gpus --format json`` prints."""

from __future__ import annotations

from typing import Any

from fmest.convert import unstructure


def models_listing(engine) -> list[dict[str, Any]]:
    """Model presets as ``fmest models --format json`` lists them, restricted to the names
    the engine's model registry holds (so a disabled preset plugin lists nothing)."""
    from fmest.models.presets import list_presets

    registered = engine.registries.models
    return [{"name": p.name, "model_type": p.model_type, "aliases": list(p.aliases),
             "source": p.source, "retrieved": p.retrieved}
            for p in list_presets() if p.name in registered]


def gpus_listing(engine) -> list[dict[str, Any]]:
    return [unstructure(g) for g in engine.registries.gpus.values()]


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
