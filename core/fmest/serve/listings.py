"""The registry listings the service serves (``/v1/models``, ``/v1/gpus``, ``/v1/prices``,
``/v1/stacks``), each the same records as the CLI's listings (``fmest models|gpus --format json``,
``fmest stacks --json``)."""

from __future__ import annotations

from typing import Any

from fmest.convert import unstructure


def models_listing(engine) -> list[dict[str, Any]]:
    """The model registry as ``fmest models --format json`` prints it."""
    from fmest.api import models_rows

    return models_rows(engine.registries)


def gpus_listing(engine) -> list[dict[str, Any]]:
    """The GPU registry as ``fmest gpus --format json`` prints it."""
    from fmest.api import gpus_rows

    return gpus_rows(engine.registries)


def prices_listing(engine) -> list[dict[str, Any]]:
    out = []
    for quote, source in engine.registries.prices.with_sources():
        row = unstructure(quote)
        row["usd_per_gpu_hour"] = quote.usd_per_gpu_hour
        row["plugin"] = source
        out.append(row)
    return out


def stacks_listing(engine) -> list[dict[str, Any]]:
    """The training-stack registry as ``fmest stacks --json`` prints it."""
    from fmest.default_plugins.stacks import stacks_rows

    return stacks_rows(engine)
