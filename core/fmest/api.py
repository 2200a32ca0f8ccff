"""The use cases: what a command, the service or a notebook asks of fmest, over the engine.

Each takes the options a user gave (``dest -> value`` from the flag table, :mod:`fmest.flags`,
or an argparse namespace built from it) and/or jobs from the input door, and returns finished
data; rendering is :mod:`fmest.output.report`'s. The engine answers quantities only; the searches a
report shows beside them (largest micro-batch, fewest GPUs: :mod:`fmest.searches`) run here,
once per job.

* :func:`read_jobs` -- every job the options describe (``-f``, ``--config``, flags; flags win)
* :func:`estimate_jobs` -- the reports of jobs from the input door
* :func:`estimate_output` -- the ``fmest estimate --format json`` object
* :func:`compare_output` -- ``fmest estimate --compare KEY=V1,V2``: variants side by side
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
#: the searches a report may carry (``memory.max_micro_batch``, ``memory.min_gpus``,
#: ``memory.to_make_it_fit``: :mod:`fmest.fit_advice`, after the other two, whose answers it reuses)
SEARCHES = ("max_micro_batch", "min_gpus", "to_make_it_fit")
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
    memory was answered): the largest micro-batch and the fewest GPUs that fit, and for a job
    that does not fit the cheapest changes that make it fit (:mod:`fmest.fit_advice`)."""
    from fmest import searches as search

    if report.memory is None or report.job.mode != "training" or not searches:
        return report
    found: dict[str, Any] = {}
    notes: list[str] = []
    if "max_micro_batch" in searches and report.context.model.model_type == "weights_only":
        # --params N: activations are not modelled, so every micro-batch "fits" the same:
        # claim no largest one (it stays None) and say why
        notes = ["largest micro-batch not estimated: a weights-only model (--params) has no "
                 "dimensions to size activations with; give --hidden-size ... or a config"]
    elif "max_micro_batch" in searches:
        # at the job's options.fit_confidence (P(fit) from each candidate's interval), as
        # min_gpus below
        notes = engine.search_note(report.memory)
        largest = search.largest_micro_batch(engine, report.job, report.context,
                                             known=report.memory)
        found["max_micro_batch"] = largest.batch
        found["max_micro_batch_confidence"] = largest.confidence
    if "min_gpus" in searches:
        # the report's own verdict is one probe of the search (a paged optimizer's answer has
        # its states moved to host memory, which the search does not model: probe it afresh)
        known = None
        if report.fits is not None and not getattr(report.context.optimizer, "paged", False):
            from fmest.engine import usable_memory_bytes

            known = (report.context.layout, search.judge(
                report.job, report.memory, usable_memory_bytes(report.job, report.context)))
        found["min_gpus"] = search.min_gpus(engine, report.job, known=known,
                                            ctx=report.context)
    warnings = tuple(dict.fromkeys((*report.warnings, *notes)))
    report = attrs.evolve(report, warnings=warnings, **found)
    if "to_make_it_fit" in searches:
        from fmest.fit_advice import to_make_it_fit

        report = attrs.evolve(report, to_make_it_fit=to_make_it_fit(engine, report))
    return report


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
        try:
            result = with_searches(eng.estimate(job, quantities=tuple(quantities)), eng,
                                   searches)
        except InputError as exc:
            raise _named_by_origin(exc, origin) from None
        extra = origin.warnings() if origin is not None else ()
        reports.append(attrs.evolve(result, input=origin, warnings=result.warnings + extra))
    first = reports[0]
    return attrs.evolve(first, others=tuple(reports[1:])) if len(reports) > 1 else first


def _named_by_origin(exc: InputError, origin: Any) -> InputError:
    """A refusal of a job field that a config file set, named by the file and key it came from
    (``"axolotl.yml: base_model (-> model)"``), as the input door names the values it checks
    itself; flags and fmest's own job fields keep their names."""
    where = (getattr(origin, "origins", None) or {}).get(exc.field)
    if not where or where.startswith("--") or f"(-> {exc.field})" in exc.field:
        return exc
    return exc.at(f"{where} (-> {exc.field})")


def estimate_output(given: Given, engine: Optional["Engine"] = None, *,
                    job_layers: Optional[Sequence["Layer"]] = None) -> dict:
    """The object ``fmest estimate --format json`` prints (see :func:`read_jobs` for
    ``job_layers``)."""
    from fmest.output.report import reports_to_dict

    return reports_to_dict(estimate_jobs(read_jobs(given, job_layers=job_layers),
                                         engine=engine))


#: Most variants one ``--compare`` run estimates: each is a full estimate with its searches
#: (about 10-50 ms on the theory path), and a table of more columns is not read.
MAX_COMPARE_VARIANTS = 64


def compare_variants(specs: Sequence[str]) -> list[dict[str, Any]]:
    """The variants ``--compare KEY=V1,V2[,...]`` (repeatable) asks for: one ``{KEY: value}``
    per combination, in the order given (the last KEY varies fastest). KEY is a flag's JSON
    name (:func:`fmest.flags.json_flags` of ``fmest estimate``), each value is read through the
    flag's own parser and choices; every refusal is an :class:`InputError` on ``--compare``."""
    import itertools
    import math

    from fmest import flags as flag_table
    from fmest.errors import near_names

    names = flag_table.json_flags(flag_table.ESTIMATE_FLAGS)
    axes: list[tuple[str, list[Any]]] = []
    seen: dict[str, str] = {}
    for spec in specs:
        key, eq, raw = str(spec).partition("=")
        key = key.strip()
        if not eq or not key:
            raise InputError("--compare", "expected KEY=V1,V2[,...]: a flag's JSON name (zero, "
                             "technique, gpu, ...) and its values", value=spec)
        flag = names.get(key)
        if flag is None:
            near = near_names(key, names, n=3)
            hint = f"; did you mean {' or '.join(near)}?" if near else ""
            raise InputError("--compare", f"{key!r} is not a flag of fmest estimate (JSON name: "
                             f"the flag without -- and with _ for -){hint}", value=spec,
                             accepted=sorted(names))
        if flag.dest in seen:
            raise InputError("--compare", f"{key} is compared twice ({seen[flag.dest]!r} and "
                             f"{spec!r}); give its values once", value=spec)
        seen[flag.dest] = str(spec)
        texts = [t.strip() for t in raw.split(",")]
        if not any(texts) or not all(texts):
            raise InputError("--compare", f"{key}: an empty value; give V1,V2[,...]",
                             value=spec, accepted=flag.accepted())
        values: list[Any] = []
        for text in texts:
            try:
                values.append(flag_table.convert(key, flag, text))
            except InputError as exc:
                raise InputError("--compare", f"{key}: {exc.message}", value=text,
                                 accepted=exc.accepted) from None
            if values.index(values[-1]) < len(values) - 1:
                raise InputError("--compare", f"{key}: a value given twice (two identical "
                                 "columns)", value=spec)
        axes.append((key, values))
    count = math.prod(len(v) for _, v in axes)
    if count > MAX_COMPARE_VARIANTS:
        sizes = " x ".join(f"{len(v)} {k}" for k, v in axes)
        raise InputError("--compare", f"{count} variants ({sizes}); at most "
                         f"{MAX_COMPARE_VARIANTS}: each is a full estimate, and a table of more "
                         "columns is not read (split the comparison)", value=count)
    keys = [k for k, _ in axes]
    return [dict(zip(keys, combo, strict=True))
            for combo in itertools.product(*(v for _, v in axes))]


def variant_label(settings: Mapping[str, Any]) -> str:
    """``zero=2, technique=lora``: a variant as the table's column header names it."""
    def shown(value: Any) -> str:
        return ",".join(map(str, value)) if isinstance(value, list) else str(value)

    return ", ".join(f"{k}={shown(v)}" for k, v in settings.items())


def compare_reports(given: Given, engine: Optional["Engine"] = None
                    ) -> list[tuple[dict[str, Any], "Report"]]:
    """``(settings, report)`` of each variant of ``--compare`` (:func:`compare_variants`):
    the job the other options describe, with the variant's flags set (they win over the
    flags given), estimated as ``fmest estimate`` estimates it."""
    from fmest import flags as flag_table
    from fmest.inputs import read_file

    values = _values(given)
    if values.get("format") not in (None, "table", "json"):
        raise InputError("--compare", "prints a table or --format json", value=values["format"],
                         accepted=["table", "json"])
    if values.get("plot"):
        raise InputError("--compare", "draws no plot: --plot draws one job (drop one of them)")
    variants = compare_variants(values.get("compare") or [])
    names = flag_table.json_flags(flag_table.ESTIMATE_FLAGS)
    eng = _engine(engine)
    # the job input is read once (``-f -`` is stdin)
    layers = read_file(values["input_file"]) if values.get("input_file") else None
    out = []
    for settings in variants:
        variant = dict(values)
        variant.update({names[k].dest: v for k, v in settings.items()})
        try:
            pairs = read_jobs(variant, job_layers=layers)
            if len(pairs) > 1:
                raise InputError("--input-file", f"the input holds {len(pairs)} jobs; compare "
                                 "variants of one job (split the EstimateInput)")
            report = estimate_jobs(pairs, engine=eng)
        except InputError as exc:
            raise type(exc)(exc.field, f"{exc.message} (--compare variant "
                            f"{variant_label(settings)})", value=exc.value,
                            accepted=exc.accepted) from None
        out.append((settings, report))
    return out


def compare_output(given: Given, engine: Optional["Engine"] = None) -> list[dict]:
    """The list ``fmest estimate --compare ... --format json`` prints: each variant's
    ``--format json`` object with its ``settings`` (``{KEY: value}`` as given) first."""
    from fmest.output.report import report_to_dict

    return [{"settings": settings, **report_to_dict(report)}
            for settings, report in compare_reports(given, engine)]


def _seconds(s: Optional[float]) -> str:
    if s is None:
        return "-"
    for limit, unit, scale in ((1, "ms", 1e-3), (120, "s", 1), (7200, "min", 60),
                               (3 * 86400, "h", 3600)):
        if s < limit:
            return f"{s / scale:.1f} {unit}" if unit != "s" else f"{s:.2f} s"
    return f"{s / 86400:.1f} days"


#: the rows of the ``--compare`` table: a label, and how a variant's JSON object shows it
_COMPARE_ROWS: tuple[tuple[str, Any], ...] = (
    ("GPUs", lambda o: f"{o['layout']['world_size']} x {o['gpu']['name']}"),
    ("peak memory/GPU", lambda o: o["memory"] and f"{o['memory']['total_gib']:.2f} GiB"),
    ("verdict", lambda o: o["memory"] and {True: "FITS", False: "DOES NOT FIT"}.get(
        o["memory"]["fits"])),
    ("step time", lambda o: o["time"] and _seconds(o["time"]["step_seconds"])),
    ("tokens/s", lambda o: o["tokens"] and f"{o['tokens']['tokens_per_second']:,.0f}"),
    ("total time", lambda o: o["time"] and _seconds(o["time"]["total_seconds"])),
    ("cost", lambda o: o["cost"] and o["cost"]["usd"] is not None
     and f"${o['cost']['usd']:,.2f}"),
)


def compare_text(variants: Sequence[Mapping[str, Any]], *, tty: Optional[bool] = None) -> str:
    """The ``--compare`` table for people (one column per variant of :func:`compare_output`),
    then each warning once, with the variants it concerns when not all."""
    from fmest.output.render import Column, render_table

    columns = [Column(name="")] + [Column(name=variant_label(v["settings"]), align="right")
                                   for v in variants]
    rows = [[label] + [show(v) or "-" for v in variants] for label, show in _COMPARE_ROWS]
    lines = [render_table(columns, rows, tty=tty)]
    warned: dict[str, list[str]] = {}
    for v in variants:
        for w in v.get("warnings") or []:
            warned.setdefault(w, []).append(variant_label(v["settings"]))
    if warned:
        lines.append("")
    for w, where in warned.items():
        lines.append(f"warning: {w}" if len(where) == len(variants)
                     else f"warning ({'; '.join(where)}): {w}")
    return "\n".join(lines)


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
