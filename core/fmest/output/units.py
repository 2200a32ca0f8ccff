"""How numbers with units read for people: one rule per unit, used by every CLI table, the
``--explain`` lines and the page (``core/fmest/serve/static/app.js`` repeats :func:`duration`
rule for rule; tests/test_render_widths.py compares the two).

Durations (:func:`duration`), the unit chosen by the value's size:

=====================  =========================  ============
seconds                shown as                   example
=====================  =========================  ============
below 1                milliseconds, 1 decimal    ``26.9 ms``
1 to below 120         seconds, 2 decimals        ``6.91 s``
120 to below 7,200     minutes, 1 decimal         ``118.9 min``
7,200 to below 3 days  hours, 1 decimal           ``4.5 h``
3 days and more        days, 1 decimal            ``12.3 days``
=====================  =========================  ============

A unit is used up to twice the next one (120 s, 120 min) so that a value never reads as
``1.0 min`` or ``1.0 h`` with most of its precision rounded away; days from 3 days (72 h).
``None``, NaN and infinities read ``-``.
"""

from __future__ import annotations

import math
from typing import Optional

#: (upper limit in seconds, divisor, decimals, unit) of :func:`duration`, in order.
DURATION_STEPS: tuple[tuple[float, float, int, str], ...] = (
    (1.0, 1e-3, 1, "ms"),
    (120.0, 1.0, 2, "s"),
    (7200.0, 60.0, 1, "min"),
    (3 * 86400.0, 3600.0, 1, "h"),
    (math.inf, 86400.0, 1, "days"),
)


def duration(seconds: Optional[float]) -> str:
    """``seconds`` as people read it (the table in the module docstring); ``-`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    for limit, divisor, decimals, unit in DURATION_STEPS:
        if seconds < limit:
            return f"{seconds / divisor:.{decimals}f} {unit}"
    raise AssertionError("unreachable: the last step has no limit")


def gib(n_bytes: float, decimals: int = 2) -> str:
    """Bytes as GiB with ``decimals`` decimals and the unit: ``2.62 GiB``."""
    return f"{n_bytes / 1024**3:,.{decimals}f} GiB"


def usd(x: Optional[float]) -> str:
    """Dollars with cents: ``$19,887.81``; ``-`` when unknown."""
    return "-" if x is None else f"${x:,.2f}"


def tokens_per_second(x: Optional[float]) -> str:
    """A throughput with its unit: ``38,025 tokens/s``; ``-`` when unknown."""
    return "-" if x is None else f"{x:,.0f} tokens/s"
