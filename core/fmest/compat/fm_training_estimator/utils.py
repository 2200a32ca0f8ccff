"""The original's helpers users import (``fm_training_estimator/utils/utils.py`` @ 1d04f05):
the same names, arguments and results."""

from __future__ import annotations

import json
import logging
import math
from typing import Any, Dict

logger = logging.getLogger("fm_training_estimator")


def unmarshal(path: str) -> Dict[str, Any]:
    """A JSON or YAML file as a dict (the original refuses other extensions, as this does)."""
    if not str(path).endswith((".json", ".yaml", ".yml")):
        raise ValueError(f"path to unmarshal should have either json or yaml extension, "
                         f"but got {path}")
    with open(path, encoding="utf8") as f:
        if str(path).endswith(".json"):
            return json.load(f)
        import yaml

        return yaml.safe_load(f)


def get_size_from_precision(precision: str) -> float:
    """Bytes per parameter of a ``torch_dtype`` name (nf4: half a byte; unknown: 4)."""
    if precision in ("float16", "bfloat16"):
        return 2
    if precision == "float32":
        return 4
    if precision == "nf4":
        return 0.5
    return 4


def get_human_readable_number(number: float) -> str:
    """``7000000000`` -> ``"7 Billion"``."""
    denominations = ["", " Thousand", " Million", " Billion", " Trillion"]
    number = float(number)
    millidx = max(0, min(len(denominations) - 1,
                         int(math.floor(0 if number == 0 else math.log10(abs(number)) / 3))))
    return "{:.0f}{}".format(number / 10 ** (3 * millidx), denominations[millidx])


def fmt_size(size: float) -> str:
    """Bytes as one decimal and a binary unit: ``"44.6 GiB"``."""
    for unit in ("", "Ki", "Mi", "Gi", "Ti"):
        if abs(size) < 1024.0:
            return f"{size:3.1f} {unit}B"
        size /= 1024.0
    return f"{size:.1f} PiB"


__all__ = ["unmarshal", "get_size_from_precision", "get_human_readable_number", "fmt_size",
           "logger"]
