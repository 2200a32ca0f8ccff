"""Speed of the theory path, against the targets of the core's renovation (issue 27):

* one memory estimate in-process (``Engine.estimate_memory``), p50 <= 50 us;
* one full report in-process (memory, time, tokens, cost and the two searches a report shows:
  largest micro-batch and fewest GPUs, :func:`fmest.api.estimate_jobs`; for a job that does
  not fit, also what would make it fit, :mod:`fmest.fit_advice`), p50 <= 1 ms; beside it the
  report without that advice and without the fewest-GPU search, to show what each adds;
* ``fmest estimate`` on a preset, a fresh process, <= 0.3 s; ``fmest --help`` <= 0.15 s;
  ``python -c pass`` on the same machine is printed beside them for scale;
* estimates per second over a grid;
* the calibrated P10-P90 interval and P(fit) on one answer (``fmest.uncertainty.with_interval``
  on the memory and time answers, ``fmest.estimates.fits_probability``), p50 <= 20 us
  (issue 22).

Prints a table; asserts nothing (timings are measured, never tested).

Run: python benchmarks/speed.py [--repeats N]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import subprocess
import sys
import time

import attrs

import fmest
from fmest.api import estimate_jobs
from fmest.engine import Engine

JOBS = {
    "Llama-2-7B ZeRO-3 x8": {"model": "meta-llama/Llama-2-7b-hf",
                             "training": {"seq_len": 4096, "micro_batch_size": 4},
                             "parallelism": {"zero_stage": 3},
                             "hardware": {"gpu": "A100-80GB", "gpus_per_node": 8}},
    "Llama-3.1-70B QLoRA": {"model": "meta-llama/Llama-3.1-70B",
                            "training": {"technique": "qlora", "seq_len": 2048,
                                         "activation_checkpointing": "full"},
                            "hardware": {"gpu": "H100-SXM"}},
    "Mixtral-8x7B FSDP x16": {"model": "mistralai/Mixtral-8x7B-v0.1",
                              "parallelism": {"fsdp": "full_shard"},
                              "hardware": {"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 2}},
}
TARGETS = {"interval": 20e-6, "memory": 50e-6, "report": 1e-3, "report_no_min_gpus": 1e-3, "estimate_cli": 0.3,
           "help_cli": 0.15}
#: the searches of a report without the advice for a job that does not fit (the ``w/o advice``
#: column: what the fewest-GPU search adds is it minus ``w/o min_gpus``, what the advice adds
#: is ``full report`` minus it)
NO_ADVICE = ("max_micro_batch", "min_gpus")


def p50(fn, n: int) -> float:
    fn()  # warm caches (model resolution)
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def cold(argv: list[str], n: int) -> float:
    """Median wall time of ``argv`` in a fresh process."""
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _us(s: float) -> str:
    return f"{s * 1e6:9.1f} us" if s < 1e-3 else f"{s * 1e3:9.3f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=200, help="in-process samples per figure")
    ap.add_argument("--cold", type=int, default=7, help="fresh processes per CLI figure")
    args = ap.parse_args()
    engine = Engine()
    print(f"{'job':<24} {'memory estimate':>16} {'full report':>14} {'w/o advice':>14} "
          f"{'w/o min_gpus':>14}")
    worst = {"memory": 0.0, "report": 0.0, "report_no_min_gpus": 0.0}
    for name, data in JOBS.items():
        job = fmest.to_job(data)
        ctx = engine.context(job)
        mem = p50(lambda job=job, ctx=ctx: engine.estimate_memory(job, ctx), args.repeats)
        full = p50(lambda job=job: estimate_jobs([(job, None)], engine=engine),
                   args.repeats // 4)
        part = p50(lambda job=job: estimate_jobs([(job, None)], engine=engine,
                                                 searches=("max_micro_batch",)),
                   args.repeats // 4)
        no_advice = p50(lambda job=job: estimate_jobs([(job, None)], engine=engine,
                                                      searches=NO_ADVICE), args.repeats // 4)
        worst = {"memory": max(worst["memory"], mem), "report": max(worst["report"], full),
                 "report_no_min_gpus": max(worst["report_no_min_gpus"], part)}
        print(f"{name:<24} {_us(mem):>16} {_us(full):>14} {_us(no_advice):>14} "
              f"{_us(part):>14}")
    print("full report = memory + time + tokens + cost + largest micro-batch + fewest GPUs + "
          "what would make it fit (a job that does not fit);\nw/o advice: without the last; "
          "w/o min_gpus: memory + time + tokens + cost + largest micro-batch")

    base = fmest.to_job(JOBS["Llama-2-7B ZeRO-3 x8"])
    grid = list(itertools.product((1, 2, 4, 8), (1024, 2048, 4096, 8192), (0, 1, 2, 3),
                                  ("none", "full")))
    jobs = [base.evolve(training={"micro_batch_size": b, "seq_len": s,
                                  "activation_checkpointing": gc},
                        parallelism={"zero_stage": z}) for b, s, z, gc in grid]
    ctx = engine.context(base)
    t0 = time.perf_counter()
    for j in jobs:
        engine.estimate_memory(j, ctx)
    dt = time.perf_counter() - t0
    print(f"\ngrid: {len(jobs)} memory estimates in {dt * 1e3:.1f} ms = "
          f"{len(jobs) / dt:,.0f} estimates/s")

    # the interval and P(fit) one answer carries (the answers already made, as the engine adds
    # them after each estimate)
    from fmest.estimates import fits_probability
    from fmest.uncertainty import with_interval

    report = engine.estimate(base, quantities=("memory", "time"))
    bare_mem = attrs.evolve(report.memory, provenance=attrs.evolve(
        report.memory.provenance, interval=None))
    bare_time = attrs.evolve(report.time, provenance=attrs.evolve(
        report.time.provenance, interval=None))
    capacity = float(report.context.gpu.memory_bytes)

    def interval_and_fit():
        mem = with_interval("memory", base, bare_mem)
        with_interval("time", base, bare_time)
        fits_probability(mem.total_bytes, mem.provenance.interval, capacity)

    interval = p50(interval_and_fit, args.repeats)

    fmest_cli = [sys.executable, "-m", "fmest"]
    figures = {
        "estimate_cli": cold([*fmest_cli, "estimate", "--model", "meta-llama/Llama-2-7b-hf"],
                             args.cold),
        "help_cli": cold([*fmest_cli, "--help"], args.cold),
    }
    baseline = cold([sys.executable, "-c", "pass"], args.cold)
    print(f"\n{'figure (p50)':<42} {'measured':>12} {'target':>10}")
    rows = [("interval + P(fit) on one answer", interval, "interval"),
            ("memory estimate, slowest job", worst["memory"], "memory"),
            ("full report, slowest job", worst["report"], "report"),
            ("full report without min_gpus, slowest job", worst["report_no_min_gpus"],
             "report_no_min_gpus"),
            ("fmest estimate (preset), fresh process", figures["estimate_cli"], "estimate_cli"),
            ("fmest --help, fresh process", figures["help_cli"], "help_cli")]
    for label, value, key in rows:
        target = TARGETS[key]
        mark = "" if value <= target else "  over"
        print(f"{label:<42} {_us(value):>12} {_us(target):>10}{mark}")
    print(f"{'python -c pass, fresh process (scale)':<42} {_us(baseline):>12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
