"""Speed of the theory path: in-process latency of one estimate, CLI cold start, and
estimates per second over a grid. Prints a table; asserts nothing (targets: one estimate under
1 ms in-process, CLI cold start under 0.5 s).

Run: python benchmarks/speed.py
"""

from __future__ import annotations

import itertools
import statistics
import subprocess
import sys
import time

import fmest
from fmest.engine import Engine
from fmest.job import Job

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


def _time(fn, n: int) -> float:
    fn()  # warm caches (model resolution)
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> int:
    engine = Engine()
    rows = []
    for name, data in JOBS.items():
        job = fmest.to_job(data)
        ctx = engine.context(job)
        mem = _time(lambda: engine.estimate_memory(job, ctx), 200)
        full = _time(lambda: engine.estimate(job), 50)
        rows.append((name, mem * 1e3, full * 1e3))
    print(f"{'job':<24} {'memory estimate':>16} {'full report*':>14}")
    for name, m, f in rows:
        print(f"{name:<24} {m:13.3f} ms {f:11.2f} ms")
    print("* full report = memory + max-micro-batch search + time + tokens + cost")

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

    cold = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "fmest", "estimate", "--model",
                        "meta-llama/Llama-2-7b-hf", "--format", "json"],
                       check=True, capture_output=True)
        cold.append(time.perf_counter() - t0)
    print(f"CLI cold start (fmest estimate, median of 5): {statistics.median(cold):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
