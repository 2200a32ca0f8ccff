"""``fmest estimate --plot FILE``: a picture of one estimate (optional extra ``fmest[plot]``).

Left: the per-GPU peak as a stacked bar of its memory components against the GPU's capacity.
Right: the peak of each phase of the step (forward, backward, optimizer) against the same
capacity. The title carries the verdict and the largest micro-batch that fits; the footer the
step time, tokens/s and cost. The format follows the file name: ``.png``, ``.svg`` or ``.pdf``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fmest.errors import InputError

GIB = 1024**3
FORMATS = ("png", "svg", "pdf")

#: One colour per memory component (names of :data:`fmest.estimates.MEMORY_COMPONENTS`; the
#: traced plugin's names share the colour of their analytic counterpart). The same colours
#: as the page (``fmest/serve/static/app.js``).
COLOURS = {"weights": "#4e79a7", "params": "#4e79a7", "master_weights": "#a0cbe8",
           "lora_adapters": "#8cd17d", "gradients": "#f28e2b", "grads": "#f28e2b",
           "optimizer_states": "#59a14f", "optimizer_state": "#59a14f",
           "optimizer_temporaries": "#b6992d", "temporaries": "#d37295",
           "activations": "#e15759", "logits_and_loss": "#ff9d9a",
           "framework_buffers": "#79706e", "cuda_context": "#bab0ac", "nccl_buffers": "#9d7660",
           "allocator_reserve": "#d4a6c8"}
EXTRA_COLOURS = ("#499894", "#86bcb6", "#f1ce63", "#ffbe7d", "#fabfd2", "#b07aa1")


def _colour(name: str, index: int) -> str:
    return COLOURS.get(name, EXTRA_COLOURS[index % len(EXTRA_COLOURS)])


def plot_format(path: str) -> str:
    """The image format a file name asks for; an unknown suffix is an InputError."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise InputError("--plot", "the file name must end in an image format", value=path,
                         accepted=[f".{f}" for f in FORMATS])
    return suffix


def _seconds(s: float | None) -> str:
    if s is None:
        return "-"
    for limit, div, unit in ((1, 1e-3, "ms"), (120, 1, "s"), (7200, 60, "min"),
                             (3 * 86400, 3600, "h")):
        if s < limit:
            return f"{s / div:.1f} {unit}" if unit != "s" else f"{s:.2f} s"
    return f"{s / 86400:.1f} days"


def _footer(data: dict[str, Any]) -> str:
    parts = []
    if data.get("time"):
        parts.append(f"step {_seconds(data['time']['step_seconds'])}")
        if data["time"].get("total_seconds") is not None:
            parts.append(f"whole run {_seconds(data['time']['total_seconds'])}")
    if data.get("tokens"):
        parts.append(f"{data['tokens']['tokens_per_second']:,.0f} tokens/s")
    cost = data.get("cost")
    if cost:
        usd = f"${cost['usd']:,.2f}" if cost.get("usd") is not None else "cost -"
        parts.append(f"{usd} at ${cost['usd_per_hour']:,.2f}/h ({cost['provider']})")
    layout = data.get("layout") or {}
    if layout:
        parts.append(f"{layout.get('world_size')} GPUs (dp {layout.get('dp')} tp "
                     f"{layout.get('tp')} pp {layout.get('pp')})")
    # a "$" would start matplotlib's mathtext
    return "   ·   ".join(parts).replace("$", r"\$")


def figure(data: dict[str, Any]):
    """A matplotlib figure of one ``--format json`` estimate object (``report_to_dict``)."""
    from matplotlib.figure import Figure

    memory = data.get("memory")
    if memory is None:
        raise InputError("--plot", "no memory estimate to draw (no plugin answered memory)")
    capacity = memory["gpu_memory_bytes"] / GIB
    components = [(k, v / GIB) for k, v in memory["components"].items() if v > 0]
    phases = list(memory.get("phase_peaks_bytes", {}).items())
    top = max([memory["total_bytes"] / GIB, capacity] + [v / GIB for _, v in phases]) * 1.08

    fig = Figure(figsize=(10, 4.8), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=(0.55, 1))
    bottom = 0.0
    for i, (name, gib) in enumerate(components):
        left.bar(0, gib, bottom=bottom, width=0.6, color=_colour(name, i), label=f"{name} "
                 f"{gib:.2f} GiB", edgecolor="white", linewidth=0.5)
        bottom += gib
    left.axhline(capacity, color="#b3261e", linestyle="--", linewidth=1.5)
    left.text(-0.48, capacity, f"{memory['gpu']} {capacity:.0f} GiB", color="#b3261e",
              va="bottom", ha="left", fontsize=8)
    left.set_xlim(-0.5, 0.5)
    left.set_xticks([0], [f"peak ({memory.get('phase') or '?'})"])
    left.set_ylim(0, top)
    left.set_ylabel("GiB per GPU")
    left.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7, frameon=False,
                reverse=True)
    left.set_title(f"{bottom:.2f} GiB of {capacity:.0f} GiB", fontsize=10)

    names = [p for p, _ in phases]
    values = [v / GIB for _, v in phases]
    bars = right.bar(names, values, color=["#5b6475" if p == memory.get("phase") else "#aeb5c2"
                                           for p in names])
    right.bar_label(bars, fmt="%.1f", fontsize=8)
    right.axhline(capacity, color="#b3261e", linestyle="--", linewidth=1.5)
    right.set_ylim(0, top)
    right.set_title("peak of each phase", fontsize=10)

    fits = memory.get("fits")
    verdict = "FITS" if fits else "DOES NOT FIT"
    fig.suptitle(f"{data['model']['name']} on {memory['gpu']}: {verdict}; largest micro-batch "
                 f"that fits: {memory.get('max_micro_batch')}", fontsize=11,
                 color="#1f7a3a" if fits else "#b3261e")
    footer = _footer(data)
    if footer:
        fig.supxlabel(footer, fontsize=8, color="#5b6475")
    return fig


def _job_objects(report) -> list[dict[str, Any]]:
    """The ``--format json`` object of each job of a report (or of its JSON object)."""
    if isinstance(report, dict):
        return list(report["jobs"]) if "jobs" in report else [report]
    from fmest.output.report import report_to_dict

    return [report_to_dict(r) for r in getattr(report, "all_reports", None) or [report]]


def write_plot(report, path: str) -> list[str]:
    """Draw ``report`` (a :class:`fmest.engine.Report` or its ``--format json`` object) to
    ``path``; a multi-job input gives one file per job (``out-1.png``, ``out-2.png``, ...).
    Returns the paths written."""
    fmt = plot_format(path)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError("--plot", "needs matplotlib: pip install 'fmest[plot]'") from None
    jobs = _job_objects(report)
    target = Path(path)
    paths = [str(target) if len(jobs) == 1 else
             str(target.with_name(f"{target.stem}-{i}{target.suffix}"))
             for i in range(1, len(jobs) + 1)]
    for data, out in zip(jobs, paths, strict=True):
        try:
            figure(data).savefig(out, format=fmt, dpi=110)
        except OSError as exc:
            raise InputError("--plot", f"cannot write: {exc.strerror}", value=out) from None
    return paths
