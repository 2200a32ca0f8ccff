"""Work budgets that stop the work (fmest.serve.workers): estimates in worker processes, killed
and replaced past the wall or CPU budget or when the client goes, and /healthz reporting the
pool and any stuck worker. Each test checks the protection, not only an answer: without it the
work would go on (tests/test_serve.py covers the thread mode the embedding API keeps)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'fmest[serve]'")
pytest.importorskip("httpx", reason="needs the serve extra")

from fastapi.testclient import TestClient  # noqa: E402

from fmest.serve.app import create_app  # noqa: E402
from fmest.serve.workers import WorkerConfig, WorkerPool, WorkStopped  # noqa: E402

JOB = {"model": "llama-3-8b", "gpu": "A100-80GB", "seq_len": 4096}


@pytest.fixture(scope="module")
def client():
    app = create_app(workers=1, timeout_seconds=20, cpu_budget_seconds=20)
    with TestClient(app) as c:
        yield c


def test_estimates_in_a_worker_are_the_threads_answers(client):
    with TestClient(create_app()) as threads:
        expected = threads.post("/v1/estimate", json=JOB).json()
    r = client.post("/v1/estimate", json=JOB)
    assert r.status_code == 200, r.text
    assert r.json()["memory"] == expected["memory"]
    bad = client.post("/v1/estimate", json={**JOB, "model": "no-such-model"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "model"
    fmte = client.post("/api/estimate", json={"base_model_path": "granite-3b-code-base",
                                              "numGpusPerPod": 1})
    assert fmte.status_code == 200 and "total_mem_estimate" in json.loads(fmte.json())
    health = client.get("/healthz").json()
    assert health["status"] == "ok"
    assert health["workers"]["mode"] == "processes" and health["workers"]["size"] == 1


def _run(pool: WorkerPool, kind: str, payload, gone=None):
    async def go():
        return await pool.run(kind, payload, gone=gone)
    return asyncio.run(go())


def test_wall_budget_kills_the_work_and_a_fresh_worker_answers():
    pool = WorkerPool(1, WorkerConfig(), budget_seconds=1.5)
    try:
        pid = pool.health()["size"] and pool._all[0].pid
        t0 = time.monotonic()
        with pytest.raises(WorkStopped, match="budget of 1.5 s; the work was stopped") as e:
            _run(pool, "spin", 30)
        assert e.value.status == 504 and time.monotonic() - t0 < 10
        assert pool.restarts == 1 and pool._all[0].pid != pid
        assert _run(pool, "spin", 0.01) == ("ok", '"spun"')   # the replacement answers
    finally:
        pool.close()


def test_cpu_budget_is_enforced_by_the_kernel():
    pool = WorkerPool(1, WorkerConfig(cpu_budget_seconds=1), budget_seconds=30)
    try:
        _run(pool, "spin", 0.01)            # the worker has started and paid its imports
        t0 = time.monotonic()
        with pytest.raises(WorkStopped, match="more CPU than the server's budget of 1 s"):
            _run(pool, "spin", 30)
        assert time.monotonic() - t0 < 10    # well before the 30 s wall budget
    finally:
        pool.close()


def test_a_client_that_goes_stops_its_work():
    pool = WorkerPool(1, WorkerConfig(), budget_seconds=30)
    calls = []

    async def gone():
        calls.append(1)
        return len(calls) > 1

    try:
        t0 = time.monotonic()
        with pytest.raises(WorkStopped, match="client went away") as e:
            _run(pool, "spin", 30, gone=gone)
        assert e.value.status == 499 and time.monotonic() - t0 < 10
        assert pool.restarts == 1
    finally:
        pool.close()


def test_healthz_reports_a_stuck_worker(client):
    pool = client.app.state.pool
    w = pool._all[0]
    w.busy_since, w.budget = time.monotonic() - 60, 1.0   # busy far past its budget
    try:
        health = client.get("/healthz").json()
    finally:
        w.busy_since = None
    assert health["status"] == "degraded"
    assert health["workers"]["stuck"] and health["workers"]["stuck"][0]["pid"] == w.pid


def test_thread_mode_reports_work_running_past_the_limit():
    import threading

    from fmest.serve.workers import ThreadWork

    work = ThreadWork(0.05)
    release = threading.Event()
    token = work.start()
    time.sleep(0.1)
    assert work.health()["stuck"] and work.health()["busy"] == 1
    work.end(token)
    release.set()
    assert work.health() == {"mode": "threads", "busy": 0, "stuck": []}


def test_a_worker_that_cannot_start_is_named():
    pool = WorkerPool(1, WorkerConfig(allow_paths=("/no/such/dir",)), budget_seconds=30)
    try:
        with pytest.raises(WorkStopped, match="could not start") as e:
            _run(pool, "spin", 0.01)
        assert e.value.status == 500 and "allow-path" in pool.health()["start_error"]
    finally:
        pool.close()
