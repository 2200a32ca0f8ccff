"""``fmest solve FIELD``: the largest value of one job field that fits the GPU (issue 26).

FIELD is ``seq_len`` (tokens per sample), ``micro_batch`` (sequences per GPU), ``context``
(an inference job's tokens per sequence) or ``lora_rank`` (a LoRA/QLoRA job's adapter rank).
The job is read exactly as ``fmest estimate`` reads it (every estimate flag, ``-f``,
``--config``: :data:`fmest.flags.ESTIMATE_FLAGS`, :func:`fmest.api.read_jobs`); the searched
field's own value, if given, is replaced by the search.

Per-GPU memory grows with each of these fields, so the fits verdict is monotone in them and
the search is bisection on it, as :func:`fmest.searches.max_micro_batch` falls back to:
doubling from the smallest value until a value does not fit (or the bound), then halving the
bracket. The answer is exact at the boundary: it fits and the next valid value does not (the
next multiple of ``cp`` for ``seq_len``, which context parallelism splits evenly; else the next
integer). Each verdict is the engine's own (:func:`_probe`: the job's policy over the plugins
cheap enough to search, its calibration knobs, a paged optimizer's spill, the usable memory
after the safety margin), so ``fmest estimate`` at the answer says FITS and at the next value
DOES NOT FIT.

The search stops at the field's bound (:data:`fmest.bounds.BOUNDS`) and below a value the
model refuses (a learned position table's length, a rank above the hidden size); the answer
says which limit it met.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, Optional

from attrs import field, frozen

from fmest.errors import InfeasibleError, InputError

if TYPE_CHECKING:
    from fmest.engine import Engine, EstimateContext
    from fmest.job import Job

GIB = 1024**3


@frozen(kw_only=True)
class SolveField:
    """A field ``fmest solve`` searches: its name (the flag's JSON name), job path, the flag
    that sets it, the job mode it belongs to and what it is."""

    name: str
    path: str
    flag: str
    mode: str
    what: str


FIELDS: dict[str, SolveField] = {f.name: f for f in (
    SolveField(name="seq_len", path="training.seq_len", flag="--seq-len", mode="training",
               what="tokens per sample"),
    SolveField(name="micro_batch", path="training.micro_batch_size", flag="--micro-batch",
               mode="training", what="sequences per GPU per micro-batch"),
    SolveField(name="context", path="inference.context", flag="--context", mode="inference",
               what="tokens per served sequence (prompt + output)"),
    SolveField(name="lora_rank", path="training.lora_rank", flag="--lora-rank",
               mode="training", what="LoRA adapter rank"),
)}

#: why the search stopped: the next value does not fit, the bound, the next value is refused,
#: or not even the smallest value fits
LIMITS = ("memory", "bound", "refused", "none")


@frozen(kw_only=True)
class Probe:
    """The verdict at one value: ``fits``, the per-GPU peak (None when no plugin answered or
    the value is refused), the usable memory, and ``error`` when the job refuses the value."""

    value: int
    fits: bool
    peak_bytes: Optional[int] = None
    usable_bytes: Optional[float] = None
    #: P(fit) from the answer's P10-P90 interval (None without one: the point verdict)
    fits_probability: Optional[float] = None
    error: Optional[InputError] = field(default=None, eq=False)
    ctx: Optional["EstimateContext"] = field(default=None, eq=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "fits": self.fits, "peak_bytes": self.peak_bytes,
                "peak_gib": None if self.peak_bytes is None else self.peak_bytes / GIB,
                "fits_probability": self.fits_probability,
                "refused": None if self.error is None else str(self.error)}


@frozen(kw_only=True)
class Solution:
    """The answer: ``value`` (None when not even ``smallest`` fits), the probes at it and at
    the next valid value (None at the bound), which limit stopped the search and why."""

    field: SolveField
    value: Optional[int]
    at: Probe
    next: Optional[Probe]
    smallest: int
    step: int
    bound: int
    limit: str
    reason: str
    job: "Job"
    gpu: str
    gpu_memory_bytes: int
    probes: int
    warnings: tuple[str, ...] = ()


def _bound(path: str) -> tuple[int, str]:
    from fmest.bounds import BOUNDS

    found = next(b for b in BOUNDS if b.path == path)
    return int(found.maximum), found.reason


def _evolve(job: "Job", path: str, value: int) -> "Job":
    section, name = path.split(".")
    return job.evolve(**{section: {name: value}})


def _probe(engine: "Engine", job: "Job", path: str, value: int) -> Probe:
    """The engine's fits verdict for ``job`` with ``path`` set to ``value`` (the rule of
    :meth:`fmest.engine.Engine.estimate`: its peak, calibrated and with a paged optimizer's
    spill, against the usable memory), judged as the searches judge: P(fit) >= the job's
    ``options.fit_confidence`` (:func:`fmest.searches.judge`; the point verdict without an
    interval)."""
    from fmest.engine import calibrated, paged_to_host, usable_memory_bytes
    from fmest.searches import judge

    j = _evolve(job, path, value)
    try:
        ctx = engine.context(j)
    except InputError as exc:
        return Probe(value=value, fits=False, error=exc)
    # a rule of the field itself answered with a warning only because the value is the field's
    # default (a learned position table at the default 2048): a value the run cannot have
    own = next((w for w in ctx.warnings if w.startswith(f"{path}: ")), None)
    if own is not None:
        return Probe(value=value, fits=False, error=InputError(path, own[len(path) + 2:]))
    try:
        chosen = engine.decide("memory", j, ctx=ctx, searching=True).chosen
    except InfeasibleError:
        chosen = None
    usable = usable_memory_bytes(j, ctx)
    if chosen is None:
        return Probe(value=value, fits=False, usable_bytes=usable, ctx=ctx)
    memory = paged_to_host(j, ctx, calibrated(j, chosen))
    verdict = judge(j, memory, usable)
    return Probe(value=value, fits=verdict.fits, peak_bytes=int(memory.total_bytes),
                 usable_bytes=usable, fits_probability=verdict.probability, ctx=ctx)


def _check(job: "Job", spec: SolveField) -> None:
    if job.mode != spec.mode:
        hint = "add --mode inference" if spec.mode == "inference" else \
            "drop --mode inference (solve context searches a serving job)"
        raise InputError("--mode", f"solve {spec.name} searches a {spec.mode} job's "
                         f"{spec.what}; {hint}", value=job.mode)
    if spec.name == "lora_rank" and job.training.technique not in ("lora", "qlora"):
        raise InputError("--technique", "solve lora_rank needs a LoRA job: add --lora or "
                         "--qlora (or --technique lora/qlora)",
                         value=job.training.technique, accepted=["lora", "qlora"])


def _step_and_smallest(job: "Job", spec: SolveField) -> tuple[int, int]:
    """The spacing of valid values and the smallest one: ``seq_len`` in multiples of ``cp``
    (context parallelism splits it evenly) and at least the average sample; ``context`` at
    least the generated tokens; else every integer from 1."""
    if spec.name == "seq_len":
        step = job.parallelism.cp
        avg = job.workload.avg_seq_len
        return step, step * max(1, math.ceil((avg or 1) / step))
    if spec.name == "context":
        return 1, max(1, job.inference.output_tokens)
    return 1, 1


def solve(engine: "Engine", job: "Job", name: str) -> Solution:
    """The largest value of field ``name`` (:data:`FIELDS`) at which ``job`` fits."""
    spec = FIELDS.get(name)
    if spec is None:
        raise InputError("FIELD", "not a field solve searches", value=name,
                         accepted=list(FIELDS))
    _check(job, spec)
    step, smallest = _step_and_smallest(job, spec)
    bound, bound_reason = _bound(spec.path)
    kmin, kmax = smallest // step, bound // step
    if kmin > kmax:
        raise InputError(spec.path, f"the smallest value the job allows ({smallest}) is above "
                         f"the bound {bound:,}", value=smallest)
    probes: dict[int, Probe] = {}

    def probe(k: int) -> Probe:
        if k not in probes:
            probes[k] = _probe(engine, job, spec.path, k * step)
        return probes[k]

    first = probe(kmin)
    if first.error is not None:   # the job refuses even its smallest value: its own problem
        raise first.error
    if not first.fits:
        if first.peak_bytes is None:
            why = (f"no installed plugin answered memory for {spec.name} {smallest} with "
                   f"policy {job.options.method!r}")
        else:
            why = (f"even {spec.name} {smallest} does not fit: peak "
                   f"{first.peak_bytes / GIB:.2f} GiB per GPU, "
                   f"{(first.usable_bytes or 0) / GIB:.2f} GiB usable")
        return _solution(engine, job, spec, None, first, None, smallest, step, bound, "none",
                         why, len(probes))
    lo, hi = kmin, None
    while lo < kmax:                  # double until a value does not fit (or the bound)
        k = min(lo * 2, kmax)
        if probe(k).fits:
            lo = k
        else:
            hi = k
            break
    if hi is None:
        at = probe(lo)
        why = (f"{spec.name} reached the bound {bound:,} and still fits ({bound_reason})"
               if lo * step == bound else
               f"{spec.name} reached {lo * step:,}, the largest multiple of cp = {step} within "
               f"the bound {bound:,}, and still fits ({bound_reason})")
        return _solution(engine, job, spec, lo * step, at, None, smallest, step, bound,
                         "bound", why, len(probes))
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid).fits:
            lo = mid
        else:
            hi = mid
    at, nxt = probe(lo), probe(hi)
    if nxt.error is not None:
        limit, why = "refused", (f"{spec.name} {hi * step} is refused: {nxt.error}")
    elif nxt.peak_bytes is None:
        limit, why = "memory", (f"{spec.name} {hi * step} has no memory answer "
                                f"(policy {job.options.method!r})")
    else:
        level = ("by the point estimate" if at.fits_probability is None
                 else f"at P(fit) >= {job.options.fit_confidence * 100:g} %")
        limit, why = "memory", (
            f"{spec.name} {lo * step} fits {level} ({(at.peak_bytes or 0) / GIB:.2f} GiB of "
            f"{(at.usable_bytes or 0) / GIB:.2f} GiB usable); {hi * step} does not "
            f"({nxt.peak_bytes / GIB:.2f} GiB)")
    return _solution(engine, job, spec, lo * step, at, nxt, smallest, step, bound, limit, why,
                     len(probes))


def _solution(engine: "Engine", job: "Job", spec: SolveField, value: Optional[int], at: Probe,
              nxt: Optional[Probe], smallest: int, step: int, bound: int, limit: str,
              reason: str, probes: int) -> Solution:
    gpu = at.ctx.gpu if at.ctx is not None else engine.registries.gpus.get(job.hardware.gpu)
    warnings: list[str] = list(at.ctx.warnings) if at.ctx is not None else []
    if at.peak_bytes is not None and at.ctx is not None:
        memory = engine.decide("memory", _evolve(job, spec.path, at.value), ctx=at.ctx,
                               searching=True).chosen
        if memory is not None:
            warnings += engine.search_note(memory)
    return Solution(field=spec, value=value, at=at, next=nxt, smallest=smallest, step=step,
                    bound=bound, limit=limit, reason=reason,
                    job=_evolve(job, spec.path, at.value), gpu=gpu.name,
                    gpu_memory_bytes=gpu.memory_bytes, probes=probes,
                    warnings=tuple(dict.fromkeys(warnings)))


# -- output --------------------------------------------------------------------------------------

def solution_to_dict(sol: Solution) -> dict[str, Any]:
    """The ``fmest solve --format json`` object. Field names are a contract: add, never
    rename."""
    from fmest.convert import job_to_dict

    return {"field": sol.field.name, "path": sol.field.path, "value": sol.value,
            "fits": sol.value is not None, "limit": sol.limit, "reason": sol.reason,
            "at": sol.at.to_dict(), "next": None if sol.next is None else sol.next.to_dict(),
            "smallest": sol.smallest, "step": sol.step, "bound": sol.bound,
            "gpu": {"name": sol.gpu, "memory_bytes": sol.gpu_memory_bytes,
                    "usable_bytes": sol.at.usable_bytes},
            "probes": sol.probes, "fit_confidence": sol.job.options.fit_confidence,
            "job": job_to_dict(sol.job), "warnings": list(sol.warnings)}


def solution_table(sol: Solution, *, tty: Optional[bool] = None) -> str:
    """The answer for people: the value, the peak at it and at the next value, the GPU."""
    from fmest.output.render import Column, render_table

    ctx = sol.at.ctx
    usable = sol.at.usable_bytes
    world = f"{ctx.layout.world_size} x " if ctx is not None else ""
    lines = [f"model    {ctx.model.name if ctx is not None else sol.job.model}",
             f"GPU      {world}{sol.gpu} ({sol.gpu_memory_bytes / GIB:.2f} GiB"
             + (f", {usable / GIB:.2f} GiB usable)" if usable is not None else ")")]
    if sol.value is None:
        lines.append(f"largest {sol.field.name} that fits: none")
    else:
        lines.append(f"largest {sol.field.name} that fits: {sol.value}")
    rows = []
    for p in (sol.at, sol.next):
        if p is None:
            continue
        verdict = "refused" if p.error is not None else ("fits" if p.fits else "does not fit")
        peak, room = "-", "-"
        if p.peak_bytes is not None:
            peak = f"{p.peak_bytes / GIB:.2f}"
            if p.usable_bytes is not None:
                room = f"{(p.usable_bytes - p.peak_bytes) / 2**20:+,.1f}"
        if p.fits_probability is not None and p.error is None:
            # at the boundary both sides round to the level: say which side of it
            level = sol.job.options.fit_confidence * 100
            verdict += f" (P(fit) {'>=' if p.fits else '<'} {level:g} %)"
        rows.append((p.value, peak, room, verdict))
    lines.append("")
    lines.append(render_table([Column(name=sol.field.name, align="right"),
                               Column(name="peak GiB/GPU", align="right"),
                               Column(name="headroom MiB", align="right"),
                               Column(name="verdict")], rows, indent="  ", tty=tty))
    lines.append("")
    lines.append(f"limit: {sol.limit}: {sol.reason}")
    lines.extend(f"warning: {w}" for w in sol.warnings)
    return "\n".join(lines)


# -- the command ---------------------------------------------------------------------------------

def solve_flags() -> tuple:
    """``fmest estimate``'s rows (:data:`fmest.flags.ESTIMATE_FLAGS`) but its output options:
    the job flags, ``--fail-if-no-fit``, and ``--format table|json``."""
    from fmest import flags

    keep = tuple(f for f in flags.ESTIMATE_FLAGS if f.dest not in ("format", "plot", "compare"))
    return keep + (flags.format_flag("table", "json"),)


def add_arguments(p) -> None:
    from fmest.flags import add_arguments as add_flags

    p.add_argument("field", metavar="FIELD", choices=tuple(FIELDS),
                   help="the field to solve for: " + "; ".join(
                       f"{f.name} ({f.what}{', --mode inference' if f.mode == 'inference' else ''})"
                       for f in FIELDS.values()))
    add_flags(p, solve_flags())


def run(args, engine) -> int:
    """``fmest solve FIELD [estimate flags]``: exit 0 with the answer (also when nothing fits),
    3 with ``--fail-if-no-fit`` when not even the smallest value fits, 2 on bad input."""
    import sys

    from fmest.api import read_jobs

    pairs = read_jobs(args)
    if len(pairs) > 1:
        raise InputError("--input-file", f"the input holds {len(pairs)} jobs; solve one at a "
                         "time (split the EstimateInput)")
    job, origin = pairs[0]
    sol = solve(engine, job, args.field)
    notes: list[str] = []
    given = getattr(origin, "origins", {}).get(sol.field.path) if origin is not None else None
    if given is not None:
        notes.append(f"{sol.field.path} from {given} is replaced by the search")
    if origin is not None:
        notes += list(origin.warnings())
    if notes:
        import attrs

        sol = attrs.evolve(sol, warnings=tuple(dict.fromkeys((*sol.warnings, *notes))))
    if args.format == "json":
        print(json.dumps(solution_to_dict(sol), indent=2, default=str))
    else:
        print(solution_table(sol))
    if getattr(args, "fail_if_no_fit", False) and sol.value is None:
        print("fmest: nothing fits (--fail-if-no-fit)", file=sys.stderr)
        return 3
    return 0
