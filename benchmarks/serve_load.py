"""Load on ``fmest serve``: 2,000 ``POST /v1/estimate`` requests over 64 concurrent
connections to a server on this machine; prints p50/p99 latency, requests/s and errors.

An error is a non-200 answer, a failed connection, or an answer that differs from what the
same request gets from a fresh in-process app one request at a time (so a race in a cache
counts). The server starts cold (empty model caches) in its own process, as ``fmest serve``
would run (uvicorn, one process); ``--url`` targets one already running on 127.0.0.1.

Run: python benchmarks/serve_load.py [--requests 2000] [--connections 64] [--url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import socket
import subprocess
import sys
import time
from urllib.parse import urlparse

import httpx

#: A mix of models, batches, GPUs and sharding, so requests hit different cache entries.
MODELS = ("meta-llama/Llama-2-7b-hf", "meta-llama/Llama-3.1-70B", "Qwen/Qwen2.5-7B",
          "mistralai/Mixtral-8x7B-v0.1", "google/gemma-2-9b", "microsoft/Phi-3-mini-4k-instruct")
BATCHES = (1, 2, 4, 8)
SETUPS = ({"gpu": "A100-80GB"}, {"gpu": "H100", "zero": 3, "gpus_per_node": 8},
          {"gpu": "L40S", "lora": True, "lora_target_modules": ["all-linear"],
           "grad_checkpoint": "full"},
          {"gpu": "H100", "fsdp": "full_shard", "gpus_per_node": 8, "nodes": 2,
           "dataset_tokens": 1e10})


def bodies() -> list[dict]:
    return [{"model": model, "per_device_batch": batch, **setup}
            for model, batch, setup in itertools.product(MODELS, BATCHES, SETUPS)]


def expected_answers(items: list[dict]) -> list[bytes]:
    """Each body's answer from a fresh in-process app, one request at a time."""
    from fastapi.testclient import TestClient

    from fmest.serve.app import create_app

    client = TestClient(create_app())
    return [json.loads(client.post("/v1/estimate", json=b).content) for b in items]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_process(argv: list[str], port: int, name: str = "the server",
                  **popen) -> tuple[str, subprocess.Popen]:
    """Start a server process on ``port`` (offline) and wait until its /healthz answers."""
    proc = subprocess.Popen(argv, env=dict(os.environ, HF_HUB_OFFLINE="1"), **popen)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return url, proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"{name} did not start within 60 s")


def start_server() -> tuple[str, subprocess.Popen]:
    port = _free_port()
    return start_process([sys.executable, "-m", "uvicorn", "fmest.serve.app:create_app",
                          "--factory", "--host", "127.0.0.1", "--port", str(port),
                          "--log-level", "warning", "--backlog", "512"], port)


async def load(url: str, items: list[dict], expected: list, total: int,
               connections: int) -> tuple[list[float], int, int, float]:
    """``(latencies in s, failed requests, wrong answers, wall seconds, failure samples)``."""
    latencies: list[float] = []
    failed = wrong = 0
    samples: list[str] = []  # the first few failures, to say what went wrong
    counter = itertools.count()
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)

    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:
        async def worker():
            nonlocal failed, wrong
            while (i := next(counter)) < total:
                k = i % len(items)
                t0 = time.perf_counter()
                try:
                    response = await client.post("/v1/estimate", json=items[k])
                except httpx.HTTPError as exc:
                    failed += 1
                    samples.append(f"{type(exc).__name__}: {exc} ({items[k]})")
                    continue
                latencies.append(time.perf_counter() - t0)
                if response.status_code != 200:
                    failed += 1
                    samples.append(f"HTTP {response.status_code}: {response.text[:300]}")
                elif response.json() != expected[k]:
                    wrong += 1
                    samples.append(f"wrong answer for {items[k]}")

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        wall = time.perf_counter() - t0
    return latencies, failed, wrong, wall, samples


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--url", help="a running server on 127.0.0.1 (default: start one)")
    args = parser.parse_args(argv)
    items = bodies()
    expected = expected_answers(items)
    proc = None
    if args.url:
        if urlparse(args.url).hostname not in ("127.0.0.1", "localhost", "::1"):
            raise SystemExit("--url: only a server on this machine (127.0.0.1)")
        url = args.url.rstrip("/")
    else:
        url, proc = start_server()
    try:
        latencies, failed, wrong, wall, samples = asyncio.run(
            load(url, items, expected, args.requests, args.connections))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
    latencies.sort()

    def pct(p: float) -> float:
        return 1e3 * latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))]

    rows = [("requests", f"{args.requests}"), ("concurrent connections", f"{args.connections}"),
            ("distinct jobs", f"{len(items)}"), ("errors (non-200 or failed)", f"{failed}"),
            ("wrong answers (differ from sequential)", f"{wrong}"),
            ("wall time", f"{wall:.2f} s"), ("requests/s", f"{args.requests / wall:.1f}"),
            ("latency p50", f"{pct(50):.1f} ms"), ("latency p90", f"{pct(90):.1f} ms"),
            ("latency p99", f"{pct(99):.1f} ms"), ("latency max", f"{1e3 * latencies[-1]:.1f} ms"),
            ("machine", f"{os.cpu_count()} CPUs, server: uvicorn, 1 process")]
    width = max(len(k) for k, _ in rows)
    print(f"fmest serve load: POST /v1/estimate on {url}")
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    for sample in samples[:5]:
        print(f"  failure: {sample}")
    return 0 if failed == 0 and wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
