"""Traced vs theory vs published peak memory, and the traced estimate's wall time.

    python benchmarks/traced.py [--max-params-b 100] [--no-timing]

For every memory row of the development sources in benchmarks/data/measured.csv (rows
``dev-*``; ``--all`` for every memory row of the evidence set except the sealed sources of
``benchmarks/data/sealed_sources.json``, which this script never reads; mapped to a job by
``benchmarks/measured.py``): the layout class (:func:`layout_class`), the traced estimate (fmest-torch-runner, method ``traced``), the
analytic estimate (method ``theory``) and the published figure, with relative errors. Rows
the runner cannot execute (fp8, compile, chunked loss, optimizer-in-backward, QLoRA ...) show
``-`` and why. Then: wall time of a cold traced estimate (empty trace cache, in-process, torch
already imported) for Llama-2-7B LoRA (the hf-trainer stack), Qwen2.5-0.5B, and the
Llama-2-7B and Llama-2-70B full presets, its CPU seconds (what it costs on an idle core), and
of a warm (cached) one, with the decoder layers the trace ran (``1..4 of 32`` when
fmest_torch_runner.layer_replication replicated the rest, else ``all``). ``--only-rows A,B`` restricts the comparison to rows whose id starts
with one of the given prefixes.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

GIB = 1024 ** 3
ALL_ROWS = "--all" in sys.argv


def _published_bytes(row) -> float:
    """The published figure in bytes, per GPU, read as ``benchmarks/accuracy.py`` reads it
    (GB = GiB unless the row says decimal; ``memory_scope=sum`` rows divided by the GPUs)."""
    import accuracy
    import measured

    v = float(row["measured_value"]) * accuracy._memory_bytes_per_unit(row)
    if accuracy.MEMORY_SUM_SCOPE.search(row.get("other") or ""):
        v /= measured._int(row["num_gpus"], 1) or 1
    return v


def _comparable(est, row) -> float:
    """The part of an estimate the row's counter sees (``accuracy.comparable_bytes``:
    nvidia-smi = whole, max_memory_allocated/active = allocated, else reserved)."""
    import accuracy

    return accuracy.comparable_bytes(est, row["measure_type"])[0]


def _err(x, truth):
    return f"{(x - truth) / truth:+6.1%}" if x is not None else "     -"


def _gib(x):
    return f"{x / GIB:7.1f}" if x is not None else "      -"


def layout_class(job, ctx, est) -> str:
    """The row's layout as the traced plugin treats it: ``1 GPU``; ``DP replicas`` (data
    parallel, nothing sharded: per-GPU memory is one replica's); ``FSDP traced`` (FSDP2 run on a
    fake process group); ``<sharding> scaled`` (sharding divided, not run); ``TP/PP/CP/EP
    scaled`` (model parallelism divided, not run; with sharding named after ``+``)."""
    from fmest.transforms import transforms_of

    lay = ctx.layout
    if lay.world_size <= 1:
        return "1 GPU"
    plan = transforms_of(job, ctx).sharding
    sharded = plan.group_size > 1 and bool(ctx.sharding.shards)
    fsdp_traced = est is not None and "FSDP2 on a fake process group" in est.provenance.detail
    if est is None and sharded:
        from fmest_torch_runner.traced import fsdp_world_size

        fsdp_traced = fsdp_world_size(job, ctx) > 1
    shard = ""
    if sharded:
        shard = "FSDP traced" if fsdp_traced else f"{ctx.sharding.name} scaled"
    if lay.tp * lay.pp * lay.cp * lay.ep > 1:
        return "TP/PP/CP/EP scaled" + (f" + {shard}" if shard else "")
    return shard or "DP replicas"


def _sealed_sources() -> set[str]:
    import json

    path = Path(__file__).resolve().parent / "data" / "sealed_sources.json"
    return set(json.loads(path.read_text(encoding="utf-8"))["sources"])


def compare(max_params_b: float, only: tuple[str, ...] = ()) -> None:
    import measured

    from fmest.convert import job_from_dict
    from fmest.engine import Engine
    from fmest.transforms import transforms_of

    engine = Engine()
    sealed = _sealed_sources()
    lines: list[tuple] = []
    print(f"{'row':<48}  {'layout':<34}  {'pub GiB':>7}  {'traced':>7} {'err':>6}  "
          f"{'theory':>7} {'err':>6}  {'trace s':>7}  note")
    for row in measured.load_rows("memory"):
        if row["source"] in sealed:  # never read here (benchmarks/accuracy.py --sealed only)
            continue
        if not ALL_ROWS and not row["id"].startswith("dev-"):
            continue
        if (row.get("oom") or "").strip().lower() == "true" \
                or "boundary" in (row.get("other") or "").lower():
            continue  # fits/does-not-fit checks, not a published peak
        if only and not row["id"].startswith(only):
            continue
        jd, reason = measured.row_to_job(row)
        pub = _published_bytes(row)
        if jd is None:
            lines.append((row["id"], pub, None, None, None, f"not mappable: {reason}", "-"))
            _print_line(*lines[-1])
            continue
        theory = traced = None
        note, secs, layout = "", None, "-"
        try:
            job = job_from_dict({**jd, "options": {"method": "theory"}})
            ctx = engine.context(job)
            ch = engine.estimate_memory(job, ctx).chosen
            theory = _comparable(ch, row) if ch else None
            if ctx.model.param_counts().total > max_params_b * 1e9:
                note = f"trace skipped (> {max_params_b:g}B params; --max-params-b)"
            else:
                tjob = job.evolve(options={"method": "traced"})
                t0 = time.perf_counter()
                d = engine.estimate_memory(tjob, ctx)
                secs = time.perf_counter() - t0
                if d.chosen is not None and d.chosen.provenance.basis == "traced":
                    traced = _comparable(d.chosen, row)
                    layout = layout_class(job, ctx, d.chosen)
                else:
                    layout = layout_class(job, ctx, None)
                    from fmest_torch_runner.runner import Unsupported, run_spec_from_job

                    try:
                        run_spec_from_job(tjob, ctx.model, optimizer_name=ctx.optimizer.name,
                                          sharding=ctx.sharding,
                                          precision=transforms_of(job, ctx).precision)
                        note = "; ".join(f.error for f in d.failures)[:70] or "no traced answer"
                    except Unsupported as exc:
                        note = f"unsupported: {exc}"[:70]
        except Exception as exc:  # a benchmark row failing is a line of the table
            note = f"{type(exc).__name__}: {exc}"[:70]
        lines.append((row["id"], pub, traced, theory, secs, note, layout))
        _print_line(*lines[-1])
    if not lines:
        print("no rows")
        return
    summary([(layout, pub, tr, th) for _, pub, tr, th, _, _, layout in lines])


def _print_line(rid, pub, tr, th, secs, note, layout) -> None:
    """One row of the table, printed as soon as it is known (a long ``--all`` run shows its
    progress and keeps what it printed when stopped)."""
    s = f"{secs:7.1f}" if secs is not None else "      -"
    print(f"{rid:<48}  {layout:<34}  {pub / GIB:7.1f}  {_gib(tr)} {_err(tr, pub)}  "
          f"{_gib(th)} {_err(th, pub)}  {s}  {note}", flush=True)


def summary(rows: list[tuple]) -> None:
    """Per layout class, on the rows with a traced answer (and a theory one): rows, median and
    mean |error| of traced and of theory vs the published peak, and how many rows traced is
    closer."""
    from statistics import median

    both = [(lay, (tr - pub) / pub, (th - pub) / pub) for lay, pub, tr, th in rows
            if tr is not None and th]
    if not both:
        print("\nno row has both a traced and a theory answer")
        return
    print(f"\n{'layout':<34} {'rows':>4}  {'traced med|err|':>15} {'mean':>6}  "
          f"{'theory med|err|':>15} {'mean':>6}  traced closer")
    for lay in sorted({b[0] for b in both}) + ["all"]:
        sel = [b for b in both if lay in ("all", b[0])]
        tr = [abs(b[1]) for b in sel]
        th = [abs(b[2]) for b in sel]
        closer = sum(a < b for a, b in zip(tr, th, strict=True))
        print(f"{lay:<34} {len(sel):>4}  {median(tr):>15.1%} {sum(tr) / len(tr):>6.1%}  "
              f"{median(th):>15.1%} {sum(th) / len(th):>6.1%}  {closer}/{len(sel)}")


#: (label, model preset, training) of the timed cold/warm traced estimates
TIMING_CASES = (
    ("llama-2-7b lora", "llama-2-7b", {"seq_len": 4096, "technique": "lora",
                                       "stack": "hf-trainer"}),
    ("qwen2.5-0.5b", "qwen2.5-0.5b", {"seq_len": 2048, "micro_batch_size": 2}),
    ("llama-2-7b", "llama-2-7b", {"seq_len": 4096, "dtype": "bf16", "precision": "pure"}),
    ("llama-2-70b", "llama-2-70b", {"seq_len": 4096, "dtype": "bf16", "precision": "pure"}),
)


def timing() -> None:
    import torch  # noqa: F401  (import cost excluded from the timings)
    import transformers  # noqa: F401

    from fmest.convert import job_from_dict
    from fmest.engine import Engine

    engine = Engine()
    print(f"\n{'case':<18} {'seq':>5} {'batch':>5}  {'cold s':>7}  {'cold cpu s':>10}  "
          f"{'warm s':>7}  {'GiB':>7}  traced layers")
    for name, model, training in TIMING_CASES:
        job = job_from_dict({"model": model, "training": training,
                             "options": {"method": "traced"}})
        ctx = engine.context(job)
        t0, c0 = time.perf_counter(), time.process_time()
        est = engine.estimate_memory(job, ctx).chosen
        cold, cold_cpu = time.perf_counter() - t0, time.process_time() - c0
        t0 = time.perf_counter()
        engine.estimate_memory(job, ctx)
        warm = time.perf_counter() - t0
        # layer replication (fmest_torch_runner.layer_replication) traces a few layers only
        rep = [n for n in est.notes if n.startswith("layer replication:")]
        layers = rep[0].split("traced ", 1)[1].split(" identical", 1)[0] if rep else "all"
        print(f"{name:<18} {job.training.seq_len:>5} {job.training.micro_batch_size:>5}  "
              f"{cold:7.1f}  {cold_cpu:10.1f}  {warm:7.3f}  {est.total_bytes / GIB:7.1f}  "
              f"{layers}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-params-b", type=float, default=100.0,
                    help="skip tracing models larger than this (billions of params)")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--all", action="store_true",
                    help="every memory row of the evidence set, not only the dev-* rows")
    ap.add_argument("--no-compare", action="store_true")
    ap.add_argument("--only-rows", default="",
                    help="comma-separated row-id prefixes to compare (default: all selected)")
    args = ap.parse_args()
    os.environ.setdefault("FMEST_CACHE_DIR", tempfile.mkdtemp(prefix="fmest-traced-bench-"))
    if not args.no_compare:
        compare(args.max_params_b, tuple(p for p in args.only_rows.split(",") if p))
    if not args.no_timing:
        timing()
    return 0


if __name__ == "__main__":
    sys.exit(main())
