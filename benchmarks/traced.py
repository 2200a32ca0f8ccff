"""Traced vs theory vs published peak memory, and the traced estimate's wall time.

    python benchmarks/traced.py [--max-params-b 100] [--no-timing]

For every memory row of the development sources in benchmarks/data/measured.csv (rows
``dev-*``; ``--all`` for every memory row of the evidence set; mapped to a job by
``benchmarks/measured.py``): the traced estimate (fmest-torch-runner, method ``traced``), the
analytic estimate (method ``theory``) and the published figure, with relative errors. Rows
the runner cannot execute (fp8, compile, chunked loss, optimizer-in-backward, QLoRA ...) show
``-`` and why. Then: wall time of a cold traced estimate (empty trace cache, in-process, torch
already imported) for the Llama-2-7B and Llama-2-70B presets, its CPU seconds (what it
costs on an idle core), and of a warm (cached) one.
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
    v = float(row["measured_value"])
    return v * (1e9 if row["unit"].strip() == "GB" else GIB)


def _err(x, truth):
    return f"{(x - truth) / truth:+6.1%}" if x is not None else "     -"


def _gib(x):
    return f"{x / GIB:7.1f}" if x is not None else "      -"


def compare(max_params_b: float) -> None:
    import measured

    from fmest.convert import job_from_dict
    from fmest.engine import Engine

    engine = Engine()
    lines = []
    for row in measured.load_rows("memory"):
        if not ALL_ROWS and not row["id"].startswith("dev-"):
            continue
        jd, reason = measured.row_to_job(row)
        pub = _published_bytes(row)
        if jd is None:
            lines.append((row["id"], pub, None, None, None, f"not mappable: {reason}"))
            continue
        theory = traced = None
        note, secs = "", None
        try:
            job = job_from_dict({**jd, "options": {"method": "theory"}})
            ctx = engine.context(job)
            ch = engine.estimate_memory(job, ctx).chosen
            theory = ch.total_bytes if ch else None
            if ctx.model.param_counts().total > max_params_b * 1e9:
                note = f"trace skipped (> {max_params_b:g}B params; --max-params-b)"
            else:
                tjob = job.evolve(options={"method": "traced"})
                t0 = time.perf_counter()
                d = engine.estimate_memory(tjob, ctx)
                secs = time.perf_counter() - t0
                if d.chosen is not None and d.chosen.provenance.basis == "traced":
                    traced = d.chosen.total_bytes
                else:
                    from fmest_torch_runner.runner import Unsupported, run_spec_from_job

                    try:
                        run_spec_from_job(tjob, ctx.model, optimizer_name=ctx.optimizer.name,
                                          sharding=ctx.sharding,
                                          precision=ctx.transforms.precision)
                        note = "; ".join(f.error for f in d.failures)[:70] or "no traced answer"
                    except Unsupported as exc:
                        note = f"unsupported: {exc}"[:70]
        except Exception as exc:  # a benchmark row failing is a line of the table
            note = f"{type(exc).__name__}: {exc}"[:70]
        lines.append((row["id"], pub, traced, theory, secs, note))
    w = max(len(x[0]) for x in lines)
    print(f"{'row':<{w}}  {'pub GiB':>7}  {'traced':>7} {'err':>6}  {'theory':>7} {'err':>6}"
          f"  {'trace s':>7}  note")
    for rid, pub, tr, th, secs, note in lines:
        s = f"{secs:7.1f}" if secs is not None else "      -"
        print(f"{rid:<{w}}  {pub / GIB:7.1f}  {_gib(tr)} {_err(tr, pub)}  {_gib(th)} "
              f"{_err(th, pub)}  {s}  {note}")
    ok = [(tr - pub) / pub for _, pub, tr, _, _, _ in lines if tr is not None]
    okt = [(th - pub) / pub for _, pub, tr, th, _, _ in lines if tr is not None and th]
    if ok:
        print(f"\ntraced rows: {len(ok)}; mean |err| traced {sum(map(abs, ok)) / len(ok):.1%}, "
              f"theory on the same rows {sum(map(abs, okt)) / max(1, len(okt)):.1%}")


def timing() -> None:
    import torch  # noqa: F401  (import cost excluded from the timings)
    import transformers  # noqa: F401

    from fmest.convert import job_from_dict
    from fmest.engine import Engine

    engine = Engine()
    print(f"\n{'preset':<14} {'seq':>5} {'batch':>5}  {'cold s':>7}  {'cold cpu s':>10}  "
          f"{'warm s':>7}  {'GiB':>7}")
    for model in ("llama-2-7b", "llama-2-70b"):
        job = job_from_dict({"model": model, "training": {"seq_len": 4096, "dtype": "bf16",
                                                           "precision": "pure"},
                             "options": {"method": "traced"}})
        ctx = engine.context(job)
        t0, c0 = time.perf_counter(), time.process_time()
        est = engine.estimate_memory(job, ctx).chosen
        cold, cold_cpu = time.perf_counter() - t0, time.process_time() - c0
        t0 = time.perf_counter()
        engine.estimate_memory(job, ctx)
        warm = time.perf_counter() - t0
        print(f"{model:<14} {4096:>5} {1:>5}  {cold:7.1f}  {cold_cpu:10.1f}  {warm:7.3f}  "
              f"{est.total_bytes / GIB:7.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-params-b", type=float, default=100.0,
                    help="skip tracing models larger than this (billions of params)")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--all", action="store_true",
                    help="every memory row of the evidence set, not only the dev-* rows")
    ap.add_argument("--no-compare", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("FMEST_CACHE_DIR", tempfile.mkdtemp(prefix="fmest-traced-bench-"))
    if not args.no_compare:
        compare(args.max_params_b)
    if not args.no_timing:
        timing()
    return 0


if __name__ == "__main__":
    sys.exit(main())
