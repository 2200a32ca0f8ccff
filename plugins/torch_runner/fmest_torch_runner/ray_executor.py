"""``fmest probe --executor ray [--address ADDR]``: a sweep as Ray tasks, one per configuration.

Each task runs the local executor's unit of work,
:func:`fmest_torch_runner.worker_process.run_in_subprocess`,
on whichever node Ray picks, so a row from the fleet is the same row a laptop writes: a fresh
interpreter per configuration, the same timeout, out-of-memory and crash handling. Ray adds the
placement (``num_gpus=1`` per configuration for ``--device cuda``, ``num_cpus=--threads``
otherwise) and the fleet.

The driver streams rows into the output as tasks finish (``ray.wait`` one at a time), so an
interrupted sweep keeps what finished and the next run resumes past it (the caller skips
configurations whose ``config_hash`` is already in the output).

A worker that dies under a task (the process killed, its node lost, Ray's memory monitor) is a
system failure, not an answer: the configuration is submitted once more, and if that attempt dies
too it is recorded with status ``failed`` (``oom`` when Ray's memory monitor killed it) and the
error, so every configuration of the sweep ends as a row. A task that raises is recorded as
``error`` at once: running the same code again gives the same exception.

``ray`` is an optional dependency: ``pip install 'fmest-torch-runner[ray]'``. Nodes of a cluster
need the same packages (fmest, fmest-torch-runner, torch, transformers) as the driver.

Each task is given its attempt number (1 for the first); the rows do not depend on it. A test
that must see workers die replaces :func:`probe_task` with a body that exits on chosen attempts
(``tests/test_ray_executor.py``), so the product carries no fault-injection switch.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Optional

from fmest.errors import InputError
from fmest_torch_runner.worker_process import config_hash, run_in_subprocess

#: Attempts after the first for a configuration whose worker died (the issue's "retried once").
RETRIES_AFTER_WORKER_DEATH = 1


def import_ray():
    """The ``ray`` module, or an :class:`InputError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise InputError("--executor", "ray is not installed; pip install "
                         "'fmest-torch-runner[ray]'", value="ray", accepted=["local"]) from None
    return ray


def task_resources(device: str, threads: int) -> dict[str, float]:
    """What one configuration reserves on a node: a whole GPU for cuda, its threads otherwise."""
    if device == "cuda":
        return {"num_gpus": 1, "num_cpus": 1}
    return {"num_cpus": max(1, threads)}


def probe_task(job_dict: dict, device: str, threads: int, timeout: float, theory: bool,
               attempt: int = 1) -> dict:
    """The body of one Ray task: one configuration in a fresh subprocess of the worker
    (``attempt``: 1 for the first try, 2 after its worker died once)."""
    return run_in_subprocess(job_dict, device, threads=threads, timeout=timeout, theory=theory)


def _failed_row(job_dict: dict, device: str, status: str, error: str) -> dict:
    import json

    return {"config_hash": config_hash(job_dict, device), "device": device, "status": status,
            "error": error, "model": job_dict.get("model"),
            "job_json": json.dumps(job_dict, sort_keys=True, default=str)}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


def _check_reachable(address: Optional[str]) -> None:
    """Fail fast on a ``host:port`` nobody listens on (``ray.init`` retries it for minutes)."""
    if not address or address == "auto" or address.startswith("local"):
        return
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")  # [::1]:6379
    if not host or not port.isdigit():
        raise InputError("--address", "expected auto, HOST:PORT or ray://HOST:PORT",
                         value=address)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise InputError("--address", f"no Ray cluster answers at {host}:{port} "
                         f"({exc.strerror or exc})", value=address) from None


def _check_cluster(ray, device: str, resources: dict[str, float]) -> None:
    """A task no node can hold would wait forever; say so before submitting any."""
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    need = {"GPU": resources.get("num_gpus", 0), "CPU": resources.get("num_cpus", 0)}
    if not any(all(node.get(k, 0) >= v for k, v in need.items() if v) for node in nodes):
        have = ", ".join(f"{{CPU: {n.get('CPU', 0):g}, GPU: {n.get('GPU', 0):g}}}" for n in nodes)
        field = "--device" if need["GPU"] else "--threads"
        raise InputError(field, f"no node of the Ray cluster has {need['CPU']:g} CPU and "
                         f"{need['GPU']:g} GPU for one configuration (nodes: {have or 'none'})",
                         value=device if need["GPU"] else resources["num_cpus"])


def run_sweep(todo: list[dict], device: str, *, on_row: Callable[[dict], Any],
              address: Optional[str] = None, threads: int = 1, timeout: float = 600.0,
              theory: bool = True) -> list[dict]:
    """Run ``todo`` (normalised job dicts) as Ray tasks; call ``on_row`` as each row is final.

    Uses the Ray instance already initialised in this process if there is one, otherwise
    ``ray.init(address)`` (``None``: ``RAY_ADDRESS`` or a new local instance), shut down after.
    Returns the rows in completion order, one per configuration.
    """
    ray = import_ray()
    from ray.exceptions import OutOfMemoryError, RayError, RayTaskError, TaskCancelledError

    started = not ray.is_initialized()
    if started:
        import logging

        _check_reachable(address)
        options: dict[str, Any] = {"logging_level": logging.WARNING}
        if address is None and not os.environ.get("RAY_ADDRESS"):  # a new local instance
            options["include_dashboard"] = False
        try:
            ray.init(address=address, **options)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            root: BaseException = exc
            while root.__cause__ is not None:  # ray wraps the reason (auth, version)
                root = root.__cause__
            # ... and may carry it as the last line of a formatted traceback
            reason = (str(root).strip().splitlines() or [""])[-1].strip()
            cause = f" ({reason[:300]})" if root is not exc and reason else ""
            raise InputError("--address", f"cannot reach a Ray cluster: {exc}{cause}",
                             value=address) from None
    try:
        resources = task_resources(device, threads)
        _check_cluster(ray, device, resources)
        task = ray.remote(probe_task).options(max_retries=0, **resources)
        pending: dict[Any, tuple[dict, int]] = {}

        def submit(job_dict: dict, attempt: int) -> None:
            ref = task.remote(job_dict, device, threads, timeout, theory, attempt)
            pending[ref] = (job_dict, attempt)

        for job_dict in todo:
            submit(job_dict, 1)
        rows = []
        try:
            while pending:
                (ref,), _ = ray.wait(list(pending), num_returns=1)
                job_dict, attempt = pending.pop(ref)
                try:
                    row = ray.get(ref)
                except RayTaskError as exc:  # the task's own code raised: same again next time
                    row = _failed_row(job_dict, device, "error", _first_line(exc))
                except TaskCancelledError as exc:
                    row = _failed_row(job_dict, device, "failed", _first_line(exc))
                except RayError as exc:  # the worker or its node died under the task
                    if attempt <= RETRIES_AFTER_WORKER_DEATH:
                        sys.stderr.write(f"{config_hash(job_dict, device)}: worker died "
                                         f"({_first_line(exc)[:120]}); retrying\n")
                        submit(job_dict, attempt + 1)
                        continue
                    status = "oom" if isinstance(exc, OutOfMemoryError) else "failed"
                    row = _failed_row(job_dict, device, status,
                                      f"worker died on all {attempt} attempts: "
                                      f"{_first_line(exc)}")
                on_row(row)
                rows.append(row)
        except KeyboardInterrupt:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
        return rows
    finally:
        if started:
            ray.shutdown()
