"""The registry listings the service serves (``/v1/models``, ``/v1/gpus``, ``/v1/prices``,
``/v1/stacks``), each the same records ``fmest models|gpus --format json`` prints."""

from __future__ import annotations

from typing import Any

from fmest.convert import unstructure


def models_listing(engine) -> list[dict[str, Any]]:
    """The model registry as ``fmest models --format json`` lists it (the rows of
    ``fmest.cli.cmd_models``; ``tests/test_serve.py`` checks the two agree)."""
    from fmest import cli

    reg = engine.registries

    def model_type(name: str) -> str:
        known = reg.model_info.get(name, {}).get("model_type")
        return known if known is not None else reg.models.find(name)().model_type

    return [{"name": name, "model_type": model_type(name),
             "aliases": cli._display_aliases(reg, name),
             "source": reg.model_sources.get(name, ""),
             "retrieved": reg.model_info.get(name, {}).get("retrieved", ""),
             "plugin": reg.models.source_of(name)}
            for name in sorted(reg.models.names(), key=str.lower)]


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
