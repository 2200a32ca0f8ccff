"""Rendering a :class:`fmest.engine.Report`: a JSON-ready dict (a contract other tools read)
and an aligned table for people."""

from __future__ import annotations

from typing import Any

from fmest.serving import inference_lines, inference_summary
from fmest.convert import job_to_dict, unstructure
from fmest.counting import total_params, trainable_params
from fmest.engine import Report

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
    return out


def _candidate_value(quantity: str, est) -> float | None:
    return {"memory": lambda e: e.total_bytes, "time": lambda e: e.step_seconds,
            "tokens": lambda e: e.tokens_per_second, "cost": lambda e: e.usd}[quantity](est)


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
            "gpu": ctx.gpu.name,
            "gpu_memory_bytes": ctx.gpu.memory_bytes,
            "fits": report.fits,
            "headroom_bytes": report.headroom_bytes,
            "max_micro_batch": report.max_micro_batch,
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
                             "unresolved": list(inp.unresolved.values())}
    return out


def reports_to_dict(report: Report) -> dict[str, Any]:
    """The ``--format json`` object of an estimate: one job's object, or ``{"jobs": [...]}``
    (one object per job, in input order) when the input held several jobs."""
    reports = report.all_reports
    if len(reports) == 1:
        return report_to_dict(report)
    return {"jobs": [report_to_dict(r) for r in reports]}


def _fmt_bytes(n: float) -> str:
    return f"{n / GIB:10.2f} GiB"


def _fmt_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    if s < 120:
        return f"{s:.2f} s"
    if s < 2 * 3600:
        return f"{s / 60:.1f} min"
    if s < 3 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


def render_table(report: Report, *, explain: bool = False) -> str:
    """The human-readable report: model, layout, memory breakdown and verdict, then time,
    throughput and cost when present."""
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
    lines.append(f"layout   {lay.world_size} x {ctx.gpu.name} ({lay.nodes} node(s) x "
                 f"{lay.gpus_per_node}); dp {lay.dp} tp {lay.tp} pp {lay.pp} cp {lay.cp} "
                 f"ep {lay.ep}; sharding {ctx.sharding.name}")
    m = report.memory
    if m is not None:
        lines.append("")
        lines.append(f"Per-GPU peak memory ({m.provenance.basis}, {m.provenance.plugin}; "
                     f"peak in {m.phase or '?'})")
        width = max(len(k) for k in m.components) if m.components else 10
        for name, b in sorted(m.components.items(), key=lambda kv: -kv[1]):
            if b == 0:
                continue
            lines.append(f"  {name:<{width}}  {_fmt_bytes(b)}")
        lines.append(f"  {'-' * width}  {'-' * 14}")
        lines.append(f"  {'total':<{width}}  {_fmt_bytes(m.total_bytes)}")
        lines.append(f"  {'GPU memory':<{width}}  {_fmt_bytes(ctx.gpu.memory_bytes)}")
        verdict = "FITS" if report.fits else "DOES NOT FIT"
        kept_free = ctx.gpu.memory_bytes - report.headroom_bytes - m.total_bytes
        margin = f" keeping {kept_free / GIB:.2f} GiB free" if kept_free > (1 << 20) else ""
        largest = (f"; largest micro-batch that fits: {report.max_micro_batch}"
                   if report.max_micro_batch is not None else "")
        lines.append(f"  verdict: {verdict}{margin}, headroom "
                     f"{report.headroom_bytes / GIB:+.2f} GiB{largest}")
        if m.host_bytes is not None:
            lines.append(f"  host RAM per node  {_fmt_bytes(m.host_bytes)}")
        if m.provenance.interval:
            lo, hi = m.provenance.interval
            lines.append(f"  interval: {lo / GIB:.2f} - {hi / GIB:.2f} GiB")
    t = report.time
    if t is not None:
        lines.append("")
        lines.append(f"Step time ({t.provenance.basis}, {t.provenance.plugin})")
        width = max([len(k) for k in t.breakdown] + [10])
        for name, s in t.breakdown.items():
            lines.append(f"  {name:<{width}}  {_fmt_seconds(s):>12}")
        lines.append(f"  {'step':<{width}}  {_fmt_seconds(t.step_seconds):>12}")
        if t.mfu is not None:
            lines.append(f"  {'MFU':<{width}}  {t.mfu * 100:11.1f} %")
        if t.total_seconds is not None:
            steps = f"  ({t.total_steps:,.0f} steps)" if t.total_steps is not None else ""
            label = "1M tokens" if job.mode == "inference" else "total run"
            lines.append(f"  {label:<{width}}  {_fmt_seconds(t.total_seconds):>12}{steps}")
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
            if report.time is not None:
                lines.extend(f"  {note}" for note in report.time.notes
                             if note.startswith(stack.name))
        lines.append("")
        lines.append("How each answer was chosen:")
        for q, d in report.decisions.items():
            lines.append(f"  {q}: {d.rule}")
            for c in d.candidates:
                v = _candidate_value(q, c)
                if v is None:
                    vs = "-"
                else:
                    vs = f"{v / GIB:.2f} GiB" if q == "memory" else f"{v:.4g}"
                lines.append(f"    - {c.provenance.plugin} ({c.provenance.basis}): {vs}"
                             + (f"  [{c.provenance.detail}]" if c.provenance.detail else ""))
            for f in d.failures:
                lines.append(f"    - {f.plugin}: FAILED {f.error}")
    return "\n".join(lines)
