"""fmest: how much memory, time and money an LLM training run needs, before you run it.

Public API::

    import fmest
    report = fmest.estimate({"model": "meta-llama/Llama-2-7b-hf",
                             "training": {"seq_len": 4096, "micro_batch_size": 1},
                             "parallelism": {"zero_stage": 3},
                             "hardware": {"gpu": "A100-80GB", "gpus_per_node": 8}})
    report.memory.total_bytes, report.fits, report.max_micro_batch

Each ``estimate_*`` takes a :class:`fmest.job.Job`, a dict, a JSON string (our layout or
fm-training-estimator's ``EstimateInput``) and an optional ``engine`` (default: installed
plugins) and returns the chosen estimate, whose ``provenance`` says which plugin answered on
what basis.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["estimate", "estimate_jobs", "estimate_memory", "estimate_time", "estimate_tokens", "estimate_cost",
           "to_job", "Job", "Engine", "report_to_dict", "__version__"]


def to_job(job: Any):
    """A :class:`fmest.job.Job` from a job, dict or JSON text (fmest's layout or an
    EstimateInput; for an EstimateInput with several jobs, the first: use
    :func:`fmest.inputs.read_input` for all of them). A dataset file the job names is not
    counted here (:func:`estimate` counts it)."""
    from fmest.inputs import read_input

    return read_input(job, count_dataset=False)[0][0]


def _engine(engine):
    from fmest.api import _engine as engine_or_default

    return engine_or_default(engine)


def estimate_jobs(pairs, *, engine=None, quantities=("memory", "time", "tokens", "cost"),
                  method: str | None = None):
    """Estimate ``(job, InputReport)`` pairs from the input door (:mod:`fmest.inputs`); the
    first job's :class:`fmest.engine.Report` carries the others in ``others``
    (:func:`fmest.api.estimate_jobs`: the CLI and the service come through it too)."""
    from fmest.api import estimate_jobs as use_case

    return use_case(pairs, engine=engine, quantities=quantities, method=method)


def estimate(job: Any, *, engine=None, quantities=("memory", "time", "tokens", "cost"),
             method: str | None = None):
    """Estimate everything the installed plugins can answer; returns a
    :class:`fmest.engine.Report` (an EstimateInput with several jobs: the first job's report,
    the others in ``report.others``). ``method`` overrides ``job.options.method``."""
    from fmest.inputs import read_input

    return estimate_jobs(read_input(job), engine=engine, quantities=quantities, method=method)


def estimate_memory(job: Any, *, engine=None, method: str | None = None):
    """Per-GPU peak memory (:class:`fmest.estimates.MemoryEstimate`)."""
    j = to_job(job)
    if method is not None:
        j = j.evolve(options={"method": method})
    return _engine(engine).estimate_memory(j).chosen


def estimate_time(job: Any, *, engine=None, method: str | None = None):
    """Step and total time (:class:`fmest.estimates.TimeEstimate`)."""
    return estimate(job, engine=engine, quantities=("memory", "time"), method=method).time


def estimate_tokens(job: Any, *, engine=None, method: str | None = None):
    """Throughput (:class:`fmest.estimates.TokensEstimate`)."""
    return estimate(job, engine=engine, quantities=("memory", "time", "tokens"),
                    method=method).tokens


def estimate_cost(job: Any, *, engine=None, method: str | None = None):
    """Dollar cost (:class:`fmest.estimates.CostEstimate`)."""
    return estimate(job, engine=engine, method=method).cost


def __getattr__(name: str):
    if name == "Job":
        from fmest.job import Job

        return Job
    if name == "Engine":
        from fmest.engine import Engine

        return Engine
    if name == "report_to_dict":
        from fmest.output.report import report_to_dict

        return report_to_dict
    raise AttributeError(name)
