"""``is_fsdp`` (``fm_training_estimator/config/utils.py`` @ 1d04f05)."""

from __future__ import annotations

from typing import Any


def is_fsdp(ta: Any) -> bool:
    """Whether training arguments ask for FSDP (a non-empty ``fsdp``)."""
    value = getattr(ta, "fsdp", None)
    if value is None or value is False:
        return False
    if value is True:
        return True
    return len(value) != 0
