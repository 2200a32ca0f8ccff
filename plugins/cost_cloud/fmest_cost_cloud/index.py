"""The registered price rows indexed by canonical GPU name, built once per set of registries.

A cost estimate needs the rows of one GPU and, for its error messages, the GPUs anyone rents.
Resolving every row's GPU through the GPU registry on each estimate scanned the whole table
twice per estimate (about an eighth of a full report's time); the registries do not change
after start-up (:class:`fmest.engine.Registries`), so the answer is computed once and kept.
"""

from __future__ import annotations

import weakref
from typing import Any, Mapping

from attrs import frozen

from fmest.prices import PriceQuote

#: A price row with the entry-point name of the plugin that registered it.
SourcedQuote = tuple[PriceQuote, str]


@frozen(kw_only=True)
class PriceIndex:
    """``rows_by_gpu``: canonical GPU name -> its rows in registration order (the order the
    full scan produced, so filters and tie-breaks see the same sequence); ``rentable_gpus``:
    the canonical names that some row prices, sorted."""

    rows_by_gpu: Mapping[str, tuple[SourcedQuote, ...]]
    rentable_gpus: tuple[str, ...]


def build_price_index(registries: Any) -> PriceIndex:
    """One pass over ``registries.prices``, resolving each row's GPU (name or alias) through
    ``registries.gpus``; rows whose GPU is not registered are left out, as before."""
    rows_by_gpu: dict[str, list[SourcedQuote]] = {}
    for quote, plugin in registries.prices.with_sources():
        spec = registries.gpus.find(quote.gpu)
        if spec is not None:
            rows_by_gpu.setdefault(spec.name, []).append((quote, plugin))
    return PriceIndex(rows_by_gpu={name: tuple(rows) for name, rows in rows_by_gpu.items()},
                      rentable_gpus=tuple(sorted(rows_by_gpu)))


# Keyed weakly so that an engine's index goes away with its registries (tests build many).
_INDEXES: weakref.WeakKeyDictionary[Any, PriceIndex] = weakref.WeakKeyDictionary()


def price_index(registries: Any) -> PriceIndex:
    """The index of ``registries``, built on first use and kept. Registries that cannot be
    referenced weakly (a test's stand-in object) get a fresh index each call."""
    try:
        return _INDEXES[registries]
    except KeyError:
        index = _INDEXES[registries] = build_price_index(registries)
        return index
    except TypeError:  # not weakly referenceable or not hashable: nothing to key the cache on
        return build_price_index(registries)
