"""The inference (serving) summary of a report: the answers issue 14 names in one place.

``fmest estimate --mode inference`` prints, besides the usual memory/time/tokens/cost
sections, an ``inference`` block (JSON) and a few table lines: whether the configuration fits
(with the runtime's ``gpu_memory_utilization`` as the safety margin), the KV cache, the largest
batch at the job's context and the largest context at its batch, the time to the first token,
decode tokens/s, generated tokens/s with prefill, and the cost of a million generated tokens.
The numbers come from the memory and time answers' ``metrics`` (see
``fmest_memory_theory.inference`` and ``fmest_time_roofline.inference``).
"""

from __future__ import annotations

from typing import Any, Optional

GIB = float(1 << 30)


def inference_summary(report) -> Optional[dict[str, Any]]:
    """The ``inference`` block of a report in inference mode, else None."""
    job = report.job
    if getattr(job, "mode", "training") != "inference":
        return None
    memory, time, tokens, cost = report.memory, report.time, report.tokens, report.cost
    mem_metrics = dict(getattr(memory, "metrics", {}) or {}) if memory else {}
    time_metrics = dict(getattr(time, "metrics", {}) or {}) if time else {}
    out: dict[str, Any] = {
        "batch": job.inference.batch,
        # a VLM's context also holds its image tokens (memory.metrics.context_tokens)
        "context": int(mem_metrics.get("context_tokens", job.inference.context)),
        "output_tokens": job.inference.output_tokens, "runtime": job.inference.runtime,
        "fits": report.fits,
        "kv_cache_bytes": (memory.components.get("kv_cache") if memory else None),
        "max_batch": mem_metrics.get("max_batch"),
        "max_context": mem_metrics.get("max_context"),
        "usable_bytes": mem_metrics.get("usable_bytes"),
        "time_to_first_token_seconds": time_metrics.get("prefill_seconds"),
        "decode_step_seconds": time_metrics.get("decode_step_seconds"),
        "decode_tokens_per_second": time_metrics.get("decode_tokens_per_second"),
        "tokens_per_second": tokens.tokens_per_second if tokens else None,
        "usd_per_million_tokens": None,
    }
    if cost is not None and cost.usd is not None and time is not None and time.total_seconds:
        # the time answer's total_seconds is the time to generate a million tokens
        out["usd_per_million_tokens"] = cost.usd * 1e6 / time_metrics.get(
            "tokens_priced", 1e6)
    return out


def inference_lines(summary: dict[str, Any]) -> list[str]:
    """Table lines for people."""
    lines = ["inference:"]
    if summary.get("kv_cache_bytes") is not None:
        lines.append(f"  KV cache            {summary['kv_cache_bytes'] / GIB:8.2f} GiB "
                     f"({summary['batch']} x {summary['context']} tokens)")
    if summary.get("max_batch") is not None:
        lines.append(f"  largest batch       {summary['max_batch']:8d} at {summary['context']} "
                     f"tokens")
    if summary.get("max_context") is not None:
        lines.append(f"  largest context     {summary['max_context']:8d} tokens at batch "
                     f"{summary['batch']}")
    if summary.get("time_to_first_token_seconds") is not None:
        lines.append(f"  time to 1st token   {summary['time_to_first_token_seconds'] * 1e3:8.1f}"
                     f" ms")
    if summary.get("decode_tokens_per_second") is not None:
        lines.append(f"  decode              {summary['decode_tokens_per_second']:8.0f} tokens/s")
    if summary.get("tokens_per_second") is not None:
        lines.append(f"  with prefill        {summary['tokens_per_second']:8.0f} tokens/s")
    if summary.get("usd_per_million_tokens") is not None:
        lines.append(f"  cost                {summary['usd_per_million_tokens']:8.3f} USD per "
                     f"million generated tokens")
    return lines
