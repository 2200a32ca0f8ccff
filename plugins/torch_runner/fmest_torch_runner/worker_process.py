"""One configuration, one fresh interpreter: the unit of work both sweep executors run (local
threads in :mod:`fmest_torch_runner.probe`, Ray tasks in :mod:`fmest_torch_runner.ray_executor`).

:func:`config_hash` names a configuration's row (resume skips hashes already written);
:func:`run_in_subprocess` runs ``python -m fmest_torch_runner.probe --worker``, which prints the
row as one line marked :data:`ROW_MARK`, so that an out-of-memory kill, a crash or a timeout is a
row too.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from typing import Any

from fmest_torch_runner.records import RUNNER_VERSION

#: the worker module (``--worker`` entry point: :func:`fmest_torch_runner.probe.worker_main`)
WORKER_MODULE = "fmest_torch_runner.probe"
#: prefix of the worker's row line on stdout (anything else it prints is ignored)
ROW_MARK = "FMEST_PROBE_ROW "


def config_hash(job_dict: dict[str, Any], device: str) -> str:
    """The row's identity: the normalised job, the device and the runner version."""
    text = json.dumps({"job": job_dict, "device": device, "runner": RUNNER_VERSION},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_in_subprocess(job_dict: dict[str, Any], device: str, *, threads: int = 0,
                      timeout: float = 600, theory: bool = True) -> dict[str, Any]:
    """Run one configuration in a fresh interpreter; a crash or timeout is a row too."""
    cmd = [sys.executable, "-m", WORKER_MODULE, "--worker", "--device", device]
    if threads:
        cmd += ["--threads", str(threads)]
    if not theory:
        cmd.append("--no-theory")
    env = dict(os.environ)
    if threads:
        env.setdefault("OMP_NUM_THREADS", str(threads))
    base = {"config_hash": config_hash(job_dict, device), "device": device,
            "model": job_dict.get("model"),
            "job_json": json.dumps(job_dict, sort_keys=True, default=str)}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, input=json.dumps(job_dict), capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {**base, "status": "error", "error": f"timeout after {timeout:.0f} s",
                "run_wall_seconds": time.perf_counter() - t0}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(ROW_MARK):
            row: dict[str, Any] = json.loads(line[len(ROW_MARK):])
            return row
    tail = " | ".join(proc.stderr.strip().splitlines()[-3:])[-500:]
    # -9: SIGKILL, in practice the kernel's OOM killer
    status = "oom" if proc.returncode in (-9, 137) or "MemoryError" in proc.stderr else "error"
    return {**base, "status": status,
            "error": f"worker exited with {proc.returncode}: {tail}",
            "run_wall_seconds": time.perf_counter() - t0}
