"""A small cache keyed on an object's identity, for frozen records that the core hands to
every estimate unchanged (the resolved model, the resolved transforms) and whose hash costs
more than the work it would save (a frozen attrs record hashes every field, recursively)."""

from __future__ import annotations

from typing import Callable, TypeVar

_V = TypeVar("_V")
#: entries per cache before it is emptied (a process sees a handful of models and contexts)
CACHE_ENTRIES = 256


def by_identity(cache: dict[tuple, tuple[object, _V]], obj: object, extra: tuple,
                compute: Callable[[], _V]) -> _V:
    """``compute()`` once per (``obj`` object, ``extra``); ``extra`` must be hashable. The
    entry keeps ``obj`` alive, so its ``id`` cannot be reused by another object while the entry
    exists; an equal object built anew is a miss and is computed again (time, never a
    different answer)."""
    key = (id(obj), *extra)
    hit = cache.get(key)
    if hit is not None and hit[0] is obj:
        return hit[1]
    value = compute()
    if len(cache) >= CACHE_ENTRIES:
        cache.clear()
    cache[key] = (obj, value)
    return value
