"""The use cases: what a command, the service or a notebook asks of fmest, over the engine.

Each takes the options a user gave (``dest -> value`` from the flag table, :mod:`fmest.flags`,
or an argparse namespace built from it) and/or jobs from the input door, and returns finished
data; rendering is :mod:`fmest.output.report`'s. The engine answers quantities only; the searches a
report shows beside them (largest micro-batch, fewest GPUs: :mod:`fmest.searches`) run here,
once per job.

* :func:`read_jobs` -- every job the options describe (``-f``, ``--config``, flags; flags win)
* :func:`estimate_jobs` -- the reports of jobs from the input door
* :func:`estimate_output` -- the ``fmest estimate --format json`` object
* :func:`export_files` -- the job as a training tool's config files
* :func:`models_rows`, :func:`gpus_rows` -- the registries as ``--format json`` lists them
* planning and probing live with their commands (:mod:`fmest.plan.command`, the torch_runner
  plugin) and read their jobs through :func:`read_jobs`.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import attrs

from fmest.errors import InputError

if TYPE_CHECKING:
    from fmest.engine import Engine, Registries, Report
    from fmest.inputs import InputReport, Layer
    from fmest.job import Job

QUANTITIES = ("memory", "time", "tokens", "cost")
#: the searches a report may carry (``memory.max_micro_batch``, ``memory.min_gpus``)
SEARCHES = ("max_micro_batch", "min_gpus")
Given = Mapping[str, Any] | argparse.Namespace


def _values(given: Given) -> dict[str, Any]:
    return dict(vars(given)) if isinstance(given, argparse.Namespace) else dict(given)


def read_jobs(given: Given, *, job_layers: Optional[Sequence["Layer"]] = None,
              count_dataset: bool = True) -> list[tuple["Job", "InputReport"]]:
    """Every job the options describe, each with its :class:`fmest.inputs.InputReport`: the
    job input (``-f``, or an EstimateInput given with ``--config``), then the other
    ``--config`` files, then the flags (flags win). ``job_layers`` (from
    :func:`fmest.inputs.read_document`) replaces reading ``input_file`` (the service passes a
    request body this way). ``count_dataset=False``: leave a ``--dataset`` file unread (doors
    that do not estimate; :func:`fmest.inputs.build_job`)."""
    from fmest.flags import read_flags
    from fmest.inputs import build_jobs, read_configs, read_file

    values = _values(given)
    if job_layers is None:
        job_layers = read_file(values["input_file"]) if values.get("input_file") else []
    job_layers = list(job_layers)
    config_layers: list = []
    if values.get("config"):
        more, config_layers = read_configs(values["config"], values.get("config_format"))
        if more and job_layers:
            raise InputError("--config", "an fm-training-estimator EstimateInput is a job "
                             "input; give it with -f or --config, not both")
        job_layers = job_layers or more
    missing = InputError("--model", "required (a preset name, local config.json or Hub id; "
                         "see 'fmest models')")
    return build_jobs(job_layers, [*config_layers, read_flags(values)], require_model=missing,
                      count_dataset=count_dataset)


def job_dict(given: Given, *, count_dataset: bool = False) -> dict:
    """The first job the options describe, as a dict in fmest's layout (for commands that take
    one job, such as ``fmest probe``); a ``--dataset`` file is not read unless
    ``count_dataset``."""
    from fmest.convert import job_to_dict

    return job_to_dict(read_jobs(given, count_dataset=count_dataset)[0][0])


def _engine(engine: Optional["Engine"]) -> "Engine":
    if engine is not None:
        return engine
    from fmest.engine import default_engine

    return default_engine()


def with_searches(report: "Report", engine: "Engine",
                  searches: Sequence[str] = SEARCHES) -> "Report":
    """``report`` with the searches it shows beside its memory answer (training jobs whose
    memory was answered): the largest micro-batch and the fewest GPUs that fit."""
    from fmest import searches as search

    if report.memory is None or report.job.mode != "training" or not searches:
        return report
    found: dict[str, Any] = {}
    notes: list[str] = []
    if "max_micro_batch" in searches:
        notes = engine.search_note(report.memory)
        found["max_micro_batch"] = search.max_micro_batch(engine, report.job, report.context)
    if "min_gpus" in searches:
        # the report's own verdict is one probe of the search (a paged optimizer's answer has
        # its states moved to host memory, which the search does not model: probe it afresh)
        known = None if report.fits is None or getattr(report.context.optimizer, "paged",
                                                          False) \
            else (report.context.layout, report.fits, float(report.memory.total_bytes))
        found["min_gpus"] = search.min_gpus(engine, report.job, known=known)
    warnings = tuple(dict.fromkeys((*report.warnings, *notes)))
    return attrs.evolve(report, warnings=warnings, **found)


def estimate_jobs(pairs: Sequence[tuple["Job", Any]], *, engine: Optional["Engine"] = None,
                  quantities: Sequence[str] = QUANTITIES, method: Optional[str] = None,
                  searches: Sequence[str] = SEARCHES) -> "Report":
    """The reports of ``(job, InputReport)`` pairs from the input door (:mod:`fmest.inputs`);
    the first job's report carries the others in ``others``. The CLI, the service and
    :func:`fmest.estimate` all come through here, so they report the same."""
    eng = _engine(engine)
    reports = []
    for job, origin in pairs:
        if method is not None:
            job = job.evolve(options={"method": method})
        result = with_searches(eng.estimate(job, quantities=tuple(quantities)), eng, searches)
        extra = origin.warnings() if origin is not None else ()
        reports.append(attrs.evolve(result, input=origin, warnings=result.warnings + extra))
    first = reports[0]
    return attrs.evolve(first, others=tuple(reports[1:])) if len(reports) > 1 else first


def estimate_output(given: Given, engine: Optional["Engine"] = None, *,
                    job_layers: Optional[Sequence["Layer"]] = None) -> dict:
    """The object ``fmest estimate --format json`` prints (see :func:`read_jobs` for
    ``job_layers``)."""
    from fmest.output.report import reports_to_dict

    return reports_to_dict(estimate_jobs(read_jobs(given, job_layers=job_layers),
                                         engine=engine))


def export_files(given: Given, engine: Optional["Engine"] = None) -> dict[str, str]:
    """``fmest export --to FORMAT``: the job (flags, -f, --config) as the tool's config
    file(s), file name -> text."""
    from fmest.configs.export import export_job

    values = _values(given)
    pairs = read_jobs(values, count_dataset=False)   # a config file never needs the count
    if len(pairs) > 1:
        raise InputError("--to", f"the input holds {len(pairs)} jobs; export writes one job's "
                         "config (split the EstimateInput)")
    return export_job(pairs[0][0], values["to"], registries=_engine(engine).registries)


def models_rows(registries: "Registries") -> list[dict]:
    """The model registry as ``fmest models --format json`` prints it: every plugin's presets
    (not a built-in table), sorted by name."""
    def model_type(name: str) -> str:
        known = registries.model_info.get(name, {}).get("model_type")
        return known if known is not None else registries.models.get(name)().model_type

    return [{"name": name, "model_type": model_type(name),
             "aliases": _display_aliases(registries, name),
             "source": registries.model_sources.get(name, ""),
             "retrieved": registries.model_info.get(name, {}).get("retrieved", ""),
             "plugin": registries.models.source_of(name)}
            for name in sorted(registries.models.names(), key=str.lower)]


def _display_aliases(registries: "Registries", name: str) -> list[str]:
    """The aliases a plugin registered for ``name``, in its order (the registry keeps keys
    lower-cased; the registering plugin's spelling is in ``model_info``)."""
    given = registries.model_info.get(name, {}).get("aliases")
    return list(given) if given is not None else registries.models.aliases_of(name)


def gpus_rows(registries: "Registries") -> list[dict]:
    """The GPU registry as ``fmest gpus --format json`` prints it."""
    from fmest.convert import unstructure

    return [unstructure(g) for g in registries.gpus.values()]
