"""The shipped price table ``prices.csv``: loading, checking, and the staleness rule."""

from __future__ import annotations

import csv
import math
import os
from datetime import date
from importlib import resources
from typing import Iterator, Optional

from fmest.errors import InputError
from fmest.job import PRICE_TYPES
from fmest.prices import PriceQuote

COLUMNS = ("provider", "instance", "gpu", "gpus_per_instance", "region", "price_type",
           "usd_per_instance_hour", "usd_per_gpu_hour", "observed", "source_url", "notes")

#: Prices observed more than this many days before today are stale (FMEST_PRICE_MAX_AGE_DAYS).
DEFAULT_MAX_AGE_DAYS = 180

#: Largest gap allowed between usd_per_gpu_hour and usd_per_instance_hour / gpus_per_instance.
_PER_GPU_TOLERANCE_USD = 1e-5


class PriceTableError(ValueError):
    """A malformed row in a price table (names the file, line and column)."""


def _row_error(where: str, column: str, message: str) -> PriceTableError:
    return PriceTableError(f"{where}: {column}: {message}")


def quote_from_row(row: dict[str, str], where: str = "prices.csv") -> PriceQuote:
    """Build a :class:`PriceQuote` from one CSV row, checking types, the price type, the date
    and that the per-GPU price equals the instance price over the GPU count."""
    missing = [c for c in COLUMNS if c not in row or row[c] is None]
    if missing:
        raise _row_error(where, missing[0], "missing column")
    for col in ("provider", "instance", "gpu", "region", "observed", "source_url"):
        if not row[col].strip():
            raise _row_error(where, col, "empty")
    try:
        gpus = int(row["gpus_per_instance"])
    except ValueError:
        raise _row_error(where, "gpus_per_instance", f"expected a whole number, got "
                         f"{row['gpus_per_instance']!r}") from None
    if gpus < 1:
        raise _row_error(where, "gpus_per_instance", f"must be >= 1, got {gpus}")
    prices = {}
    for col in ("usd_per_instance_hour", "usd_per_gpu_hour"):
        try:
            prices[col] = float(row[col])
        except ValueError:
            raise _row_error(where, col, f"expected a number, got {row[col]!r}") from None
        if not math.isfinite(prices[col]) or prices[col] <= 0:
            raise _row_error(where, col, f"must be a positive number, got {row[col]!r}")
    derived = prices["usd_per_instance_hour"] / gpus
    if abs(derived - prices["usd_per_gpu_hour"]) > _PER_GPU_TOLERANCE_USD:
        raise _row_error(where, "usd_per_gpu_hour", f"{prices['usd_per_gpu_hour']} is not "
                         f"usd_per_instance_hour / gpus_per_instance = {derived:.6f}")
    ptype = row["price_type"].strip()
    if ptype not in PRICE_TYPES:
        raise _row_error(where, "price_type", f"{ptype!r} is not one of {', '.join(PRICE_TYPES)}")
    try:
        date.fromisoformat(row["observed"].strip())
    except ValueError:
        raise _row_error(where, "observed", f"expected an ISO date YYYY-MM-DD, got "
                         f"{row['observed']!r}") from None
    return PriceQuote(provider=row["provider"].strip(), instance=row["instance"].strip(),
                      gpu=row["gpu"].strip(), gpus_per_instance=gpus, region=row["region"].strip(),
                      price_type=ptype, usd_per_instance_hour=prices["usd_per_instance_hour"],
                      observed=row["observed"].strip(), source=row["source_url"].strip(),
                      notes=row["notes"].strip())


def read_quotes(text: str, name: str = "prices.csv") -> Iterator[PriceQuote]:
    """Parse a price table (CSV text, ``#`` comment lines allowed)."""
    numbered = [(i, line) for i, line in enumerate(text.splitlines(), 1)
                if not line.startswith("#")]
    reader = csv.DictReader(line for _, line in numbered)
    header = tuple(reader.fieldnames or ())
    if header != COLUMNS:
        raise PriceTableError(f"{name}: expected columns {', '.join(COLUMNS)}; got "
                              f"{', '.join(header)}")
    for row in reader:
        # rows have no embedded line breaks (table rule), so reader.line_num indexes `numbered`
        lineno = numbered[reader.line_num - 1][0]
        yield quote_from_row(row, f"{name} line {lineno}")


def shipped_quotes() -> list[PriceQuote]:
    """The rows of the shipped ``prices.csv``."""
    text = resources.files("fmest_cost_cloud").joinpath("prices.csv").read_text(encoding="utf-8")
    return list(read_quotes(text))


# -- staleness ---------------------------------------------------------------------------------

def max_age_days() -> int:
    """``FMEST_PRICE_MAX_AGE_DAYS`` (default 180)."""
    raw = os.environ.get("FMEST_PRICE_MAX_AGE_DAYS", "").strip()
    if not raw:
        return DEFAULT_MAX_AGE_DAYS
    try:
        days = int(raw)
    except ValueError:
        days = -1
    if days < 0:
        raise InputError("FMEST_PRICE_MAX_AGE_DAYS", "must be a whole number of days >= 0",
                         value=raw)
    return days


def today() -> date:
    """Today, or the date in ``FMEST_PRICE_TODAY`` (ISO) for reproducible staleness."""
    raw = os.environ.get("FMEST_PRICE_TODAY", "").strip()
    if not raw:
        return date.today()
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise InputError("FMEST_PRICE_TODAY", "expected an ISO date YYYY-MM-DD",
                         value=raw) from None


def age_days(observed: str, on: Optional[date] = None) -> Optional[int]:
    """Days between ``observed`` (ISO date) and ``on`` (default :func:`today`); ``None`` when
    the date is missing or malformed."""
    try:
        seen = date.fromisoformat(observed.strip())
    except (ValueError, AttributeError):
        return None
    return ((on or today()) - seen).days


def is_stale(observed: str, on: Optional[date] = None, max_age: Optional[int] = None) -> bool:
    """True when the price is older than ``max_age`` days (default :func:`max_age_days`) on
    ``on``, or has no readable date."""
    age = age_days(observed, on)
    return age is None or age > (max_age_days() if max_age is None else max_age)
