"""The pictures of ``--plot FILE`` (optional extra ``fmest[plot]``): one plotting path for
``fmest estimate`` (:func:`write_plot`) and ``fmest plan`` (:func:`write_plan_plot`), sharing the
file-name check (:func:`plot_format`), the units (:mod:`fmest.output.units`) and the writer.

``fmest estimate``: left, the per-GPU peak as a stacked bar of its memory components against
the GPU's capacity; right, the peak of each phase of the step (forward, backward, optimizer)
against the same capacity. The title carries the verdict and the largest micro-batch that fits;
the footer the step time, tokens/s and cost.

``fmest plan``: the cost of each plan against its time (total hours and USD with a dataset size;
step seconds and $/hour without one), one colour per GPU type, the Pareto front of the plotted
plans as a line with markers, and a figure that says why when there is nothing to plot.

The format follows the file name: ``.png``, ``.svg`` or ``.pdf``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fmest.errors import InputError
from fmest.output.units import duration

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


def check_plot_path(path: str) -> str:
    """The image format of ``path`` (:func:`plot_format`), once its folder is shown to take a
    new file: both checks come before any work (a search, a trace), so that a bad ``--plot``
    fails in a second, not after it. An :class:`InputError` naming ``--plot`` if not."""
    import os

    from fmest.atomic import check_writable_dir

    fmt = plot_format(path)
    if os.path.isdir(path):
        raise InputError("--plot", "names a folder, not a file", value=path,
                         accepted=[f".{f}" for f in FORMATS])
    check_writable_dir(os.path.dirname(os.path.abspath(path)), field="--plot", value=path)
    return fmt


def _require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError("--plot", "needs matplotlib: pip install 'fmest[plot]'") from None


def _save(fig, path: str, fmt: str) -> None:
    """Write ``fig`` to ``path``, making its missing folders (as :func:`check_plot_path`
    proved it may)."""
    try:
        Path(path).absolute().parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format=fmt, dpi=110)
    except OSError as exc:
        raise InputError("--plot", f"cannot write: {exc.strerror}", value=path) from None


def _tex(text: str) -> str:
    """``text`` as matplotlib draws it literally (a ``$`` would start its mathtext)."""
    return text.replace("$", r"\$")


def _footer(data: dict[str, Any]) -> str:
    parts = []
    if data.get("time"):
        parts.append(f"step {duration(data['time']['step_seconds'])}")
        if data["time"].get("total_seconds") is not None:
            parts.append(f"whole run {duration(data['time']['total_seconds'])}")
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
    return _tex("   ·   ".join(parts))


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
    _require_matplotlib()
    jobs = _job_objects(report)
    target = Path(path)
    paths = [str(target) if len(jobs) == 1 else
             str(target.with_name(f"{target.stem}-{i}{target.suffix}"))
             for i in range(1, len(jobs) + 1)]
    for data, out in zip(jobs, paths, strict=True):
        _save(figure(data), out, fmt)
    return paths


# ---------------------------------------------------------------------------------------------
# fmest plan --plot
# ---------------------------------------------------------------------------------------------

#: One colour per GPU type of a plan plot, in the order of the GPU names (sorted).
GPU_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
               "#ff9da7", "#9c755f", "#bab0ac")
#: The edge of a point whose price quote is stale (the capacity line's red).
STALE_EDGE = "#b3261e"
#: Rejection reasons the empty plan plot lists (the largest counts).
PLAN_REASONS = 4


def plan_axes(data: dict[str, Any]) -> dict[str, Any]:
    """What a plan plot draws of ``data`` (a ``fmest plan --format json`` object): the axes
    (``whole_run``: total hours and USD when a plan has a whole-run time, else step seconds and
    $/hour), the points (rank, gpu, x, y, stale), the ranks left out for want of a price, and
    the ranks of the Pareto front of the points (least x, then y, first)."""
    plans = data.get("plans") or []
    whole = any(p.get("total_seconds") is not None for p in plans)
    points, unpriced = [], []
    for p in plans:
        x = p.get("total_hours") if whole else p.get("step_seconds")
        y = p.get("usd") if whole else p.get("usd_per_hour")
        if x is None or y is None:
            unpriced.append(p["rank"])
            continue
        points.append({"rank": p["rank"], "gpu": p["gpu"], "x": float(x), "y": float(y),
                       "stale": bool(p.get("price_stale"))})
    front, best = [], float("inf")
    for pt in sorted(points, key=lambda q: (q["x"], q["y"])):
        if pt["y"] < best:
            front.append(pt["rank"])
            best = pt["y"]
    return {"whole_run": whole, "points": points, "unpriced": unpriced, "front": front,
            "xlabel": "total time (hours)" if whole else "step time (s)",
            "ylabel": "cost (USD)" if whole else "price (USD per hour)"}


def _gpus_searched(data: dict[str, Any]) -> str:
    gpus = list((data.get("constraints") or {}).get("gpus") or ())
    if gpus:
        return ", ".join(gpus)
    return "every priced GPU"


def plan_empty_reason(data: dict[str, Any], axes: dict[str, Any]) -> str | None:
    """The text an empty plan plot shows (``None`` when there are points to draw)."""
    if axes["points"]:
        return None
    if not data.get("plans"):
        rejected = sorted((data.get("rejected") or {}).items(), key=lambda kv: -kv[1])
        lines = ["no plan fits within the constraints"]
        if rejected:
            lines.append("main rejection reasons:")
            lines.extend(f"{reason}: {n:,}" for reason, n in rejected[:PLAN_REASONS])
        return "\n".join(lines)
    return (f"no plan has a price to plot ({len(axes['unpriced'])} plan(s) without one): "
            "see --providers and --price-type")


def plan_figure(data: dict[str, Any], *, model: str = ""):
    """A matplotlib figure of one ``fmest plan --format json`` object (``result_to_dict``):
    cost against time, one colour per GPU type, the Pareto front, each point's rank."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    axes = plan_axes(data)
    points = axes["points"]
    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.subplots()
    title = (f"{model or 'fmest plan'}: plans on {_gpus_searched(data)}; "
             f"objective {data.get('objective', '?')}")
    fig.suptitle(_tex(title), fontsize=11)
    notes = []
    if not axes["whole_run"] and data.get("plans"):
        notes.append("no dataset size: plotting step time and $/hour "
                     "(--dataset-tokens, --num-samples or --max-steps for the whole run)")
    empty = plan_empty_reason(data, axes)
    if empty is not None:
        ax.set_axis_off()
        ax.text(0.5, 0.5, _tex(empty), ha="center", va="center", fontsize=10,
                color="#b3261e", wrap=True, transform=ax.transAxes)
    else:
        gpus = sorted({pt["gpu"] for pt in points})
        colour = {g: GPU_COLOURS[i % len(GPU_COLOURS)] for i, g in enumerate(gpus)}
        for g in gpus:
            mine = [pt for pt in points if pt["gpu"] == g]
            ax.scatter([pt["x"] for pt in mine], [pt["y"] for pt in mine], s=46, zorder=3,
                       color=colour[g], label=g,
                       edgecolors=[STALE_EDGE if pt["stale"] else "white" for pt in mine],
                       linewidths=[2.0 if pt["stale"] else 0.6 for pt in mine])
        by_rank = {pt["rank"]: pt for pt in points}
        front = [by_rank[r] for r in axes["front"]]
        ax.plot([pt["x"] for pt in front], [pt["y"] for pt in front], color="#1f1f1f",
                linewidth=1.3, marker="D", markersize=9, markerfacecolor="none", zorder=2,
                label="Pareto front")
        for pt in points:
            ax.annotate(str(pt["rank"]), (pt["x"], pt["y"]), textcoords="offset points",
                        xytext=(5, 4), fontsize=7, color="#5b6475")
        handles, labels = ax.get_legend_handles_labels()
        if any(pt["stale"] for pt in points):
            handles.append(Line2D([], [], linestyle="none", marker="o", markersize=7,
                                  markerfacecolor="white", markeredgecolor=STALE_EDGE,
                                  markeredgewidth=2.0))
            labels.append("stale price")
        ax.legend(handles, labels, title="GPU type", fontsize=8, title_fontsize=8,
                  loc="best", frameon=False)
        ax.set_xlabel(axes["xlabel"])
        ax.set_ylabel(_tex(axes["ylabel"]))
        ax.grid(True, color="#e6e8ec", linewidth=0.6)
        ax.margins(0.12)
        if axes["unpriced"]:
            notes.append(f"{len(axes['unpriced'])} plan(s) without a price not drawn")
        n_stale = sum(pt["stale"] for pt in points)
        if n_stale:
            notes.append(f"{n_stale} plan(s) priced from a STALE quote (fmest prices)")
    if notes:
        fig.supxlabel(_tex("\n".join(notes)), fontsize=8, color="#5b6475")
    return fig


def write_plan_plot(data: dict[str, Any], path: str, *, model: str = "") -> str:
    """Draw ``data`` (a ``fmest plan --format json`` object) to ``path``; returns ``path``."""
    fmt = plot_format(path)
    _require_matplotlib()
    _save(plan_figure(data, model=model), path, fmt)
    return path
