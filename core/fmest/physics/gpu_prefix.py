"""Tables keyed by a prefix of a GPU's canonical name (``"H100-SXM"`` covers
``H100-SXM-80GB`` and ``H100-SXM-96GB``): one lookup rule for every such table."""

from __future__ import annotations

from typing import Any, Mapping, TypeVar

V = TypeVar("V")

#: (id(table), gpu name, default, its type) -> (table, value). Every time estimate asks several tables
#: for the same GPU; the tables are module constants never mutated after import, and the
#: entry keeps its table alive and checks identity, so a replaced table (a new object, e.g. a
#: test's monkeypatch) is a miss, never a stale answer
_LOOKUPS: dict[tuple, tuple[Any, Any]] = {}
_LOOKUP_ENTRIES = 1024


def value_by_gpu_prefix(table: Mapping[str, V], gpu_name: str, default: V) -> V:
    """The value of the longest key of ``table`` that begins ``gpu_name`` (case-insensitive),
    else ``default``. The longest key wins so that ``A100-80GB`` reads the ``A100`` row, not
    the ``A10`` one, whatever the table's order."""
    key = (id(table), gpu_name, default, type(default))   # 0 and False hash alike
    hit = _LOOKUPS.get(key)
    if hit is not None and hit[0] is table:
        return hit[1]
    value = _longest_prefix_value(table, gpu_name, default)
    if len(_LOOKUPS) >= _LOOKUP_ENTRIES:
        _LOOKUPS.clear()
    _LOOKUPS[key] = (table, value)
    return value


def _longest_prefix_value(table: Mapping[str, V], gpu_name: str, default: V) -> V:
    """:func:`value_by_gpu_prefix` without the memo."""
    best_key: str | None = None
    best_value = default
    name = gpu_name.upper()
    for key, value in table.items():
        if name.startswith(key.upper()) and (best_key is None or len(key) > len(best_key)):
            best_key, best_value = key, value
    return best_value
