"""Fitted constants, refitted per fold: the leave-one-source-out (LOSO) machinery.

A constant fitted on the evidence set is only honest when the rows it is scored on were not used
to fit it. ``accuracy.py`` therefore scores each source's rows with constants fitted on the
*other* sources. What is fitted is whatever the registered :class:`Fitter` objects fit:

* ``fit(train) -> params``: learn from the training rows (each a :class:`Scored`: the row, its
  fmest prediction and the measurement, in the row's unit). ``params`` is a JSON-able dict.
* ``adjust(params, item) -> float``: the prediction for ``item`` once ``params`` apply
  (a post-hoc correction such as a ratio; return ``item.predicted`` to leave it alone).
* ``overrides(params) -> dict | None`` (optional): constants that live in the product rather
  than in the benchmark (issue 12's stack profiles, issue 13's learned bundles). When a fitter
  returns a dict, ``accuracy.py`` writes the merged dicts to a JSON file, points
  ``$FMEST_FITTED_CONSTANTS`` at it and re-estimates the held-out rows with it set
  (see :func:`overrides_env`); the product side reads that variable. ``None`` (the default):
  nothing to re-estimate.
* ``applies(item) -> bool``: which rows the fitter concerns (default: its ``quantity``).

With no fitter registered LOSO equals in-sample. ``FITTERS`` holds issue 12's per-stack
constants (``stack_constants.py``), so the two columns differ by what those constants learn from
the held-out source. The benchmark also prints an "unseen" column for rows from sources outside
the original development set, on which the hand-set constants of the formulas were tuned.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import tempfile
from typing import Callable, Iterable, Optional, Protocol, Sequence

import attrs
import stack_constants

ENV_VAR = "FMEST_FITTED_CONSTANTS"


@attrs.frozen(kw_only=True)
class Scored:
    """One answered row: ``predicted`` and ``measured`` in the row's own unit."""

    id: str
    source: str
    stack: str
    quantity: str  # "memory" | "throughput"
    measured: float
    predicted: float
    row: dict = attrs.field(factory=dict, eq=False, repr=False)
    job: Optional[dict] = attrs.field(default=None, eq=False, repr=False)


class Fitter(Protocol):
    name: str
    quantity: str

    def fit(self, train: Sequence[Scored]) -> dict: ...

    def adjust(self, params: dict, item: Scored) -> float: ...


def _applies(fitter, item: Scored) -> bool:
    check = getattr(fitter, "applies", None)
    if check is not None:
        return bool(check(item))
    return fitter.quantity in (item.quantity, "both")


@attrs.define
class RatioFitter:
    """A constant ratio ``median(measured / predicted)`` per group (``by``: ``"all"`` or
    ``"stack"``) for one quantity: the simplest fitted correction, used to show that LOSO
    refits (tests) and what a per-stack scalar would buy (``accuracy.py --fitters``)."""

    quantity: str
    by: str = "all"
    name: str = ""

    def __attrs_post_init__(self):
        self.name = self.name or f"ratio-{self.quantity}-by-{self.by}"

    def _key(self, item: Scored) -> str:
        return item.stack if self.by == "stack" else "all"

    def fit(self, train: Sequence[Scored]) -> dict:
        groups: dict[str, list[float]] = {}
        for item in train:
            if item.predicted > 0:
                groups.setdefault(self._key(item), []).append(item.measured / item.predicted)
        return {key: statistics.median(vals) for key, vals in groups.items()}

    def adjust(self, params: dict, item: Scored) -> float:
        return item.predicted * params.get(self._key(item), 1.0)


#: Fitters the benchmark refits per fold: issue 12's per-stack constants that are shipped
#: (``stack_constants.stack_fitters``: none since 2026-11-27, the physics reserve scores better),
#: refitted per held-out source; issue 13's learned corrections register theirs here too.
FITTERS: list = []


FITTERS.extend(stack_constants.stack_fitters())

#: Named fitters ``accuracy.py --fitters`` can add for a what-if run.
AVAILABLE = {
    "ratio-memory": lambda: RatioFitter(quantity="memory"),
    "ratio-throughput": lambda: RatioFitter(quantity="throughput"),
    "ratio-memory-by-stack": lambda: RatioFitter(quantity="memory", by="stack"),
    "ratio-throughput-by-stack": lambda: RatioFitter(quantity="throughput", by="stack"),
    "stack-time": stack_constants.StackTimeFitter,
    "stack-reserve-fraction": stack_constants.StackReserveFitter,
}


@contextlib.contextmanager
def overrides_env(fitted: Iterable[tuple[object, dict]]):
    """Set ``$FMEST_FITTED_CONSTANTS`` to a JSON file of the fitters' ``overrides`` (merged by
    fitter name) for the duration; yields True when any fitter returned overrides."""
    merged = {}
    for fitter, params in fitted:
        get = getattr(fitter, "overrides", None)
        value = get(params) if get is not None else None
        if value is not None:
            merged[fitter.name] = value
    if not merged:
        yield False
        return
    old = os.environ.get(ENV_VAR)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(merged, fh)
    os.environ[ENV_VAR] = fh.name
    try:
        yield True
    finally:
        if old is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = old
        os.unlink(fh.name)


def _apply(fitted, item: Scored, predicted: float) -> float:
    for fitter, params in fitted:
        if _applies(fitter, item):
            predicted = fitter.adjust(params, attrs.evolve(item, predicted=predicted))
    return predicted


def in_sample(items: Sequence[Scored], fitters: Sequence) -> dict[str, float]:
    """Predictions with every fitter fitted on all rows (id -> prediction)."""
    fitted = [(f, f.fit([i for i in items if _applies(f, i)])) for f in fitters]
    return {i.id: _apply(fitted, i, i.predicted) for i in items}


def leave_one_source_out(items: Sequence[Scored], fitters: Sequence,
                         reestimate: Optional[Callable[[Scored], float]] = None
                         ) -> tuple[dict[str, float], dict[str, list]]:
    """LOSO predictions (id -> prediction) and the params fitted for each held-out source
    (source -> [params per fitter]). ``reestimate(item)`` re-runs fmest for a held-out row
    while ``$FMEST_FITTED_CONSTANTS`` holds the fold's overrides (only when a fitter has any)."""
    preds: dict[str, float] = {}
    folds: dict[str, list] = {}
    for source in sorted({i.source for i in items}):
        train = [i for i in items if i.source != source]
        fitted = [(f, f.fit([i for i in train if _applies(f, i)])) for f in fitters]
        folds[source] = [params for _, params in fitted]
        with overrides_env(fitted) as active:
            for item in items:
                if item.source != source:
                    continue
                base = reestimate(item) if (active and reestimate is not None) else item.predicted
                preds[item.id] = _apply(fitted, item, base)
    return preds, folds
