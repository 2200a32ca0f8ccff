"""The LLM/VLM GPU Memory Estimator's ``--probe`` on ``fmest estimate`` (MiaoDX/
llm_vlm_memory_estimator @61cdbab, llm_memory_estimator/cli.py): after the estimate, run the
job's training steps for real and print what they measured beside it.

Its flags map onto fmest's probe (:func:`fmest_torch_runner.probe.probe_one`, the one-job form
of ``fmest probe``): ``--probe true`` runs it unless ``--estimate-only true``;
``--probe-device cuda|cuda:N|cpu`` (and ``--probe-device-id N``) picks where (fmest adds
``fake``: a fake-tensor trace); ``--probe-warmup`` (``--warmup-steps``) and ``--probe-steps``
set the steps, timed after the warm-up (at least two steps run: optimizer states exist from
step 2). Its other flags are read by :mod:`fmest.flags` (``LLMEST_READERS``); the mapping of
each is in docs/compat.md.
"""

from __future__ import annotations

import argparse
from typing import Any, Optional, Sequence

from fmest.errors import InputError

#: the estimator's defaults (llm_memory_estimator/cli.py)
DEFAULT_STEPS, DEFAULT_WARMUP, DEFAULT_DEVICE = 6, 3, "cuda"
GIB = 1 << 30


def wants_probe(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "probe", None)) and not getattr(args, "estimate_only", None)


def probe_device(args: argparse.Namespace) -> tuple[str, Optional[int]]:
    """``(fmest probe device, CUDA index or None)`` from ``--probe-device`` /
    ``--probe-device-id``; an unknown device or a CUDA device this machine lacks is refused
    with the reason and what would work."""
    given = str(getattr(args, "probe_device", None) or DEFAULT_DEVICE).strip().lower()
    index = getattr(args, "probe_device_id", None)
    kind, _, suffix = given.partition(":")
    if kind not in ("cuda", "cpu", "fake"):
        raise InputError("--probe-device", "not a device fmest's probe runs on", value=given,
                         accepted=("cuda", "cuda:N", "cpu", "fake"))
    if suffix:
        if kind != "cuda" or not suffix.isdigit():
            raise InputError("--probe-device", "expected cuda:N with a GPU index", value=given)
        if index is not None and int(suffix) != index:
            raise InputError("--probe-device-id", f"disagrees with --probe-device {given}",
                             value=index)
        index = int(suffix)
    if kind != "cuda":
        return kind, None
    try:
        import torch
    except ImportError:
        raise InputError("--probe", "needs torch and fmest-torch-runner (pip install "
                         "torch==2.13.0 ./plugins/torch_runner)") from None
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise InputError("--probe-device", "no CUDA device on this machine "
                         "(torch.cuda.is_available() is False); run the steps on the CPU or as "
                         "a fake-tensor trace, or give --estimate-only true", value=given,
                         accepted=("cpu", "fake"))
    index = 0 if index is None else index
    if index >= count:
        raise InputError("--probe-device-id", f"this machine has {count} CUDA device(s)",
                         value=index, accepted=list(range(count)))
    return "cuda", index


def probe_jobs(args: argparse.Namespace, jobs: Sequence[Any]) -> list[dict]:
    """Run each job (a :class:`fmest.job.Job`) once on the probe device; one row per job with
    the measured allocated and reserved peaks (bytes), the timed step and the status."""
    device, index = probe_device(args)
    try:
        from fmest_torch_runner.probe import probe_one
    except ImportError:
        raise InputError("--probe", "needs the fmest-torch-runner plugin (pip install "
                         "torch==2.13.0 ./plugins/torch_runner)") from None
    from fmest.convert import job_to_dict

    if index is not None:
        import torch

        torch.cuda.set_device(index)
    steps = getattr(args, "probe_steps", None) or DEFAULT_STEPS
    warmup = getattr(args, "probe_warmup", None)
    warmup = DEFAULT_WARMUP if warmup is None else warmup
    rows = []
    for job in jobs:
        row = probe_one(job_to_dict(job), device, theory=False, steps=steps, warmup=warmup)
        rows.append({
            "device": device if index is None else f"cuda:{index}",
            "status": row.get("status"), "error": row.get("error") or None,
            "steps_run": row.get("steps_run"), "warmup_steps": warmup, "timed_steps": steps,
            # cuda: max_memory_allocated; cpu: allocator truth; fake: the tracker's peak
            "peak_allocated_bytes": row.get("measured_peak_bytes"),
            "peak_reserved_bytes": row.get("measured_reserved_bytes"),
            "peak_phase": row.get("peak_phase") or None,
            "step_seconds": row.get("measured_step_seconds")})
    return rows


def probe_text(rows: Sequence[dict]) -> str:
    """The table lines people read under the estimate."""

    def gib(v: Optional[float]) -> str:
        return "-" if v is None else f"{v / GIB:,.2f} GiB"

    out = []
    for r in rows:
        head = f"Measured (--probe on {r['device']}, {r['steps_run'] or 0} steps"
        head += f", {r['warmup_steps']} warm-up): "
        if r["status"] != "ok":
            out.append(head + f"{r['status']}: {r['error'] or '-'}")
            continue
        step = "-" if r["step_seconds"] is None else f"{r['step_seconds'] * 1e3:,.1f} ms"
        out.append(head + f"peak allocated {gib(r['peak_allocated_bytes'])}, reserved "
                   f"{gib(r['peak_reserved_bytes'])} ({r['peak_phase'] or '-'}), step {step}")
    return "\n".join(out)
