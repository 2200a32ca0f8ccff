"""The ``fmest plan`` command: arguments, output (table, JSON, CSV), exports and the plot.

The job is read exactly as ``fmest estimate`` reads it (flags, ``-f``, ``--config``: the flag
table :data:`fmest.flags.PLAN_FLAGS` and the use case :func:`fmest.api.read_jobs`); the
planning flags are rows of the same table. Registered from :mod:`fmest.default_plugins.plan` through
``fmest_register_commands``.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Optional, TextIO

from fmest.errors import InputError

if TYPE_CHECKING:   # the planner (numpy) loads when a plan runs, not when its flags are built
    from fmest.output.render import Progress
    from fmest.plan.planner import Constraints, Plan, PlanResult

GIB = 1024**3
PROGRESS_MIN_STEPS = 8


def add_arguments(p) -> None:
    """The job flags plus the planning constraints (:data:`fmest.flags.PLAN_FLAGS`;
    docs/plan.md)."""
    from fmest.flags import PLAN_FLAGS
    from fmest.flags import add_arguments as add_flags

    add_flags(p, PLAN_FLAGS)


def constraints_from_args(args) -> "Constraints":
    from fmest.plan.planner import Constraints

    return Constraints(gpus=args.gpus or (), max_gpus=args.max_gpus, max_nodes=args.max_nodes,
                       budget_usd=args.budget_usd, deadline_hours=args.deadline_hours,
                       providers=args.providers or (),
                       price_type=args.price_type or "on_demand",
                       global_batch_tokens=args.global_batch_tokens, objective=args.objective,
                       top=args.top, refine=max(0, args.refine))


def _progress(stream: Optional[TextIO] = None) -> Callable[[int, int], None]:
    """The planner's progress callback: a :class:`fmest.output.render.Progress` on stderr (a bar on
    a terminal, a line every few seconds in a log), shown for searches of
    ``PROGRESS_MIN_STEPS`` GPU counts or more."""
    from fmest.output.render import Progress

    state: dict[str, Progress] = {}

    def report(done: int, total: int) -> None:
        if total < PROGRESS_MIN_STEPS:
            return
        bar = state.get("bar")
        if bar is None:
            bar = state["bar"] = Progress("planning (GPU counts)", total, stream=stream,
                                          enabled=True, min_interval_s=2.0)
        bar.update(done)
        if done >= total:
            bar.close()
    return report


def _read_job(args, job_layers=None):
    """The one job of ``args`` (:func:`fmest.api.read_jobs`); several are an InputError."""
    from fmest.api import read_jobs

    pairs = read_jobs(args, job_layers=job_layers)
    if len(pairs) > 1:
        raise InputError("--input-file", f"the input holds {len(pairs)} jobs; plan one at a "
                         "time (split the EstimateInput)")
    return pairs[0][0]


def plan_from_args(args, engine, *, job_layers=None, progress=None):
    """(result, constraints) of the job and planning flags in ``args`` (``job_layers``: the
    job from another source, e.g. a service body, as :func:`fmest.api.read_jobs`)."""
    job = _read_job(args, job_layers)
    cons = constraints_from_args(args)
    from fmest.plan.planner import plan

    return plan(job, cons, engine=engine, progress=progress), cons


def plan_output(args, engine, *, job_layers=None) -> dict[str, Any]:
    """The ``fmest plan --format json`` object (the seam the HTTP service calls, like
    :func:`fmest.api.estimate_output`)."""
    result, cons = plan_from_args(args, engine, job_layers=job_layers)
    return result_to_dict(result, cons)


def run(args, engine) -> int:
    """``fmest plan``: see docs/plan.md."""
    if args.export:  # a directory that cannot be written fails before the search, not after
        from fmest.atomic import check_writable_dir

        check_writable_dir(args.export_dir, field="--export-dir")
    plot = _check_plot(args.plot) if args.plot else False   # so does a bad --plot file name
    progress = _progress()
    job = _read_job(args)
    cons = constraints_from_args(args)
    from fmest.plan.planner import plan

    result = plan(job, cons, engine=engine, progress=progress)
    fmt = args.format
    if fmt == "json":
        print(json.dumps(result_to_dict(result, cons), indent=2, default=str))
    elif fmt == "csv":
        sys.stdout.write(render_csv(result))
    else:
        print(plan_table(result))
    if args.export:
        _export(result, args, engine)
    if plot:
        _plot(result, cons, args.plot, model=job.model)
    return 0


# ---------------------------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------------------------

def plan_to_dict(p: Plan, rank: int) -> dict[str, Any]:
    from fmest.convert import job_to_dict

    return {
        "rank": rank, "gpu": p.gpu, "gpus": p.gpus, "nodes": p.nodes, "layout": p.layout,
        "strategy": p.strategy, "micro_batch_size": p.micro_batch_size,
        "grad_accum_steps": p.grad_accum_steps, "checkpointing": p.checkpointing,
        "memory_bytes": p.memory_bytes, "memory_gib": p.memory_bytes / GIB,
        "gpu_memory_bytes": p.gpu_memory_bytes, "headroom_bytes": p.headroom_bytes,
        "fits_probability": p.fits_probability,
        "step_seconds": p.step_seconds, "step_seconds_p10": p.step_seconds_p10,
        "step_seconds_p90": p.step_seconds_p90, "tokens_per_second": p.tokens_per_second,
        "total_seconds": p.total_seconds,
        "total_hours": None if p.total_seconds is None else p.total_seconds / 3600,
        "usd": p.usd, "usd_per_hour": p.usd_per_hour, "provider": p.provider,
        "instance": p.instance, "price_stale": p.price_stale, "pareto": p.pareto,
        "method": p.method,
        "predicted": {"memory_bytes": p.predicted_memory_bytes,
                      "step_seconds": p.predicted_step_seconds},
        "job": job_to_dict(p.job),
    }


def result_to_dict(result: PlanResult, cons: Constraints | None = None) -> dict[str, Any]:
    """The ``--format json`` object (field names are a contract: add, never rename)."""
    out = {
        "objective": result.objective,
        "fit_confidence": result.fit_confidence,
        "plans": [plan_to_dict(p, i + 1) for i, p in enumerate(result.plans)],
        "evaluated": result.evaluated,
        "seconds": result.seconds,
        "configs_per_second": result.configs_per_second,
        "rejected": dict(result.rejected),
        "global_batch_tokens": result.global_batch_tokens,
        "total_tokens": result.total_tokens,
        "warnings": list(result.warnings),
    }
    if cons is not None:
        import attrs

        out["constraints"] = {k: (list(v) if isinstance(v, tuple) else v)
                              for k, v in attrs.asdict(cons).items()}
    return out


def _duration(seconds) -> str:
    """The run's length as every table shows it (:func:`fmest.output.units.duration`)."""
    from fmest.output.units import duration

    return duration(seconds)


#: After the provider of a plan whose price quote is stale (``price_stale`` in the JSON).
STALE_MARK = " !"
STALE_NOTE = ("! priced from a STALE quote (observed longer ago than FMEST_PRICE_MAX_AGE_DAYS "
              "allows; `fmest prices` lists them): check the provider's current price")


def _rows(result: PlanResult) -> list[list[str]]:
    rows = []
    for i, p in enumerate(result.plans, 1):
        rows.append([
            f"{i}{'*' if p.pareto else ''}", f"{p.gpu} x{p.gpus}", p.layout, p.strategy,
            f"{p.micro_batch_size}x{p.grad_accum_steps}", p.checkpointing,
            f"{p.memory_bytes / GIB:.1f}", f"{p.headroom_bytes / GIB:.1f}",
            "-" if p.fits_probability is None else f"{p.fits_probability * 100:.0f} %",
            f"{p.step_seconds:.2f}", f"{p.tokens_per_second:,.0f}", _duration(p.total_seconds),
            "-" if p.usd is None else f"{p.usd:,.2f}",
            "-" if p.provider is None else
            f"{p.provider} {p.instance}{STALE_MARK if p.price_stale else ''}"])
    return rows


HEADER = ["#", "GPU x n", "layout", "strategy", "mb x accum", "ckpt", "GiB/GPU",
          "headroom", "P(fit)", "step s", "tokens/s", "total", "USD", "provider"]
#: numeric columns, right-aligned
_RIGHT = {"GiB/GPU", "headroom", "P(fit)", "step s", "tokens/s", "total", "USD"}


def plan_table(result: PlanResult, *, tty: bool | None = None) -> str:
    """The table (:mod:`fmest.output.render`: never cropped; split into parts that repeat the
    ``#`` column when wider than the terminal), then the search's prose, wrapped at words."""
    from fmest.output.render import Column, output_width, wrap
    from fmest.output.render import render_table as table

    rows = _rows(result)
    lines = []
    if rows:
        lines.append(table([Column(name=h, align="right" if h in _RIGHT else "left")
                            for h in HEADER], rows, tty=tty))
        lines.append("* on the cost/time Pareto front of these plans")
        if any(p.price_stale for p in result.plans):
            lines.append(STALE_NOTE)
    else:
        lines.append("No configuration fits within the constraints.")
    lines.append(f"\nevaluated {result.evaluated:,} configurations in {result.seconds:.2f} s "
                 f"({result.configs_per_second:,.0f}/s); global batch "
                 f"{result.global_batch_tokens:,} tokens; numbers of the plans: full engine; "
                 f"a plan fits at P(fit) >= {result.fit_confidence * 100:g} % "
                 "(--fit-confidence)")
    if result.rejected:
        lines.append("rejected: " + "; ".join(f"{reason} {n:,}"
                                               for reason, n in result.rejected.items()))
    for w in result.warnings:
        lines.append(f"warning: {w}")
    width = output_width(tty)
    prose = lines[1:] if rows else lines   # the table (lines[0]) is laid out to the width
    return "\n".join(lines[:len(lines) - len(prose)] + [wrap(ln, width=width) for ln in prose])


CSV_FIELDS = ("rank", "gpu", "gpus", "nodes", "layout", "strategy", "micro_batch_size",
              "grad_accum_steps", "checkpointing", "memory_bytes", "gpu_memory_bytes",
              "headroom_bytes", "step_seconds", "tokens_per_second", "total_seconds", "usd",
              "usd_per_hour", "provider", "instance", "pareto", "fits_probability",
              "step_seconds_p10", "step_seconds_p90", "price_stale")


def render_csv(result: PlanResult) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore",
                            lineterminator="\n")
    writer.writeheader()
    for i, p in enumerate(result.plans, 1):
        writer.writerow(plan_to_dict(p, i))
    return buf.getvalue()


def _export(result: PlanResult, args, engine) -> None:
    """Write the configs of the best plan the exporter can express (DeepSpeed cannot express
    FSDP, accelerate cannot express pipeline stages, ...), saying so when it is not the first."""
    if not result.plans:
        print("fmest plan: nothing to export (no plan)", file=sys.stderr)
        return
    from fmest.configs.export import export_job

    first_error: InputError | None = None
    for rank, p in enumerate(result.plans, 1):
        try:
            files = export_job(p.job, args.export, registries=engine.registries)
        except InputError as exc:
            first_error = first_error or exc
            continue
        if rank > 1:
            print(f"fmest plan: {args.export} cannot express plan 1 ({first_error}); exported "
                  f"plan {rank}", file=sys.stderr)
        break
    else:   # every plan (there is at least one) failed: the first failure says why
        assert first_error is not None
        raise first_error
    write_files(files, args.export_dir, field="--export-dir")


def write_files(files: dict[str, str], directory: str, *, field: str) -> None:
    """Write each of ``files`` (name -> text) into ``directory`` (created when missing), each
    atomically (:func:`fmest.atomic.write_text_atomic`: a kill leaves the old file or the new
    one, whole), saying ``wrote PATH`` on stderr. A directory that cannot be written is an
    :class:`InputError` naming ``field``, before any file is written."""
    from fmest.atomic import check_writable_dir, write_text_atomic

    check_writable_dir(directory, field=field)
    for name, text in files.items():
        path = os.path.join(directory, name)
        write_text_atomic(path, text, field=field)
        print(f"wrote {path}", file=sys.stderr)


def _check_plot(path: str) -> bool:
    """Before the search: ``path`` must name a writable file of an image format
    (:func:`fmest.output.plot.check_plot_path`: an InputError naming ``--plot`` and the
    accepted formats if not). False, with a message, when matplotlib is missing: the plan is
    still printed, the plot skipped."""
    from fmest.output.plot import check_plot_path

    check_plot_path(path)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("fmest plan: --plot needs matplotlib (pip install 'fmest[plot]'); no plot will "
              "be written", file=sys.stderr)
        return False
    return True


def _plot(result: PlanResult, cons: Constraints, path: str, *, model: str = "") -> None:
    """Cost against time of the plans (:func:`fmest.output.plot.write_plan_plot`)."""
    from fmest.output.plot import write_plan_plot

    write_plan_plot(result_to_dict(result, cons), path, model=model)
    print(f"wrote {path}", file=sys.stderr)
