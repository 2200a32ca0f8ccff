"""Work budgets that stop the work: the service's estimates run in worker processes.

A thread cannot be stopped, so a request that runs past the service's time limit in a thread
keeps its core busy after the client got its 504 (a 40-byte ``/v1/plan`` kept a core for minutes).
With ``fmest serve --workers N`` (the default for ``fmest serve``; ``create_app(workers=N)``)
each request's work runs in one of N worker processes, each with its own engine:

* **time**: past ``budget_seconds`` (``--timeout``) the worker is killed, a fresh one takes its
  place, and the client gets a 504 that says the work was stopped;
* **CPU**: before each task the worker lowers its own ``RLIMIT_CPU`` to the CPU it has used plus
  ``cpu_budget_seconds`` (``--cpu-budget``), so a task that burns more CPU than that is ended by the
  kernel (SIGXCPU) even if the parent is stuck;
* **the client**: a client that goes away while its request runs gets its worker killed too
  (``Request.is_disconnected`` is polled while waiting);
* ``/healthz`` reports the pool (:meth:`WorkerPool.health`): busy workers, restarts, and any
  worker still busy past its budget and a grace (a kill that did not take): ``"stuck"``.

Workers are fresh interpreters (``python -m fmest.serve.workers``: no locks or threads inherited
from the server, and the server's main module is not imported again) and build their engine from the installed plugins and the server's file policy; a task is a pickled
``(kind, payload)`` and its answer a pickled ``(status, body)``. ``create_app(workers=0)`` keeps
the work in threads of the server process (an embedding application, the tests' own engines):
there the limit stops the waiting, not the work, and ``/healthz`` lists the requests still
running past it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from typing import Any, Callable, Optional

from attrs import frozen

log = logging.getLogger("fmest.serve")

#: How long past its budget a killed worker may still show as busy before ``/healthz`` calls it
#: stuck (a kill and a join take milliseconds; a worker in uninterruptible I/O can take longer).
STUCK_GRACE_SECONDS = 5.0
#: How long a fresh worker may take to start (import fmest and its plugins, build its engine:
#: about 1 s on an idle 2-core machine) before the request it was picked for is refused.
STARTUP_SECONDS = 60.0
#: How often a waiting request checks whether its client is still there.
DISCONNECT_POLL_SECONDS = 0.25


@frozen(kw_only=True)
class WorkerConfig:
    """What a worker needs to build its service: the file policy and fm-training-estimator's
    operator paths (the engine comes from the installed plugins, as ``fmest`` builds it)."""

    allow_paths: tuple[str, ...] = ()
    fmte_paths: tuple[Optional[str], Optional[str]] = (None, None)
    cpu_budget_seconds: Optional[float] = None
    #: each plugin call's deadline in the worker's engine (None: FMEST_PLUGIN_TIMEOUT's)
    plugin_timeout: Optional[float] = None


class WorkStopped(Exception):
    """A task's worker was stopped: ``reason`` says why (budget, CPU, client gone)."""

    def __init__(self, reason: str, status: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


# -- the worker process ---------------------------------------------------------------------
def _cpu_seconds() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _limit_cpu(budget: Optional[float]) -> None:
    """Let this process use ``budget`` more CPU seconds, then the kernel ends it."""
    if not budget:
        return
    try:
        import resource

        _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft = int(_cpu_seconds() + budget) + 1
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    except (ImportError, ValueError, OSError):  # not POSIX, or not allowed: the wall budget holds
        pass


def _service(config: WorkerConfig) -> dict:
    from fmest.engine import Engine
    from fmest.serve.files import FileAccess
    from fmest.serve.service import ServiceEngine

    engine = Engine(plugin_timeout=config.plugin_timeout)
    return {"service": ServiceEngine(engine), "access": FileAccess.of(config.allow_paths),
            "config": config}


def run_task(kind: str, payload: Any, state: dict) -> tuple[str, Any]:
    """One task in a worker: ``("ok", json text)`` or an error ``(kind, body)``."""
    from fmest.errors import FmestError, InputError, error_body, error_object

    service, access = state["service"], state["access"]
    try:
        if kind == "estimate":
            from fmest.serve.service import estimate_response

            args, job_input = payload
            return "ok", estimate_response(args, job_input, service, access)
        if kind == "plan":
            from fmest import flags as flag_table
            from fmest.serve.files import checked_plan_response

            return "ok", checked_plan_response(flag_table.PLAN_FLAGS, payload, service, access)
        if kind == "fmte":
            from fmest.compat.fm_training_estimator.ui import api as fmte_api

            data_path, model_path = state["config"].fmte_paths
            return "ok", fmte_api.answer(payload, data_path=data_path, model_path=model_path,
                                         engine=service.engine, access=access)
        if kind == "spin":     # CPU-bound work of `payload` seconds: the budgets' own check
            end = time.monotonic() + float(payload)
            while time.monotonic() < end:
                pass
            return "ok", '"spun"'
        raise ValueError(f"unknown task {kind!r}")
    except InputError as exc:
        return "input_error", error_object(exc)
    except FmestError as exc:
        return "fmest_error", error_body(None, str(exc))
    except Exception as exc:  # noqa: BLE001 - a bug: logged here, named to the client
        log.exception("fmest serve worker: unexpected error in %s", kind)
        return "bug", error_body(None, f"internal error ({type(exc).__name__}); the server "
                                 "log has the details")


def worker_main() -> None:
    """A worker's loop (``python -m fmest.serve.workers``): the channel is stdin and a copy of
    stdout, whose descriptor then points at stderr so that nothing a plugin prints can break the
    channel; build the service once, then answer tasks until the channel closes."""
    import sys
    from multiprocessing.connection import Connection

    out = Connection(os.dup(1), readable=False)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    inbox = Connection(os.dup(0), writable=False)
    try:
        config = inbox.recv()
        state = _service(config)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which names it
        out.send(("start_failed", f"{type(exc).__name__}: {exc}"))
        return
    out.send(("ready", os.getpid()))
    while True:
        try:
            kind, payload = inbox.recv()
        except (EOFError, OSError):
            return
        _limit_cpu(config.cpu_budget_seconds)
        out.send(run_task(kind, payload, state))


# -- the pool, in the server ----------------------------------------------------------------
class _Worker:
    """One worker: ``python -m fmest.serve.workers`` with a pickle channel on its stdin and a
    duplicate of its stdout (a subprocess, not ``multiprocessing``: the server's main module,
    which may be anyone's script, is never imported again)."""

    def __init__(self, config: WorkerConfig) -> None:
        import subprocess
        import sys
        from multiprocessing.connection import Connection

        self.process = subprocess.Popen([sys.executable, "-m", "fmest.serve.workers"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        close_fds=True)
        assert self.process.stdin is not None and self.process.stdout is not None
        self._to = Connection(os.dup(self.process.stdin.fileno()), readable=False)
        self.conn = Connection(os.dup(self.process.stdout.fileno()), writable=False)
        self.process.stdin.close()
        self.process.stdout.close()
        self._to.send(config)
        self.ready = False
        self.busy_since: Optional[float] = None
        self.budget: float = 0.0

    @property
    def pid(self) -> int:
        return self.process.pid

    def exit_code(self) -> Optional[int]:
        return self.process.poll()

    def send(self, message: Any) -> None:
        self._to.send(message)

    def kill(self) -> None:
        try:
            self.process.kill()
            self.process.wait(2)
        except (OSError, ValueError):
            pass
        except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: a zombie is reaped later
            pass
        for c in (self._to, self.conn):
            try:
                c.close()
            except OSError:
                pass


class WorkerPool:
    """``size`` worker processes; :meth:`run` hands one a task under a budget."""

    def __init__(self, size: int, config: WorkerConfig, *, budget_seconds: float) -> None:
        if size < 1:
            raise ValueError("a worker pool needs at least one worker")
        self.size = size
        self.config = config
        self.budget_seconds = float(budget_seconds)
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._all: list[_Worker] = []
        self._free: Optional[asyncio.Semaphore] = None
        self.restarts = 0
        self.stopped = 0
        self.start_error: Optional[str] = None
        for _ in range(size):
            self._add()

    def _add(self) -> None:
        w = _Worker(self.config)
        with self._lock:
            self._all.append(w)
            self._idle.append(w)

    def _replace(self, w: _Worker) -> None:
        w.kill()
        with self._lock:
            if w in self._all:
                self._all.remove(w)
            self.restarts += 1
        self._add()

    async def _wait_readable(self, w: _Worker, seconds: float) -> bool:
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        fd = w.conn.fileno()
        def readable() -> None:
            if not ready.done():
                ready.set_result(True)
        loop.add_reader(fd, readable)
        try:
            await asyncio.wait_for(ready, max(0.0, seconds))
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            loop.remove_reader(fd)

    async def _recv(self, w: _Worker, deadline: float,
                    gone: Optional[Callable[[], Any]]) -> Any:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkStopped(f"took longer than the server's budget of "
                                  f"{self.budget_seconds:g} s; the work was stopped", 504)
            if await self._wait_readable(w, min(left, DISCONNECT_POLL_SECONDS)):
                try:
                    return w.conn.recv()
                except (EOFError, OSError):
                    try:
                        code = w.process.wait(1)
                    except Exception:  # noqa: BLE001 - still running: no code
                        code = None
                    raise WorkStopped(
                        "used more CPU than the server's budget of "
                        f"{self.config.cpu_budget_seconds:g} s; the work was stopped"
                        if self.config.cpu_budget_seconds and code is not None and code < 0
                        else f"the worker ended (exit code {code})", 504) from None
            if gone is not None and await gone():
                raise WorkStopped("the client went away; the work was stopped", 499)

    async def _ready(self, w: _Worker, deadline: float) -> None:
        if w.ready:
            return
        msg = await self._recv(w, deadline, None)
        if msg[0] != "ready":
            self.start_error = str(msg[1])
            raise WorkStopped(f"a worker could not start: {msg[1]}", 500)
        w.ready = True

    async def run(self, kind: str, payload: Any,
                  gone: Optional[Callable[[], Any]] = None) -> tuple[str, Any]:
        """Run one task; raise :class:`WorkStopped` when its budget or its client ends it."""
        if self._free is None:
            self._free = asyncio.Semaphore(self.size)
        deadline = time.monotonic() + self.budget_seconds
        try:
            await asyncio.wait_for(self._free.acquire(), self.budget_seconds)
        except asyncio.TimeoutError:
            raise WorkStopped(f"every worker stayed busy for the server's budget of "
                              f"{self.budget_seconds:g} s", 503) from None
        with self._lock:
            w = self._idle.pop()
        try:
            # a worker's start (an interpreter importing fmest and its plugins) is not the
            # request's work: it has its own allowance, then the budget starts
            await self._ready(w, time.monotonic() + STARTUP_SECONDS)
            deadline = time.monotonic() + self.budget_seconds
            w.busy_since, w.budget = time.monotonic(), self.budget_seconds
            w.send((kind, payload))
            result = await self._recv(w, deadline, gone)
        except WorkStopped:
            self.stopped += 1
            self._replace(w)
            raise
        except BaseException:
            self._replace(w)
            raise
        else:
            w.busy_since = None
            with self._lock:
                self._idle.append(w)
        finally:
            self._free.release()
        return result

    def health(self) -> dict:
        """Busy workers, restarts and stuck ones (busy past budget + grace)."""
        now = time.monotonic()
        with self._lock:
            workers = list(self._all)
        busy = [w for w in workers if w.busy_since is not None]
        stuck = [{"pid": w.pid, "busy_seconds": round(now - w.busy_since, 1)}
                 for w in busy if w.busy_since is not None
                 and now - w.busy_since > w.budget + STUCK_GRACE_SECONDS]
        return {"mode": "processes", "size": self.size, "busy": len(busy),
                "restarts": self.restarts, "stopped": self.stopped, "stuck": stuck,
                **({"start_error": self.start_error} if self.start_error else {})}

    def close(self) -> None:
        with self._lock:
            workers, self._all, self._idle = list(self._all), [], []
        for w in workers:
            w.kill()


class ThreadWork:
    """The requests running in threads (``workers=0``): a thread cannot be stopped, so those
    still running past the limit are reported by ``/healthz`` as stuck."""

    def __init__(self, limit_seconds: float) -> None:
        self.limit_seconds = limit_seconds
        self._lock = threading.Lock()
        self._running: dict[int, float] = {}
        self._next = 0

    def start(self) -> int:
        with self._lock:
            self._next += 1
            self._running[self._next] = time.monotonic()
            return self._next

    def end(self, token: int) -> None:
        with self._lock:
            self._running.pop(token, None)

    def health(self) -> dict:
        now = time.monotonic()
        with self._lock:
            ages = list(self._running.values())
        stuck = [round(now - t, 1) for t in ages if now - t > self.limit_seconds]
        return {"mode": "threads", "busy": len(ages),
                "stuck": [{"busy_seconds": s} for s in stuck]}


if __name__ == "__main__":
    worker_main()
