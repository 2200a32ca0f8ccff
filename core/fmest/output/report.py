"""Rendering a :class:`fmest.engine.Report`: a JSON-ready dict (a contract other tools read),
its CSV row, an aligned table for people (through :mod:`fmest.output.render`), a one-line ``repr`` and
HTML for notebooks."""

from __future__ import annotations

import html
import re
from typing import Any, Optional

from fmest.convert import job_to_dict, unstructure
from fmest.estimates import fits_probability, memory_counters, verdict_text, verdict_word
from fmest.output.render import Column, csv_text, output_width, paint, wrap
from fmest.output.render import render_table as _table
from fmest.output.serving_summary import inference_lines, inference_summary
from fmest.output.units import duration, tokens_per_second, usd
from fmest.physics.counting import total_params, trainable_params

#: :class:`fmest.engine.Report`, not imported: its to_dict/_repr_html_ call this module
Report = Any

GIB = 1024**3


def _prov(est) -> dict[str, Any] | None:
    if est is None:
        return None
    p = est.provenance
    out = {"plugin": p.plugin, "basis": p.basis, "detail": p.detail}
    if p.interval is not None:
        out["interval"] = list(p.interval)
    if p.in_domain is not None:
        out["in_domain"] = p.in_domain
    if p.scaled is not None:
        out["scaled"] = p.scaled
    return out


def fit_probability(report: Report) -> Optional[float]:
    """P(the job fits) of a report's memory answer; ``None`` without an interval."""
    return _confidence(report)["fits_probability"]


def _stack_log(report: Report, m) -> dict[str, Any] | None:
    """The peak as the job's training stack logs it (:func:`fmest.stacks.memory_log_line`)."""
    from fmest.stacks import memory_log_line

    stack = getattr(getattr(report.context, "transforms", None), "stack", None)
    return memory_log_line(getattr(stack, "profile", None), memory_counters(m))


def _confidence(report: Report) -> dict[str, Any]:
    """``fits_probability`` (P(peak <= usable memory) from the answer's P10-P90 interval, see
    :func:`fmest.estimates.fits_probability`) and ``headroom_p90_bytes`` (usable memory less the
    interval's P90 end): ``None`` when the answer has no interval (analytic answers)."""
    m = report.memory
    if m is None or report.headroom_bytes is None or m.provenance.interval is None:
        return {"fits_probability": None, "headroom_p90_bytes": None}
    usable = report.headroom_bytes + m.total_bytes
    return {"fits_probability": fits_probability(m.total_bytes, m.provenance.interval, usable),
            "headroom_p90_bytes": int(usable - m.provenance.interval[1])}


def _candidate_value(quantity: str, est) -> float | None:
    return {"memory": lambda e: e.total_bytes, "time": lambda e: e.step_seconds,
            "tokens": lambda e: e.tokens_per_second, "cost": lambda e: e.usd}[quantity](est)


def _min_gpus(report: Report) -> dict[str, Any]:
    """``min_gpus`` (fewest GPUs of the job's type that fit, keeping its strategy; null when
    none does) and ``min_gpus_reason`` (fmest.searches; docs/plan.md)."""
    found = report.min_gpus
    if found is None:
        return {"min_gpus": None, "min_gpus_reason": None, "min_gpus_whole_nodes": None,
                "min_nodes": None, "min_gpus_confidence": None}
    return {"min_gpus": found.gpus, "min_gpus_reason": found.reason,
            "min_gpus_whole_nodes": found.whole_node_gpus, "min_nodes": found.nodes,
            "min_gpus_confidence": found.confidence}


def _to_make_it_fit(report: Report) -> Optional[list[dict[str, Any]]]:
    """``memory.to_make_it_fit``: the ranked changes that make the job fit (fmest.fit_advice;
    ``[]`` when it fits, null when not computed)."""
    advice = getattr(report, "to_make_it_fit", None)
    return None if advice is None else [item.to_dict() for item in advice]


def _network_text(job, ctx) -> str:
    """``; network 400 Gb/s per GPU between nodes (GPU table)`` for a multi-node layout."""
    nic = ctx.gpu.inter_node_bytes_per_s
    if ctx.layout.nodes <= 1 or not nic:
        return ""
    origin = "hardware.inter_node_gbps" if job.hardware.inter_node_gbps is not None \
        else "GPU table"
    return f"; network {nic * 8 / 1e9:g} Gb/s per GPU between nodes ({origin})"


def _fails_at_confidence(report: Report) -> bool:
    """Whether the job does not fit at its ``options.fit_confidence`` (fmest.searches.judge's
    rule: P(fit) below it, or the point verdict without an interval)."""
    p = _confidence(report)["fits_probability"]
    return report.fits is False if p is None else p < report.job.options.fit_confidence


def _advice_line(rank: int, item: Any, gpus: int) -> str:
    """``1. --grad-checkpoint full (62.10 GiB, step +33 %)``: one change of the table's list."""
    parts = [f"{item.peak_bytes / GIB:.2f} GiB"]
    if item.fits_probability is not None:
        parts.append(f"P(fit) {item.fits_probability * 100:.0f} %")
    if item.step_ratio is None:
        parts.append("step time not estimated")
    elif item.gpus != gpus:
        parts.append(f"{item.gpus} GPUs, GPU time per token {(item.step_ratio - 1) * 100:+.0f} %")
    else:
        parts.append(f"step {(item.step_ratio - 1) * 100:+.0f} %")
    return f"    {rank}. {item.change} ({', '.join(parts)})"


def report_to_dict(report: Report) -> dict[str, Any]:
    """The ``--format json`` object. Field names are a contract: add, never rename."""
    ctx, job = report.context, report.job
    counts = ctx.model.param_counts()
    out: dict[str, Any] = {
        "model": {
            "name": ctx.model.name,
            "model_type": ctx.model.model_type,
            "source": ctx.model.source,
            "total_params": total_params(ctx.model, job.training),
            "base_params": counts.total,
            "trainable_params": trainable_params(ctx.model, job.training),
            "active_params": counts.active,
            "param_counts": counts.as_dict(),
        },
        "job": job_to_dict(job),
        "layout": unstructure(ctx.layout),
        "gpu": {"name": ctx.gpu.name, "memory_bytes": ctx.gpu.memory_bytes,
                "source": ctx.gpu.source, "checked": ctx.gpu.checked},
        "memory": None, "time": None, "tokens": None, "cost": None,
        "provenance": {},
        "warnings": list(report.warnings),
    }
    m = report.memory
    if m is not None:
        out["memory"] = {
            "total_bytes": m.total_bytes,
            "total_gib": m.total_bytes / GIB,
            "components": dict(m.components),
            "phase": m.phase,
            "phase_peaks_bytes": dict(m.phase_peaks_bytes),
            # the three counters a measurement reports, each from the components' allocator
            # class (fmest.estimates.MEMORY_COMPONENTS): torch.cuda.max_memory_allocated,
            # max_memory_reserved, and the whole device as nvidia-smi shows it (the total)
            **memory_counters(m),
            # the same peak as the stack's own log line prints it (stacks.toml
            # memory_log_counter / memory_log_unit); None when the stack names none
            "stack_log": _stack_log(report, m),
            "gpu": ctx.gpu.name,
            "gpu_memory_bytes": ctx.gpu.memory_bytes,
            # what the job must fit in: the total CUDA reports (gpus.csv cuda_total_gib), else
            # the label; headroom_bytes is measured against it
            "gpu_capacity_bytes": getattr(ctx.gpu, "capacity_bytes", ctx.gpu.memory_bytes),
            "fits": report.fits,
            "headroom_bytes": report.headroom_bytes,
            **_confidence(report),
            "verdict": verdict_word(report.fits, _confidence(report)["fits_probability"]),
            "max_micro_batch": report.max_micro_batch,
            "max_micro_batch_confidence": report.max_micro_batch_confidence,
            **_min_gpus(report),
            "to_make_it_fit": _to_make_it_fit(report),
            "notes": list(m.notes),
            "provenance": _prov(m),
            "host_bytes": m.host_bytes,
            "metrics": dict(m.metrics),
        }
    t = report.time
    if t is not None:
        out["time"] = {"step_seconds": t.step_seconds, "total_seconds": t.total_seconds,
                       "total_steps": t.total_steps, "breakdown": dict(t.breakdown),
                       "mfu": t.mfu, "hfu": t.hfu, "flops_per_step": t.flops_per_step,
                       "notes": list(t.notes), "provenance": _prov(t),
                       "metrics": dict(t.metrics)}
    k = report.tokens
    if k is not None:
        out["tokens"] = {"tokens_per_second": k.tokens_per_second,
                         "tokens_per_second_per_gpu": k.tokens_per_second_per_gpu,
                         "samples_per_second": k.samples_per_second, "mfu": k.mfu,
                         "hfu": k.hfu, "notes": list(k.notes), "provenance": _prov(k)}
    c = report.cost
    if c is not None:
        out["cost"] = {"usd": c.usd, "usd_per_hour": c.usd_per_hour, "provider": c.provider,
                       "instance": c.instance, "instances": c.instances,
                       "gpus_per_instance": c.gpus_per_instance, "region": c.region,
                       "price_type": c.price_type, "price_observed": c.price_observed,
                       "price_source": c.price_source, "stale": c.stale,
                       "gpu_hours": c.gpu_hours, "notes": list(c.notes), "provenance": _prov(c)}
    summary = inference_summary(report)
    if summary is not None:
        out["inference"] = summary
    for q in ("memory", "time", "tokens", "cost"):
        est = getattr(report, q)
        if est is not None:
            out["provenance"][q] = _prov(est)
    out["decisions"] = {
        q: {"policy": d.policy, "rule": d.rule,
            "candidates": [dict(_prov(c) or {}, value=_candidate_value(q, c))
                           for c in d.candidates],
            "failures": [{"plugin": f.plugin, "error": f.error} for f in d.failures]}
        for q, d in report.decisions.items()}
    inp = report.input
    if inp is not None:
        out["input"] = inp.to_dict()
        if inp.files:  # the config-file view (contract since --config): flags left out
            out["config"] = {"files": [list(f) for f in inp.files],
                             "origins": {k: v for k, v in inp.origins.items()
                                         if not v.startswith("--")},
                             "ignored": [str(i) for i in inp.ignored if i.kind == "config"],
                             # the ignored keys that may change the answer (each also a warning)
                             "not_modelled": [str(i) for i in inp.ignored
                                              if i.kind == "config" and i.effect == "unmodelled"],
                             "unresolved": list(inp.unresolved.values())}
    return out


def reports_to_dict(report: Report) -> dict[str, Any]:
    """The ``--format json`` object of an estimate: one job's object, or ``{"jobs": [...]}``
    (one object per job, in input order) when the input held several jobs."""
    reports = report.all_reports
    if len(reports) == 1:
        return report_to_dict(report)
    return {"jobs": [report_to_dict(r) for r in reports]}


#: ``fmest estimate --format csv`` columns, one row per job; every value is the number of the
#: ``--format json`` object named in :func:`estimate_csv_rows` (units in the names), then one
#: ``component_<name>_bytes`` column per memory component any job has.
ESTIMATE_CSV_FIELDS = (
    "job", "model", "model_type", "mode", "gpu", "gpus", "nodes", "dp", "tp", "pp", "cp", "ep",
    "fits", "memory_bytes", "memory_gib", "gpu_memory_bytes", "headroom_bytes",
    "max_micro_batch", "peak_phase", "step_seconds", "total_seconds", "total_steps", "mfu",
    "tokens_per_second", "tokens_per_second_per_gpu", "usd", "usd_per_hour", "provider",
    "instance", "region", "price_type", "memory_basis", "memory_plugin", "time_basis",
    "time_plugin", "warnings")


def estimate_csv_rows(out: dict[str, Any]) -> list[dict[str, Any]]:
    """The CSV rows of a ``--format json`` object (one job's, or ``{"jobs": [...]}``)."""
    rows = []
    for i, job in enumerate(out["jobs"] if "jobs" in out else [out], 1):
        mem, tim = job.get("memory") or {}, job.get("time") or {}
        tok, cost = job.get("tokens") or {}, job.get("cost") or {}
        lay = job.get("layout") or {}
        row = {"job": i, "model": job["model"]["name"], "model_type": job["model"]["model_type"],
               "mode": (job.get("job") or {}).get("mode"), "gpu": job["gpu"]["name"],
               "gpus": lay.get("world_size"), "memory_bytes": mem.get("total_bytes"),
               "memory_gib": mem.get("total_gib"), "peak_phase": mem.get("phase"),
               "memory_basis": (mem.get("provenance") or {}).get("basis"),
               "memory_plugin": (mem.get("provenance") or {}).get("plugin"),
               "time_basis": (tim.get("provenance") or {}).get("basis"),
               "time_plugin": (tim.get("provenance") or {}).get("plugin"),
               "warnings": job.get("warnings") or []}
        row.update({k: lay.get(k) for k in ("nodes", "dp", "tp", "pp", "cp", "ep")})
        row.update({k: mem.get(k) for k in ("fits", "gpu_memory_bytes", "headroom_bytes",
                                            "max_micro_batch")})
        row.update({k: tim.get(k) for k in ("step_seconds", "total_seconds", "total_steps",
                                            "mfu")})
        row.update({k: tok.get(k) for k in ("tokens_per_second", "tokens_per_second_per_gpu")})
        row.update({k: cost.get(k) for k in ("usd", "usd_per_hour", "provider", "instance",
                                             "region", "price_type")})
        row.update({f"component_{name}_bytes": b
                    for name, b in (mem.get("components") or {}).items()})
        rows.append(row)
    return rows


def estimate_csv(out: dict[str, Any]) -> str:
    """``fmest estimate --format csv`` text of a ``--format json`` object."""
    rows = estimate_csv_rows(out)
    components = dict.fromkeys(k for r in rows for k in r if k.startswith("component_"))
    return csv_text([*ESTIMATE_CSV_FIELDS, *components], rows)


def short_repr(report: Report) -> str:
    """One line: model, GPUs, per-GPU memory against capacity and verdict, step, tokens/s, cost."""
    ctx = report.context
    parts = [f"{ctx.model.name} on {ctx.layout.world_size} x {ctx.gpu.name}"]
    if report.memory is not None:
        verdict = {True: "fits", False: "does not fit", None: "fit unknown"}[report.fits]
        parts.append(f"{report.memory.total_bytes / GIB:.2f} GiB/GPU of "
                     f"{ctx.gpu.memory_bytes / GIB:.0f} ({verdict})")
    if report.time is not None:
        parts.append(f"step {_fmt_seconds(report.time.step_seconds)}")
    if report.tokens is not None:
        parts.append(f"{report.tokens.tokens_per_second:,.0f} tokens/s")
    if report.cost is not None and report.cost.usd is not None:
        parts.append(f"${report.cost.usd:,.2f}")
    more = f" (+{len(report.others)} more jobs)" if report.others else ""
    return f"<Report {', '.join(parts)}{more}>"


def render_html(report: Report) -> str:
    """HTML for notebooks (``Report._repr_html_``): the headline numbers and the memory
    breakdown of each job."""
    return "".join(_job_html(r) for r in report.all_reports)


def _job_html(report: Report) -> str:
    esc = html.escape
    ctx, m = report.context, report.memory
    head = [("model", ctx.model.name),
            ("GPUs", f"{ctx.layout.world_size} x {ctx.gpu.name}")]
    if m is not None:
        verdict = verdict_text(report.fits, _confidence(report)["fits_probability"])
        head += [("per-GPU peak memory", f"{m.total_bytes / GIB:.2f} GiB of "
                  f"{ctx.gpu.memory_bytes / GIB:.2f} GiB ({verdict})"),
                 ("largest micro-batch that fits", report.max_micro_batch)]
    if report.time is not None:
        head.append(("step time", _fmt_seconds(report.time.step_seconds)))
        if report.time.total_seconds is not None:
            head.append(("total", _fmt_seconds(report.time.total_seconds)))
    if report.tokens is not None:
        head.append(("tokens/s", f"{report.tokens.tokens_per_second:,.0f}"))
    c = report.cost
    if c is not None and c.usd is not None:
        head.append(("cost", f"${c.usd:,.2f} at ${c.usd_per_hour:,.2f}/h ({c.provider})"))
    rows = "".join(f"<tr><th style='text-align:left'>{esc(str(k))}</th><td>"
                   f"{esc('-' if v is None else str(v))}</td></tr>" for k, v in head)
    out = f"<table class='fmest-report'>{rows}</table>"
    if m is not None and m.components:
        comp = "".join(f"<tr><td>{esc(name)}</td><td style='text-align:right'>"
                       f"{b / GIB:.2f}</td></tr>"
                       for name, b in sorted(m.components.items(), key=lambda kv: -kv[1]) if b)
        out += (f"<table class='fmest-memory'><tr><th>component</th><th>GiB</th></tr>{comp}"
                f"<tr><th>total</th><th style='text-align:right'>{m.total_bytes / GIB:.2f}"
                "</th></tr></table>")
    for w in report.warnings:
        out += f"<p>warning: {esc(w)}</p>"
    return f"<div>{out}</div>"


def _fmt_gib(n: float) -> str:
    return f"{n / GIB:.2f}"


def _fmt_seconds(s: float | None) -> str:
    """A duration as every table shows it (:func:`fmest.output.units.duration`)."""
    return duration(s)


class _Block(str):
    """Lines already laid out (a table): :func:`report_table` does not wrap them again."""


def _explain_value(quantity: str, v: float | None) -> str:
    """A candidate's number with its unit (``--explain``)."""
    if v is None:
        return "-"
    if quantity == "memory":
        return f"{v / GIB:.2f} GiB"
    if quantity == "time":
        return f"{duration(v)} per step"
    if quantity == "tokens":
        return tokens_per_second(v)
    if quantity == "cost":
        return usd(v)
    return f"{v:.4g}"


def report_table(report: Report, *, explain: bool = False, tty: Optional[bool] = None) -> str:
    """The human-readable report: model, layout, memory breakdown and verdict, then time,
    throughput and cost when present (tables through :mod:`fmest.output.render`: rich when ``tty``,
    default when stdout is a terminal)."""
    ctx, job = report.context, report.job
    lines: list[str] = []
    counts = ctx.model.param_counts()
    tr = trainable_params(ctx.model, job.training)
    lay = ctx.layout
    lines.append(f"model    {ctx.model.name}  ({counts.total / 1e9:.2f} B params"
                 + (f", {counts.active / 1e9:.2f} B active" if ctx.model.is_moe else "")
                 + f", {tr / 1e6:,.1f} M trainable)")
    if job.mode == "inference":
        inf = job.inference
        weights = inf.quantization if inf.quantization != "none" else job.training.dtype
        lines.append(f"job      inference ({inf.runtime}), weights {weights}, KV cache "
                     f"{inf.kv_dtype}, batch {inf.batch} x context {inf.context} "
                     f"({inf.output_tokens} generated)")
    else:
        lines.append(f"job      {job.training.technique}, {job.training.dtype}, seq "
                     f"{job.training.seq_len}, micro-batch {job.training.micro_batch_size} x "
                     f"accum {job.training.grad_accum_steps}, optimizer {ctx.optimizer.name}, "
                     f"checkpointing {job.training.activation_checkpointing}, "
                     f"attention {job.training.attention}")
        if job.training.objective != "lm":
            lines.append(_objective_line(job.training))
        if job.options.explain and job.training.technique in ("lora", "qlora"):
            tr = job.training
            lines.append(f"lora     rank {tr.lora_rank}, alpha {tr.lora_alpha:g}, target modules "
                         f"{', '.join(tr.lora_target_modules)} (peft target_modules; PEFT's "
                         "per-model-type default when not given)")
    from fmest.job import expert_tp_of

    etp = expert_tp_of(lay)
    lines.append(f"layout   {lay.world_size} x {ctx.gpu.name} ({lay.nodes} node(s) x "
                 f"{lay.gpus_per_node}); dp {lay.dp} tp {lay.tp} pp {lay.pp} cp {lay.cp} "
                 f"ep {lay.ep}" + (f" expert-tp {etp}" if etp != lay.tp else "")
                 + f"; sharding {ctx.sharding.name}" + _network_text(job, ctx))
    weights_only = ctx.model.model_type == "weights_only"   # --params N
    m = report.memory
    if m is not None:
        lines.append("")
        lines.append(f"Per-GPU peak memory ({m.provenance.basis}, {m.provenance.plugin}; "
                     f"peak in {m.phase or '?'})")
        rows = [(name, _fmt_gib(b))
                for name, b in sorted(m.components.items(), key=lambda kv: -kv[1]) if b != 0]
        rows += [("total", _fmt_gib(m.total_bytes)),
                 ("GPU memory", _fmt_gib(ctx.gpu.memory_bytes))]
        lines.append(_Block(_table([Column(name="component"), Column(name="GiB", align="right")],
                                   rows, indent="  ", tty=tty)))
        counters = memory_counters(m)
        lines.append(f"  as measured: {counters['allocated_bytes'] / GIB:.2f} GiB allocated "
                     f"(max_memory_allocated), {counters['reserved_bytes'] / GIB:.2f} GiB "
                     f"reserved (max_memory_reserved), {counters['device_bytes'] / GIB:.2f} GiB "
                     "on the device (nvidia-smi)")
        log = _stack_log(report, m)
        if log is not None:
            lines.append(f"  {log['stack']}'s own log would print {log['value']:.2f} "
                         f"{log['unit']} ({log['counter']} / "
                         f"{'10^9' if log['unit'] == 'GB' else '2^30'} bytes)")
        verdict = verdict_text(report.fits, _confidence(report)["fits_probability"])
        kept_free = ctx.gpu.capacity_bytes - report.headroom_bytes - m.total_bytes
        margin = f" keeping {kept_free / GIB:.2f} GiB free" if kept_free > (1 << 20) else ""
        level = report.max_micro_batch_confidence
        at = f" (P(fit) >= {level * 100:g} %)" if level is not None and \
            m.provenance.interval is not None else ""
        largest = (f"; largest micro-batch that fits{at}: {report.max_micro_batch}"
                   if report.max_micro_batch is not None else "")
        if weights_only:   # --params N: the verdict is about weights and states alone
            margin += " (weights, gradients and optimizer states only: activations not modelled)"
            largest = "; largest micro-batch: not estimated (no dimensions)"
        lines.append(f"  verdict: {verdict}{margin}, headroom "
                     f"{report.headroom_bytes / GIB:+.2f} GiB{largest}")
        fewest = _min_gpus(report)
        if report.min_gpus is not None:
            lines.append(f"  fewest GPUs that fit: {fewest['min_gpus'] or 'none'} "
                         f"({fewest['min_gpus_reason']})")
        advice = getattr(report, "to_make_it_fit", None)
        if advice:
            lines.append("  to make it fit (settings first, then hardware, then what is "
                         "trained; least slowdown first):")
            lines.extend(_advice_line(i, item, lay.world_size)
                         for i, item in enumerate(advice, 1))
        elif advice == [] and _fails_at_confidence(report):
            lines.append("  to make it fit: no single change found")
        if m.host_bytes is not None:
            lines.append(f"  host RAM per node  {_fmt_gib(m.host_bytes)} GiB")
        if m.provenance.interval:
            lo, hi = m.provenance.interval
            conf = _confidence(report)
            lines.append(f"  interval: {lo / GIB:.2f} - {hi / GIB:.2f} GiB (P10-P90); fits "
                         f"with probability {conf['fits_probability']:.0%}, P90 headroom "
                         f"{conf['headroom_p90_bytes'] / GIB:+.2f} GiB")
    t = report.time
    if t is None and weights_only and job.mode == "training":
        lines.append("")
        lines.append("Step time, throughput and cost: not estimated (a weights-only model "
                     "has no FLOPs to time: give --hidden-size ... or a config)")
    if t is not None:
        lines.append("")
        lines.append(f"Step time ({t.provenance.basis}, {t.provenance.plugin})")
        time_rows = [(name, _fmt_seconds(s), "") for name, s in t.breakdown.items()]
        time_rows.append(("step", _fmt_seconds(t.step_seconds), ""))
        if t.provenance.interval:
            time_rows.append(("P10-P90", f"{_fmt_seconds(t.provenance.interval[0])} - "
                              f"{_fmt_seconds(t.provenance.interval[1])}", "interval"))
        if t.mfu is not None:
            time_rows.append(("MFU", f"{t.mfu * 100:.1f} %", ""))
        if t.total_seconds is not None:
            steps = f"{t.total_steps:,.0f} steps" if t.total_steps is not None else ""
            label = "1M tokens" if job.mode == "inference" else "total run"
            time_rows.append((label, _fmt_seconds(t.total_seconds), steps))
        lines.append(_Block(_table([Column(name="part"), Column(name="time", align="right"),
                                    Column(name="")], time_rows, indent="  ", tty=tty)))
    k = report.tokens
    if k is not None:
        lines.append("")
        lines.append(f"Throughput: {k.tokens_per_second:,.0f} tokens/s "
                     f"({k.tokens_per_second_per_gpu:,.0f} tokens/s per GPU)")
    summary = inference_summary(report)
    if summary is not None:
        lines.append("")
        lines.extend(inference_lines(summary))
    c = report.cost
    if c is not None:
        lines.append("")
        total = f"${c.usd:,.2f}" if c.usd is not None else "- (no workload given)"
        if summary is not None and c.usd is not None:
            total += " per million generated tokens"
        stale = " [STALE PRICE]" if c.stale else ""
        lines.append(f"Cost: {total} at ${c.usd_per_hour:,.2f}/h; {c.instances} x {c.instance} "
                     f"({c.provider}, {c.region or 'any region'}, {c.price_type}, price of "
                     f"{c.price_observed}){stale}")
    if report.warnings:
        lines.append("")
        lines.extend(f"warning: {w}" for w in report.warnings)
    if explain:
        stack = getattr(getattr(report.context, "transforms", None), "stack", None)
        if stack is not None:   # issue 12: which stack and why, what it fused and overlapped
            lines.append("")
            lines.append(f"Training stack: {stack.summary()}")
            origin = (report.input.origins.get("training.stack")
                      if getattr(report, "input", None) is not None else None)
            if origin:   # e.g. "llama3_8b.toml: (torchtitan TOML job config)"
                lines.append(f"  stack set by {origin}")
            if report.time is not None:
                lines.extend(f"  {note}" for note in report.time.notes
                             if note.startswith(stack.name))
        lines.append("")
        lines.append("How each answer was chosen:")
        for q, d in report.decisions.items():
            lines.append(f"  {q}: {d.rule}")
            for c in d.candidates:
                vs = _explain_value(q, _candidate_value(q, c))
                lines.append(f"    - {c.provenance.plugin} ({c.provenance.basis}): {vs}"
                             + (f"  [{c.provenance.detail}]" if c.provenance.detail else ""))
            for f in d.failures:
                lines.append(f"    - {f.plugin}: FAILED {f.error}")
    return _finish(lines, tty)


def _finish(lines: list[str], tty: Optional[bool]) -> str:
    """Prose wrapped to the width at word boundaries (tables are laid out already), then the
    verdict green or red on a colour terminal."""
    width = output_width(tty)
    text = "\n".join(ln if isinstance(ln, _Block) else wrap(ln, width=width) for ln in lines)
    colours = {"FITS": "green", "LIKELY FITS": "green", "UNCERTAIN": "yellow"}
    return re.sub(r"(?<=verdict: )(DOES\s+NOT\s+FIT|LIKELY\s+OOM|LIKELY\s+FITS|UNCERTAIN|FITS)",
                  lambda m: paint(m.group(1), colours.get(" ".join(m.group(1).split()), "red"),
                                  tty=tty), text, count=1)


def _objective_line(training) -> str:
    """What a preference objective runs per step (fmest.objectives)."""
    from fmest.objectives import no_grad_calls, reference_of, sequences_per_sample

    ref = reference_of(training)
    seqs = sequences_per_sample(training.objective)
    calls = no_grad_calls(training)
    what = {"copy": "a frozen copy of the model", "adapter": "the policy with its adapters "
            "disabled", "precomputed": "log-probs computed before training", "none": "none"}[ref]
    return (f"step     {training.objective}: {seqs} sequence(s) per sample with gradients"
            + (f", {sum(calls)} more per sample without ({len(calls)} no-grad pass(es))"
               if calls else "")
            + (f"; reference model: {what}" if training.objective in ("dpo", "kto") else ""))
