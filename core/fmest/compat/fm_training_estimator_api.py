"""Drop-in for IBM fm-training-estimator's Python API (the ADR this product descends from).

``estimate_memory``, ``estimate_time``, ``estimate_tokens``, ``estimate_cost`` and ``estimate``
take an ``EstimateInput`` (a dict, JSON text, a file path, or the library's own
``EstimateInput`` dataclass) and return the ADR's records with its field names and units
(adrs/001-resource-estimator-library.md and ``fm_training_estimator/config/arguments.py``,
foundation-model-stack/fm-training-estimator @ 1d04f05):

* ``MemoryEstimate``: ``total_mem_estimate``, ``activation_memory``, ``gradient_memory``,
  ``model_memory``, ``optimizer_memory`` as human-readable sizes (``"44.6 GiB"``, the
  library's ``fmt_size``), and ``num_gpus``: ``infra.numGpusPerPod`` when given, else the
  fewest GPUs that fit (``memory.min_gpus``; the ADR's "0 means recommend" rule);
* ``TimeEstimate``: ``time`` and ``train_time`` as ``"<seconds>s"`` (``"40s"``);
* ``TokensEstimate``: ``tps`` (tokens per second, a float as in the library's dataclass);
* ``CostEstimate``: ``usd`` (a float);
* ``Estimate``: ``memory``, ``time``, ``tokens``, ``cost``.

Each record is a ``dict`` that also answers attribute access (``est.total_mem_estimate``), so
code written against the library's dataclasses and code reading the ADR's JSON both work. Like
the library, only the first of ``job_configs`` is estimated, and an input no GPU count can fit
raises ``ValueError`` ("Input configuration is infeasible!", the library's message) with the
reason. Values come from fmest's own estimators.

The functions are built by :func:`adr_api` around the EstimateInput reader and published by
:mod:`fmest.compat.fm_training_estimator` (where the reader lives), so this module never
imports that one back: ``from fmest.compat.fm_training_estimator import estimate_memory``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable, Optional

__all__ = ["adr_api", "adr_output", "adr_estimate_from_report", "fmt_size", "fmt_seconds"]


class _Record(dict):
    """A dict whose keys are also attributes (the library returns dataclasses)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def fmt_size(size: float) -> str:
    """The library's human-readable size (``fm_training_estimator/utils/utils.py``
    ``fmt_size``): one decimal and a binary unit, ``"44.6 GiB"``."""
    for unit in ("", "Ki", "Mi", "Gi", "Ti"):
        if abs(size) < 1024.0:
            return f"{size:3.1f} {unit}B"
        size /= 1024.0
    return f"{size:.1f} PiB"


def fmt_seconds(seconds: Optional[float]) -> Optional[str]:
    """Seconds as the ADR writes them (``"40s"``); ``None`` without a workload."""
    return None if seconds is None else f"{seconds:.0f}s"


def _as_dict(estimate_input: Any) -> dict:
    if hasattr(estimate_input, "to_dict"):          # dataclass-wizard's JSONWizard
        return estimate_input.to_dict()
    if dataclasses.is_dataclass(estimate_input) and not isinstance(estimate_input, type):
        return dataclasses.asdict(estimate_input)
    if isinstance(estimate_input, (str, bytes, os.PathLike)):
        text = estimate_input.decode() if isinstance(estimate_input, bytes) else str(estimate_input)
        if not text.lstrip().startswith("{") and os.path.isfile(text):
            with open(text, encoding="utf-8") as fh:
                text = fh.read()
        return json.loads(text)
    if isinstance(estimate_input, dict):
        return estimate_input
    from fmest.errors import InputError

    raise InputError("estimate_input", "expected an EstimateInput (dict, JSON text, file path "
                     "or fm_training_estimator.config.arguments.EstimateInput)",
                     value=type(estimate_input).__name__)


def _gpus_given(data: dict) -> int:
    configs = data.get("job_configs") or data.get("jobConfigs") or [{}]
    infra = (configs[0] or {}).get("infra") or {}
    value = infra.get("numGpusPerPod", infra.get("num_gpus_per_pod", 0))
    return int(value or 0)


def _engine(engine):
    if engine is not None:
        return engine
    from fmest.engine import default_engine

    return default_engine()


def _sized_job(job, given: int, engine):
    """(job to estimate, num_gpus): the job as given, or at its fewest fitting GPUs."""
    if given > 0:
        return job, given
    from fmest.searches import min_gpus

    found = min_gpus(engine, job)
    if found.gpus is None:
        raise ValueError(f"Input configuration is infeasible! {found.reason}")
    return found.job, found.gpus


def memory_record(report, num_gpus: int) -> _Record:
    """The ADR's ``MemoryEstimate`` of an fmest report."""
    m = report.memory
    c = dict(m.components) if m is not None else {}
    total = m.total_bytes if m is not None else 0
    return _Record(
        total_mem_estimate=fmt_size(total),
        activation_memory=fmt_size(c.get("activations", 0) + c.get("logits_and_loss", 0)),
        gradient_memory=fmt_size(c.get("gradients", 0)),
        model_memory=fmt_size(c.get("weights", 0) + c.get("lora_adapters", 0)),
        optimizer_memory=fmt_size(c.get("optimizer_states", 0) + c.get("master_weights", 0)
                                  + c.get("optimizer_temporaries", 0)),
        num_gpus=int(num_gpus))


def time_record(report) -> _Record:
    t = report.time
    total = t.total_seconds if t is not None else None
    return _Record(time=fmt_seconds(total), train_time=fmt_seconds(total))


def tokens_record(report) -> _Record:
    k = report.tokens
    return _Record(tps=float(k.tokens_per_second) if k is not None else None)


def cost_record(report) -> _Record:
    c = report.cost
    return _Record(usd=float(c.usd) if c is not None and c.usd is not None else None)


def adr_estimate_from_report(report, num_gpus: int) -> _Record:
    """The ADR's ``Estimate`` (memory, time, tokens, cost) of an fmest report: what
    ``fmest estimate --format fm-training-estimator`` prints."""
    return _Record(memory=memory_record(report, num_gpus), time=time_record(report),
                   tokens=tokens_record(report), cost=cost_record(report))


def adr_api(reader: Callable[[dict], tuple[list, list]]):
    """The ADR's five functions around ``reader`` (EstimateInput dict -> (jobs, ignored)):
    ``(estimate_memory, estimate_time, estimate_tokens, estimate_cost, estimate)``.
    ``model_path`` (the library's regression model) is accepted and unused: fmest picks its
    own estimators; ``engine`` defaults to the installed plugins."""

    def report(estimate_input: Any, engine, quantities):
        data = _as_dict(estimate_input)
        jobs, _ignored = reader(data)
        eng = _engine(engine)
        job = jobs[0]
        if any(q in quantities for q in ("time", "tokens", "cost")):
            # the jobs skip fmest's input door, where a dataset is counted (fmest.datasets)
            from fmest.datasets import resolve_dataset

            job = resolve_dataset(job)[0]
        job, num_gpus = _sized_job(job, _gpus_given(data), eng)
        return eng.estimate(job, quantities=quantities), num_gpus

    def estimate_memory(estimate_input: Any, model_path: Optional[str] = None, *,
                        engine=None) -> _Record:
        """The ADR's ``estimate_memory``: per-GPU memory and ``num_gpus``."""
        rep, num_gpus = report(estimate_input, engine, ("memory",))
        return memory_record(rep, num_gpus)

    def estimate_time(estimate_input: Any, model_path: Optional[str] = None, *,
                      engine=None) -> _Record:
        """The ADR's ``estimate_time``: total and training time (``"40s"``)."""
        return time_record(report(estimate_input, engine, ("memory", "time"))[0])

    def estimate_tokens(estimate_input: Any, model_path: Optional[str] = None, *,
                        engine=None) -> _Record:
        """The ADR's ``estimate_tokens``: ``tps``."""
        return tokens_record(report(estimate_input, engine, ("memory", "time", "tokens"))[0])

    def estimate_cost(estimate_input: Any, model_path: Optional[str] = None, *,
                      engine=None) -> _Record:
        """The ADR's ``estimate_cost``: ``usd`` (None when no price applies)."""
        return cost_record(report(estimate_input, engine,
                                  ("memory", "time", "tokens", "cost"))[0])

    def estimate(estimate_input: Any, model_path: Optional[str] = None, *,
                 engine=None) -> _Record:
        """The ADR's ``estimate``: memory, time, tokens and cost together."""
        rep, num_gpus = report(estimate_input, engine, ("memory", "time", "tokens", "cost"))
        return adr_estimate_from_report(rep, num_gpus)

    return estimate_memory, estimate_time, estimate_tokens, estimate_cost, estimate


def adr_output(job, engine) -> _Record:
    """What ``fmest estimate ... --format fm-training-estimator`` prints for ``job`` (the first
    job the command line describes): the ADR's ``Estimate``. A job that names no GPU count
    (EstimateInput ``numGpusPerPod`` 0, no ``--gpus-per-node`` or ``--dp``) is estimated at its
    fewest fitting GPUs, which ``num_gpus`` reports."""
    given = 0
    if job.hardware.gpus_per_node is not None or job.parallelism.dp is not None:
        from fmest.job import resolve_layout

        given = resolve_layout(job).world_size
    job, num_gpus = _sized_job(job, given, engine)
    return adr_estimate_from_report(engine.estimate(job), num_gpus)
