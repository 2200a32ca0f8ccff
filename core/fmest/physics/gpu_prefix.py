"""Tables keyed by a prefix of a GPU's canonical name (``"H100-SXM"`` covers
``H100-SXM-80GB`` and ``H100-SXM-96GB``): one lookup rule for every such table."""

from __future__ import annotations

from typing import Mapping, TypeVar

V = TypeVar("V")


def value_by_gpu_prefix(table: Mapping[str, V], gpu_name: str, default: V) -> V:
    """The value of the longest key of ``table`` that begins ``gpu_name`` (case-insensitive),
    else ``default``. The longest key wins so that ``A100-80GB`` reads the ``A100`` row, not
    the ``A10`` one, whatever the table's order."""
    best_key: str | None = None
    best_value = default
    name = gpu_name.upper()
    for key, value in table.items():
        if name.startswith(key.upper()) and (best_key is None or len(key) > len(best_key)):
            best_key, best_value = key, value
    return best_value
