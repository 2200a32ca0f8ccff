"""Slow clients against ``fmest serve``: 1,000 connections that send nothing or drip a request
head a byte a second, while ``GET /healthz`` and ``POST /v1/estimate`` are timed; prints one row
per server: how fast they answered under that load, how many slow connections the server
closed and when, and the server's resident memory with them open.

Servers (each started in its own process on a free 127.0.0.1 port):

* ``fmest serve``: the command with its defaults (head deadline ``--header-timeout`` 10 s,
  ``--limit-concurrency`` 2048, the open-file limit raised);
* ``before``: what ``fmest serve`` ran before the deadlines (uvicorn over plain h11 with
  ``--limit-concurrency 256``; ``--no-before`` skips it).

Run: python benchmarks/serve_slow.py [--connections 1000] [--header-timeout 10] [--samples 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

import httpx

from fmest.serve import raise_open_files_limit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_load import _free_port, start_process  # noqa: E402  (benchmarks/serve_load.py)

BODY = {"model": "meta-llama/Llama-2-7b-hf", "gpu": "A100-80GB", "per_device_batch": 2}
HEAD = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
#: how long past the deadline a slow connection may stay open and still count as closed by it
SLACK = 5.0


@dataclass
class Outcome:
    server: str
    connected: int = 0
    closed: list[float] = field(default_factory=list)  # seconds from open to the server's close
    answered_408: int = 0
    healthz: list[tuple[int, float]] = field(default_factory=list)  # (status, seconds)
    estimate: list[tuple[int, float]] = field(default_factory=list)
    rss_before: Optional[int] = None  # server's resident KiB
    rss_loaded: Optional[int] = None


def _rss_kib(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def start_server(kind: str, header_timeout: float) -> tuple[str, subprocess.Popen]:
    port = _free_port()
    if kind == "fmest serve":
        argv = [sys.executable, "-m", "fmest", "serve", "--port", str(port),
                "--header-timeout", f"{header_timeout:g}"]
    else:  # what fmest serve ran before the deadlines
        argv = [sys.executable, "-m", "uvicorn", "fmest.serve.app:create_app", "--factory",
                "--port", str(port), "--http", "h11", "--limit-concurrency", "256",
                "--timeout-keep-alive", "5"]
    return start_process(argv, port, kind, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)


async def slow_connection(port: int, drip: bool, until: float, outcome: Outcome) -> None:
    """One connection that sends nothing (or a byte of a head a second) until the server
    closes it or ``until`` (monotonic) passes."""
    t0 = time.monotonic()  # before the connect: the server's clock starts at its accept
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return
    outcome.connected += 1
    sent, received = 0, b""
    try:
        while True:
            left = until - time.monotonic()
            if left <= 0:
                return  # still open
            try:
                chunk = await asyncio.wait_for(reader.read(65536), min(1.0, left))
            except asyncio.TimeoutError:
                if drip:
                    writer.write(HEAD[sent:sent + 1] or b"x")
                    sent += 1
                continue
            except ConnectionError:
                chunk = b""
            if not chunk:
                outcome.closed.append(time.monotonic() - t0)
                outcome.answered_408 += received.startswith(b"HTTP/1.1 408 ")
                return
            received += chunk
    finally:
        writer.close()


async def timed(client: httpx.AsyncClient, method: str, path: str, **kw) -> tuple[int, float]:
    t0 = time.perf_counter()
    try:
        response = await client.request(method, path, **kw)
        status = response.status_code
    except httpx.HTTPError:
        status = 0
    return status, time.perf_counter() - t0


async def run(kind: str, connections: int, header_timeout: float, samples: int) -> Outcome:
    outcome = Outcome(kind)
    url, proc = start_server(kind, header_timeout)
    try:
        port = int(url.rsplit(":", 1)[1])
        async with httpx.AsyncClient(base_url=url, timeout=30,
                                     limits=httpx.Limits(max_keepalive_connections=0)) as client:
            await timed(client, "POST", "/v1/estimate", json=BODY)  # warm the workers
            outcome.rss_before = _rss_kib(proc.pid)
            until = time.monotonic() + header_timeout + SLACK
            tasks = [asyncio.create_task(slow_connection(port, i % 2 == 1, until, outcome))
                     for i in range(connections)]
            while outcome.connected < connections and time.monotonic() < until - SLACK:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.2)  # let the server accept them all
            outcome.rss_loaded = _rss_kib(proc.pid)
            for _ in range(samples):
                outcome.healthz.append(await timed(client, "GET", "/healthz"))
                outcome.estimate.append(await timed(client, "POST", "/v1/estimate", json=BODY))
            await asyncio.gather(*tasks)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return outcome


def _answers(timings: list[tuple[int, float]]) -> str:
    ok = [t for status, t in timings if status == 200]
    others = sorted({status for status, _ in timings if status != 200})
    text = f"{len(ok)}/{len(timings)} 200"
    if ok:
        text += f", p50 {1e3 * statistics.median(ok):.0f} ms, max {1e3 * max(ok):.0f} ms"
    if others:
        text += ", other: " + ", ".join(str(s) if s else "failed" for s in others)
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--header-timeout", type=float, default=10.0)
    parser.add_argument("--samples", type=int, default=10,
                        help="requests of each kind timed while the slow connections are open")
    parser.add_argument("--no-before", action="store_true",
                        help="skip the server without the deadlines")
    args = parser.parse_args(argv)
    limit = raise_open_files_limit(args.connections + 64)
    if limit is not None and limit < args.connections + 64:
        raise SystemExit(f"the open-file limit ({limit}) is too low for {args.connections} "
                         "connections (ulimit -n)")
    kinds = ["fmest serve"] + ([] if args.no_before else ["before"])
    outcomes = [asyncio.run(run(kind, args.connections, args.header_timeout, args.samples))
                for kind in kinds]
    print(f"{args.connections} slow connections (half send nothing, half a byte of a head a "
          f"second); {args.samples} of each request timed while they are open; head deadline "
          f"{args.header_timeout:g} s; {os.cpu_count()} CPUs")
    print()
    print("| server | connected | GET /healthz | POST /v1/estimate | closed by the server "
          f"within {args.header_timeout + SLACK:g} s | 408 to a dripped head | server RSS "
          "idle -> loaded |")
    print("|---|---|---|---|---|---|---|")
    for o in outcomes:
        closed = f"{len(o.closed)}"
        if o.closed:
            closed += f" (after {min(o.closed):.1f} to {max(o.closed):.1f} s)"
        rss = (f"{o.rss_before / 1024:.1f} -> {o.rss_loaded / 1024:.1f} MiB "
               f"({(o.rss_loaded - o.rss_before) / max(1, o.connected):.1f} KiB each)"
               if o.rss_before and o.rss_loaded else "-")
        print(f"| {o.server} | {o.connected} | {_answers(o.healthz)} | {_answers(o.estimate)} "
              f"| {closed} | {o.answered_408} | {rss} |")
    served = outcomes[0]
    ok = all(status == 200 for status, _ in served.healthz + served.estimate) \
        and len(served.closed) == served.connected == args.connections
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
