"""Derive the caching-allocator reserve table from traces of the real code (fmest issue 21).

Each row: one fake-tensor trace (2 training steps of the transformers model on CPU, the
torch_runner tracer) whose allocation events are replayed through :mod:`fmest.allocator`
(the rules of PyTorch's c10/cuda/CUDACachingAllocator.cpp) with the default allocator
settings and with ``expandable_segments:True``. Written to core/fmest/data/allocator_reserve.json
with the setting, both peaks, their ratio, the command, the torch/transformers versions and
the allocator source commit; ``fmest.physics.device_terms`` reads the median ratio from it.

    python scripts/derive_allocator_reserve.py            # the whole grid (~10-20 min, 2 CPUs)
    python scripts/derive_allocator_reserve.py --only qwen2.5-0.5b --out /tmp/x.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "core" / "fmest" / "data" / "allocator_reserve.json"
ALLOCATOR_SOURCE = ("pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp @ "
                    "eb42ad6eca0ce61e7c581212b4bf32f991425571")

#: (preset, technique, micro batch, seq len, activation checkpointing); bf16 weights, AdamW
GRID: list[tuple[str, str, int, int, str]] = [
    ("qwen2.5-0.5b", "full", 1, 512, "none"),
    ("qwen2.5-0.5b", "full", 4, 1024, "none"),
    ("qwen2.5-0.5b", "full", 4, 1024, "full"),
    ("qwen2.5-0.5b", "lora", 2, 1024, "none"),
    ("smollm2-360m", "full", 8, 512, "none"),
    ("smollm2-1.7b", "full", 2, 1024, "none"),
    ("smollm2-1.7b", "lora", 4, 2048, "full"),
    ("llama-3.2-1b", "full", 2, 2048, "none"),
    ("llama-3.2-1b", "full", 2, 2048, "full"),
    ("llama-3.2-3b", "lora", 1, 2048, "none"),
    ("llama-3.2-3b", "full", 1, 1024, "full"),
    ("qwen2.5-7b", "lora", 1, 1024, "none"),
    ("llama-3.1-8b", "full", 1, 1024, "full"),
    ("llama-3.1-8b", "lora", 2, 2048, "full"),
]


def trace_events(job_dict: dict[str, Any]) -> tuple[list[tuple], int, float, Any]:
    """(allocation events, tracker peak bytes, trace seconds, run spec) of one fake trace."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    import fmest
    from fmest.convert import job_from_dict
    from fmest.transforms import transforms_of
    from fmest_torch_runner.fake_trace import patched_mask_helper
    from fmest_torch_runner.model_builder import build_model
    from fmest_torch_runner.runner import run_spec_from_job
    from fmest_torch_runner.steps import train_steps
    from fmest_torch_runner.tracker import StorageTracker

    engine = fmest._engine(None)  # type: ignore[attr-defined]
    job = job_from_dict(job_dict)
    ctx = engine.context(job)
    spec = run_spec_from_job(job, ctx.model, optimizer_name=ctx.optimizer.name, device="fake",
                             sharding=ctx.sharding, fsdp_world_size=1,
                             precision=transforms_of(job, ctx).precision)
    t0 = time.perf_counter()
    with patched_mask_helper():
        fake_mode = FakeTensorMode()
        model = build_model(spec, "fake", fake_mode)
        with fake_mode:
            tracker = StorageTracker(round_bytes=512)
            with tracker:
                train_steps(model, spec, "fake", tracker)
    return list(tracker.events), tracker.overall.total, time.perf_counter() - t0, spec


def row_for(preset: str, technique: str, batch: int, seq: int, ac: str) -> list[dict]:
    from fmest.allocator import AllocatorConfig, replay

    job = {"model": preset, "training": {"dtype": "bf16", "technique": technique,
                                          "micro_batch_size": batch, "seq_len": seq,
                                          "activation_checkpointing": ac}}
    events, tracker_peak, secs, spec = trace_events(job)
    rows = []
    for conf in ("", "expandable_segments:True"):
        t0 = time.perf_counter()
        res = replay(events, AllocatorConfig.parse(conf))
        replay_s = time.perf_counter() - t0
        rows.append({
            "model": preset, "technique": technique, "micro_batch_size": batch, "seq_len": seq,
            "activation_checkpointing": ac, "precision": spec.precision,
            "alloc_conf": conf or "default",
            "events": len(events),
            "max_memory_allocated": res.max_memory_allocated,
            "tracker_peak_bytes": tracker_peak,
            "max_memory_reserved": res.max_memory_reserved,
            "ratio": round(res.reserve_ratio, 5),
            # over the tensor peak (storages rounded to 512 B: what the traced and analytic
            # answers call allocated); torch's allocated_bytes also counts unsplit remainders
            "reserved_over_tensor_peak": round(res.max_memory_reserved / tracker_peak, 5),
            "reserve_bytes": res.max_memory_reserved - res.max_memory_allocated,
            "trace_seconds": round(secs, 1), "replay_seconds": round(replay_s, 2),
            "command": (f"python scripts/derive_allocator_reserve.py --only {preset} "
                        f"--technique {technique} --batch {batch} --seq {seq} --ac {ac}"),
        })
        print(f"{preset:14s} {technique:4s} b{batch} s{seq} ac={ac:4s} "
              f"{conf or 'default':25s} alloc {res.max_memory_allocated / 2**30:7.2f} GiB "
              f"reserved {res.max_memory_reserved / 2**30:7.2f} GiB ratio "
              f"{res.reserve_ratio:.4f} ({len(events)} events, trace {secs:.0f} s, replay "
              f"{replay_s:.2f} s)", flush=True)
    return rows


def theil_sen(rows: list[dict]) -> tuple[float, float]:
    """(intercept bytes, slope) of reserve bytes over the tensor peak: the median of pairwise
    slopes, then the median intercept (robust to the few fragmentation-heavy rows)."""
    pts = [(r["tracker_peak_bytes"], r["max_memory_reserved"] - r["tracker_peak_bytes"])
           for r in rows]
    slopes = [(y2 - y1) / (x2 - x1) for (x1, y1), (x2, y2) in itertools.combinations(pts, 2)
              if x2 != x1]
    slope = statistics.median(slopes) if slopes else 0.0
    # a negative slope has no physical reading (the allocator cannot hold less reserve for a
    # larger tensor peak): the rule is then the median reserve, a constant
    slope = max(0.0, slope)
    return statistics.median([y - slope * x for x, y in pts]), slope


def loo_error(rows: list[dict], rule: str) -> tuple[float, float]:
    """Median and max |predicted / replayed reserved - 1| leaving each row out of the fit."""
    errs = []
    for i, r in enumerate(rows):
        rest = rows[:i] + rows[i + 1:]
        a = r["tracker_peak_bytes"]
        if rule == "fraction":
            pred = a * statistics.median([x["reserved_over_tensor_peak"] for x in rest])
        else:
            c, f = theil_sen(rest)
            pred = a * (1 + f) + c
        errs.append(abs(pred / r["max_memory_reserved"] - 1))
    return round(statistics.median(errs), 4), round(max(errs), 4)


def summarize(rows: list[dict]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for conf, name in (("default", "rule"), ("expandable_segments:True", "rule_expandable")):
        picked = [r for r in rows if r["alloc_conf"] == conf]
        if len(picked) > 2:
            c, f = theil_sen(picked)
            out[name] = {
                "what": f"reserve = constant + fraction x tensor peak, Theil-Sen over the {conf} "
                        "rows; chosen over a pure fraction by the leave-one-out error below",
                "constant_bytes": int(round(c)), "fraction": round(f, 5),
                "loo_constant_plus_fraction": loo_error(picked, "constant+fraction"),
                "loo_fraction_only": loo_error(picked, "fraction")}
    for conf in ("default", "expandable_segments:True"):
        ratios = [r["reserved_over_tensor_peak"] for r in rows if r["alloc_conf"] == conf]
        if ratios:
            out[conf] = {"median_ratio": round(statistics.median(ratios), 5),
                         "min_ratio": min(ratios), "max_ratio": max(ratios), "rows": len(ratios)}
    return out


def main(argv: list[str] | None = None) -> int:
    from importlib.metadata import version

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="one preset (with --technique/--batch/--seq/--ac)")
    ap.add_argument("--technique", default="full")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--ac", default="none")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--summarize", action="store_true",
                    help="recompute the summary of the existing table's rows (no tracing)")
    args = ap.parse_args(argv)
    if args.summarize:
        table = json.loads(args.out.read_text(encoding="utf-8"))
        table["summary"] = summarize(table["rows"])
        args.out.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
        print(json.dumps(table["summary"], indent=1))
        return 0
    grid = ([(args.only, args.technique, args.batch, args.seq, args.ac)] if args.only
            else GRID)
    rows: list[dict] = []
    for setting in grid:
        try:
            rows.extend(row_for(*setting))
        except Exception as exc:  # a row that cannot be traced is reported, not invented
            print(f"{setting}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    table = {
        "description": "Caching-allocator reserve derived from fake-tensor traces of the real "
                       "training code replayed through fmest.allocator (docs/allocator.md). "
                       "ratio = max_memory_reserved / max_memory_allocated of the replay; "
                       "reserved_over_tensor_peak = max_memory_reserved / the trace's tensor "
                       "peak (the summary's statistic).",
        "generated": time.strftime("%Y-%m-%d"),
        "command": "python scripts/derive_allocator_reserve.py",
        "torch": version("torch"), "transformers": version("transformers"),
        "peft": version("peft"),
        "allocator_source": ALLOCATOR_SOURCE,
        "summary": summarize(rows),
        "rows": rows,
    }
    args.out.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(table["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
