"""What would make it fit: the cheapest single changes that make a job that does not fit fit
(``memory.to_make_it_fit``; issue 26).

Run once per report by the use case (:func:`fmest.api.with_searches`), and only for a training
job whose memory answer does not fit at its ``options.fit_confidence`` (a job that fits gets
``[]`` and costs nothing). Each candidate is one change a user can make on the command line,
applied to the report's job and estimated again by the same engine (memory, and time only
for a candidate that fits: :meth:`fmest.engine.Engine.estimate`); a candidate is kept when its
answer fits by the rule the searches use (:func:`fmest.searches.judge` at the job's fit
confidence, against the usable memory of :func:`fmest.engine.usable_memory_bytes`), so
applying its ``flags`` to the job gives a verdict that fits.

The candidates, in the order they are tried (a group offers its first member that fits):

* activation checkpointing: ``selective`` (stacks that have it: Megatron, torchtitan), else
  ``full``; ``selective`` -> ``full``;
* a smaller micro-batch: the largest that fits (``memory.max_micro_batch``) among the divisors
  of ``micro-batch x grad-accum``, the accumulation raised to keep the global batch;
* a fused cross-entropy (``--loss fused``) when the loss runs unfused;
* more sharding on several data-parallel GPUs: ZeRO 1 -> 2 -> 3, or FSDP ``full_shard``;
* CPU offload of the optimizer (``--cpu-offload optimizer``; with ``--zero 2`` when the job
  shards nothing, ZeRO-Offload being a ZeRO feature);
* an 8-bit optimizer (``adamw_8bit``, ``lion_8bit``) for a 32-bit AdamW or Lion;
* more GPUs: the fewest that fit (:func:`fmest.searches.min_gpus`, the report's own
  ``memory.min_gpus`` when it has one; with ZeRO-3 added when the job shards nothing);
* a GPU of the same vendor with more memory (the smallest such that fits; among equal
  memory, the fastest);
* LoRA, else QLoRA, instead of full fine-tuning; QLoRA instead of LoRA;
* when no single change fits: the strongest member of every settings group together (the
  smallest micro-batch, fused loss, full checkpointing, offload, 8-bit optimizer, ZeRO-3), then
  that with QLoRA: the first that fits, as one ``combined`` change.

At most :data:`MAX_ESTIMATES` estimates are made (on the theory path about 0.25 ms each for
memory, 0.25 ms more for the time of one that fits; 2-core machine, November 2026).

Ranking rule: settings changes first (checkpointing, micro-batch, loss, sharding, offload,
8-bit optimizer), then hardware changes (more GPUs, a larger GPU), then changes of what is
trained (LoRA, QLoRA), then a combined change. Within each tier the least slowdown first: ``step_ratio``, the GPU time
per trained token of the changed job over the original's (the step-time ratio when the GPUs and
the tokens per step are unchanged; so more GPUs count by the GPU-hours they add), a change
whose time is unknown after those with one, then the lower peak, then the label.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

from attrs import frozen

from fmest.errors import FmestError

if TYPE_CHECKING:
    from fmest.engine import Engine, Report
    from fmest.job import Job
    from fmest.searches import Judged

#: Most estimates one report's advice makes (each candidate is one; a group stops at its first
#: that fits).
MAX_ESTIMATES = 12
#: Stacks that checkpoint selectively (Megatron ``--recompute-granularity selective``,
#: torchtitan ``activation_checkpoint.mode = "selective"``).
SELECTIVE_STACKS = frozenset({"megatron-core", "megatron-deepspeed", "torchtitan"})
#: the 8-bit counterpart of a 32-bit optimizer (bitsandbytes)
EIGHT_BIT = {"adamw": "adamw_8bit", "adamw_torch_fused": "adamw_8bit",
             "paged_adamw": "paged_adamw_8bit", "lion": "lion_8bit"}
#: rank of a change's kind (module doc: the ranking rule)
TIERS = {"setting": 0, "hardware": 1, "training": 2, "combined": 3}


@frozen(kw_only=True)
class FitChange:
    """One change that makes the job fit: ``change`` (a short label), ``flags`` (the exact
    ``fmest estimate`` flags to add), ``kind`` (``setting``, ``hardware`` or ``training``), the
    changed job's per-GPU ``peak_bytes`` and ``fits_probability`` (``None`` without an
    interval), its ``step_seconds`` and ``step_ratio`` (GPU time per token over the
    original's; ``None`` when time is not estimated), its ``gpus`` and ``gpu``."""

    change: str
    flags: tuple[str, ...]
    kind: str
    peak_bytes: int
    fits_probability: Optional[float]
    step_seconds: Optional[float]
    step_ratio: Optional[float]
    gpus: int
    gpu: str

    def to_dict(self) -> dict[str, Any]:
        """The ``memory.to_make_it_fit`` item of ``--format json``."""
        return {"change": self.change, "flags": list(self.flags), "kind": self.kind,
                "peak_bytes": self.peak_bytes, "peak_gib": self.peak_bytes / 2**30,
                "fits_probability": self.fits_probability, "step_seconds": self.step_seconds,
                "step_ratio": self.step_ratio, "gpus": self.gpus, "gpu": self.gpu}


@frozen(kw_only=True)
class _Option:
    """One candidate: its flags, kind and job (``base`` with ``sections``, the job changes it
    makes; ``None`` when it is not a plain change of fields, such as more GPUs: ``base`` is the
    job then, and it is never combined)."""

    flags: tuple[str, ...]
    kind: str
    base: "Job"
    sections: Optional[dict] = None

    @property
    def job(self) -> "Job":
        """The candidate job, built when it is tried: a group stops at its first member that
        fits, so most groups' later members are never built (a ``Job.evolve`` each)."""
        return self.base if self.sections is None else self.base.evolve(**self.sections)


def rank_key(item: FitChange) -> tuple:
    """The ranking rule of the module doc, as a sort key."""
    ratio = item.step_ratio
    return (TIERS.get(item.kind, len(TIERS)), ratio is None, ratio or 0.0, item.peak_bytes,
            item.change)


def _report_judged(report: "Report") -> Optional["Judged"]:
    """The report's answer judged at its fit confidence (:func:`fmest.searches.judge`, against
    :func:`fmest.engine.usable_memory_bytes`); None: nothing to judge. Made once per advice:
    whether it fits, and the peak a larger GPU must hold (:func:`_larger_gpus`)."""
    from fmest.engine import usable_memory_bytes
    from fmest.searches import judge

    if report.memory is None or report.fits is None:
        return None
    return judge(report.job, report.memory, usable_memory_bytes(report.job, report.context))


def _does_not_fit(report: "Report") -> Optional[bool]:
    """Whether the report's answer fails at its fit confidence (None: nothing to judge)."""
    judged = _report_judged(report)
    return None if judged is None else not judged.fits


def to_make_it_fit(engine: "Engine", report: "Report") -> Optional[list[FitChange]]:
    """The changes that make ``report``'s job fit, ranked (module doc); ``[]`` when it fits,
    ``None`` when it is not judged (no memory answer, an inference job)."""
    if report.job.mode != "training":
        return None
    judged = _report_judged(report)
    if judged is None:
        return None
    if judged.fits:
        return []
    found: list[FitChange] = []
    groups = _groups(engine, report, judged)
    open_groups = list(range(len(groups)))
    budget = MAX_ESTIMATES
    rank = 0
    # round by round: every group's first member before any group's second, so the budget
    # never starves a kind of change
    while open_groups and budget > 0:
        for g in list(open_groups):
            if budget <= 0:
                break
            if rank >= len(groups[g]):
                open_groups.remove(g)
                continue
            budget -= 1
            item = _try(engine, report, groups[g][rank])
            if item is not None:
                found.append(item)
                open_groups.remove(g)
        rank += 1
    if not found:   # no single change is enough: the strongest settings together, then with
        found = _combined(engine, report, groups)   # the strongest change of what is trained
    return sorted(found, key=rank_key)


#: the order combined changes are applied in: a later change of the same flag wins (ZeRO-3
#: from the sharding group over the ZeRO-2 that CPU offload brings along)
_COMBINE_ORDER = ("--per-device-batch", "--loss", "--grad-checkpoint", "--cpu-offload",
                  "--optimizer", "--zero", "--fsdp", "--technique")


def _merge(report: "Report", chosen: Sequence[_Option]) -> _Option:
    """The options as one: each flag keeps its last value, printed in :data:`_COMBINE_ORDER`;
    each job section merges (offload, which may bring ``--zero 2`` along, goes before the
    sharding group so its ZeRO-3 wins)."""
    pairs: dict[str, str] = {}
    merged: dict[str, dict] = {}
    for opt in sorted(chosen, key=lambda o: 0 if "--cpu-offload" in o.flags else 1):
        for flag, value in zip(opt.flags[::2], opt.flags[1::2], strict=True):
            pairs.pop(flag, None)
            pairs[flag] = value
        for section, fields in (opt.sections or {}).items():
            merged.setdefault(section, {}).update(fields)
    order = {f: i for i, f in enumerate(_COMBINE_ORDER)}
    flags = tuple(x for f in sorted(pairs, key=lambda f: order.get(f, len(order)))
                  for x in (f, pairs[f]))
    return _Option(flags=flags, kind="combined", base=report.job, sections=merged)


def _combined(engine: "Engine", report: "Report",
              groups: list[Sequence[_Option]]) -> list[FitChange]:
    """When no single change fits: every settings group's strongest member (its last) applied
    together, and if that does not fit either, together with the strongest change of what is
    trained (QLoRA); the first that fits, with every change it does not need dropped, as one
    ``combined`` change (:func:`_merge`; at most two estimates and one per change dropped)."""
    settings = [g[-1] for g in groups if g[-1].kind == "setting" and g[-1].sections is not None]
    training = [g[-1] for g in groups if g[-1].kind == "training" and g[-1].sections is not None]
    attempts = [settings] + ([settings + training[-1:]] if training else [])
    for chosen in attempts:
        if len(chosen) < 2:
            continue
        best = _try(engine, report, _merge(report, chosen))
        if best is None:
            continue
        # then drop what it does not need, one change at a time (at most one estimate each)
        for opt in list(chosen):
            rest = [o for o in chosen if o is not opt]
            if len(rest) < 2:
                break
            item = _try(engine, report, _merge(report, rest))
            if item is not None:
                chosen, best = rest, item
        return [best]
    return []


def _try(engine: "Engine", report: "Report", option: _Option) -> Optional[FitChange]:
    """``option`` estimated (memory, then time only when it fits: most candidates do not) and
    judged; ``None`` when it does not fit or the changed job is refused. The time is the one
    :meth:`fmest.engine.Engine.estimate` gives: the same decision on the same memory answer."""
    from fmest.engine import usable_memory_bytes
    from fmest.searches import judge
    from fmest.uncertainty import with_interval

    candidate = option.job
    # the fewest GPUs is the fewest-GPU search's own job: its probe's answer is this one
    known = engine.searched_memory(candidate) if option.sections is None else None
    if known is not None:
        job, ctx, chosen = known
    else:
        try:
            # the memory of engine.estimate(job, quantities=("memory",)), without its report
            # and (until it fits) without its interval: judge reads the same interval either way
            job, ctx, decision = engine.memory_decision(candidate)
        except FmestError:
            return None
        chosen = decision.chosen
    if chosen is None:
        return None
    verdict = judge(job, chosen, usable_memory_bytes(job, ctx),
                    report.job.options.fit_confidence)
    if not verdict.fits:
        return None
    memory = with_interval("memory", job, chosen)
    try:
        time = with_interval("time", job, engine.decide("time", job, ctx=ctx,
                                                        memory=memory).chosen)
    except FmestError:
        return None
    step = time.step_seconds if time is not None else None
    return FitChange(change=" ".join(option.flags), flags=option.flags, kind=option.kind,
                     peak_bytes=int(memory.total_bytes),
                     fits_probability=verdict.probability, step_seconds=step,
                     step_ratio=_ratio(report, job, ctx, time), gpus=ctx.layout.world_size,
                     gpu=ctx.gpu.name)


def _gpu_seconds_per_token(job: "Job", ctx: Any, time: Any) -> Optional[float]:
    """Step time x GPUs / samples per step (the sequence length is one job's constant)."""
    if time is None or time.step_seconds is None:
        return None
    lay, tr = ctx.layout, job.training
    samples = lay.dp * tr.micro_batch_size * tr.grad_accum_steps
    return time.step_seconds * lay.world_size / (samples * tr.seq_len)


def _ratio(before: "Report", job: "Job", ctx: Any, time: Any) -> Optional[float]:
    """GPU time per token of the changed job (``job``, ``ctx``, ``time``) over ``before``'s."""
    old = _gpu_seconds_per_token(before.job, before.context, before.time)
    new = _gpu_seconds_per_token(job, ctx, time)
    if old is None or new is None or old <= 0:
        return None
    return new / old


def _groups(engine: "Engine", report: "Report",
            judged: Optional["Judged"] = None) -> list[Sequence[_Option]]:
    """The candidates, each group tried in order until one fits (module doc); ``judged``: the
    report's answer judged (:func:`_report_judged`), made here when not given."""
    job, ctx = report.job, report.context
    tr, par, lay = job.training, job.parallelism, ctx.layout
    groups: list[Sequence[_Option]] = []

    def option(kind: str, flags: Sequence[str], **sections: Any) -> _Option:
        return _Option(flags=tuple(flags), kind=kind, base=job, sections=sections)

    # activation checkpointing
    stack = getattr(getattr(ctx, "transforms", None), "stack", None)
    stack_name = getattr(stack, "name", None) or tr.stack or "pytorch"
    levels = {"none": ["selective", "full"] if stack_name in SELECTIVE_STACKS else ["full"],
              "selective": ["full"]}.get(tr.activation_checkpointing, [])
    # Megatron's --recompute-modules apply to selective granularity only: a full level drops
    # them (as Megatron ignores them there)
    drop = {"recompute_modules": None} if getattr(tr, "recompute_modules", None) else {}
    groups.append([option("setting", ("--grad-checkpoint", level),
                          training={"activation_checkpointing": level,
                                    **(drop if level != "selective" else {})})
                   for level in levels])
    # a smaller micro-batch, the global batch kept
    largest = _largest_micro_batch(engine, report)
    if largest is not None and 1 <= largest < tr.micro_batch_size:
        samples = tr.micro_batch_size * tr.grad_accum_steps
        # the search kept the accumulation; raising it may add a gradient buffer, so the
        # divisors below the largest are tried too, largest first
        batches = [d for d in range(largest, 0, -1) if samples % d == 0][:3]
        groups.append([option("setting", ("--per-device-batch", str(b), "--grad-accum",
                                          str(samples // b)),
                              training={"micro_batch_size": b,
                                        "grad_accum_steps": samples // b})
                       for b in batches])
    # a fused cross-entropy
    fused_already = stack is not None and stack.replaces_loss
    if tr.loss == "standard" and not fused_already and not tr.liger:
        groups.append([option("setting", ("--loss", "fused"), training={"loss": "fused"})])
    # more sharding over the data-parallel GPUs
    named = par.sharding is not None
    if lay.dp > 1 and not named:
        if par.fsdp in ("no_shard", "shard_grad_op", "hybrid_shard"):
            groups.append([option("setting", ("--fsdp", "full_shard"),
                                  parallelism={"fsdp": "full_shard"})])
        elif par.fsdp == "none":
            top = 3 if par.pp == 1 else 1    # ZeRO-2/3 do not run with pipeline stages
            groups.append([option("setting", ("--zero", str(stage)),
                                  parallelism={"zero_stage": stage})
                           for stage in range(par.zero_stage + 1, top + 1)])
    # CPU offload of the optimizer
    sharded = ctx.sharding.shards
    if par.cpu_offload == "none" and (sharded or (not named and par.fsdp == "none")):
        flags: tuple[str, ...] = ("--cpu-offload", "optimizer")
        changes: dict[str, Any] = {"cpu_offload": "optimizer"}
        if not sharded:
            stage = 2 if par.pp == 1 else 1
            flags = ("--zero", str(stage), *flags)
            changes.update(zero_stage=stage, fsdp="none")
        groups.append([option("setting", flags, parallelism=changes)])
    # an 8-bit optimizer
    eight = EIGHT_BIT.get(ctx.optimizer.name)
    if eight is not None and eight in ctx.registries.optimizers:
        groups.append([option("setting", ("--optimizer", eight), training={"optimizer": eight})])
    # more GPUs
    more = _more_gpus(engine, report)
    if more is not None:
        groups.append([more])
    # a GPU with more memory, same vendor
    groups.append(_larger_gpus(report, option, judged))
    # what is trained
    techniques = {"full": ["lora", "qlora"], "lora": ["qlora"]}.get(tr.technique, [])
    groups.append([option("training", ("--technique", t), training={"technique": t})
                   for t in techniques])
    return [g for g in groups if g]


def _largest_micro_batch(engine: "Engine", report: "Report") -> Optional[int]:
    """The report's largest micro-batch that fits, searched here when it has none."""
    if report.max_micro_batch is not None:
        return int(report.max_micro_batch)
    if report.context.model.model_type == "weights_only" or \
            report.job.training.micro_batch_size <= 1:
        return None
    from fmest.searches import largest_micro_batch

    try:
        return largest_micro_batch(engine, report.job, report.context,
                                   limit=report.job.training.micro_batch_size,
                                   known=report.memory).batch
    except FmestError:
        return None


def _more_gpus(engine: "Engine", report: "Report") -> Optional[_Option]:
    """The fewest GPUs that fit: the report's ``min_gpus`` when it found a count, else (a job
    that shards nothing) the fewest under ZeRO-3."""
    from fmest import searches

    job = report.job
    par = job.parallelism
    found = report.min_gpus
    extra: tuple[str, ...] = ()
    if found is None or found.gpus is None or found.job is None:
        if report.context.sharding.shards or par.sharding is not None or par.pp > 1:
            return None
        if found is None:
            try:
                found = searches.min_gpus(engine, job)
            except FmestError:
                return None
        if found.gpus is None or found.job is None:
            shard: dict[str, Any]
            if par.fsdp != "none":
                shard, extra = {"fsdp": "full_shard"}, ("--fsdp", "full_shard")
            else:
                shard, extra = {"zero_stage": 3}, ("--zero", "3")
            try:
                found = searches.min_gpus(engine, job.evolve(parallelism=shard))
            except FmestError:
                return None
    if found.gpus is None or found.job is None or \
            found.gpus <= report.context.layout.world_size:
        return None
    new = found.job
    flags = list(extra)
    for name, old_value, value in (("--tp", par.tp, new.parallelism.tp),
                                   ("--pp", par.pp, new.parallelism.pp),
                                   ("--dp", par.dp, new.parallelism.dp)):
        if old_value != value and (name != "--dp" or par.dp is not None):
            flags += [name, str(value)]
    flags += ["--gpus-per-node", str(new.hardware.gpus_per_node)]
    if new.hardware.nodes != job.hardware.nodes:
        flags += ["--nodes", str(new.hardware.nodes)]
    return _Option(flags=tuple(flags), kind="hardware", base=new)


def _larger_gpus(report: "Report", option,
                 judged: Optional["Judged"] = None) -> list[_Option]:
    """A GPU of the same vendor with more memory and a FLOP figure for the job's dtype, whose
    usable memory holds the job's peak at its fit confidence less the part of it that depends
    on the GPU (the CUDA context, scaled like the peak): smallest memory first, the fastest
    among equals (at most two tried). ``judged``: the report's answer judged
    (:func:`_report_judged`), made here when not given."""
    from fmest.engine import usable_memory_bytes

    job, gpu, dtype = report.job, report.context.gpu, report.job.training.dtype
    # on another GPU the peak moves only by its CUDA context (the rest is the job's): a GPU
    # whose usable memory is below today's peak at the confidence less the whole context
    # cannot fit and is not tried (the two tries go to GPUs that can)
    assert report.memory is not None
    if judged is None:
        judged = _report_judged(report)
        assert judged is not None
    scale = judged.peak / judged.point if judged.point else 1.0
    context = float(report.memory.components.get("cuda_context", 0.0)) * scale
    need = judged.peak - context
    share = usable_memory_bytes(job, report.context) / gpu.memory_bytes
    seen, larger = set(), []
    for spec in report.context.registries.gpus.values():
        if spec.name in seen or spec.vendor != gpu.vendor or \
                spec.memory_bytes <= gpu.memory_bytes or spec.peak_flops_per_s(dtype) is None \
                or spec.memory_bytes * share < need:
            continue
        seen.add(spec.name)
        larger.append(spec)
    larger.sort(key=lambda s: (s.memory_bytes, -(s.peak_flops_per_s(dtype) or 0.0), s.name))
    return [option("hardware", ("--gpu", spec.name), hardware={"gpu": spec.name})
            for spec in larger[:2]]


__all__ = ["FitChange", "MAX_ESTIMATES", "rank_key", "to_make_it_fit"]
