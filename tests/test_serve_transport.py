"""``fmest serve`` for others (docs/serve.md, "Running it for others"): the Host allow-list
(421), the Origin check (403), JSON-only POST bodies (415), CORS only for named origins, the
service's bounds on plans and jobs (422 naming the field and the bound), the bounded model
cache, and the uvicorn connection settings ``fmest serve`` passes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'fmest[serve]'")
pytest.importorskip("httpx", reason="needs the serve extra")

from fastapi.testclient import TestClient  # noqa: E402

from fmest import cli  # noqa: E402
from fmest.serve.app import JOBS_BOUND, create_app  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ESTIMATE_INPUT = ROOT / "tests" / "data" / "configs" / "fm-training-estimator" / \
    "estimate_input.json"
BODY = {"model": "Llama-2-7b-hf", "gpu": "A100-80GB"}


@pytest.fixture(scope="module")
def app():
    return create_app()


@pytest.fixture(scope="module")
def client(app):
    return TestClient(app, raise_server_exceptions=False)


def _error(response, status: int, field: str) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["field"] == field
    return error


# -- Host ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "localhost.evil.example",
                                  "127.0.0.1.nip.io:8000", "0.0.0.0:8000"])
def test_default_allow_list_refuses_a_foreign_host(client, host):
    """DNS rebinding: a page on a name its attacker re-points at 127.0.0.1 sends that name."""
    for response in (client.post("/v1/estimate", json=BODY, headers={"host": host}),
                     client.get("/v1/models", headers={"host": host}),
                     client.get("/", headers={"host": host})):
        error = _error(response, 421, "host")
        assert "--allow-host" in error["message"]
        assert error["accepted"] == ["127.0.0.1", "::1", "localhost"]


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:8000", "localhost:8000",
                                  "LocalHost.:8000", "[::1]:8000"])
def test_default_allow_list_takes_the_loopback_names(client, host):
    assert client.post("/v1/estimate", json=BODY, headers={"host": host}).status_code == 200


def test_allow_hosts_is_configurable():
    client = TestClient(create_app(allow_hosts=["fmest.example.com"]))
    assert client.get("/healthz", headers={"host": "fmest.example.com:443"}).status_code == 200
    # the list given replaces the loopback names
    _error(client.get("/healthz", headers={"host": "localhost:8000"}), 421, "host")


def test_the_address_a_connection_came_in_on_is_a_host():
    """``--host 0.0.0.0`` reached as http://192.0.2.5:8000/: an address cannot be re-pointed.
    (TestClient gives the app its base URL's host as the server address, as uvicorn gives the
    socket's.)"""
    client = TestClient(create_app(), base_url="http://192.0.2.5:8000")
    assert client.get("/healthz").status_code == 200
    assert client.get("/healthz", headers={"origin": "http://192.0.2.5:8000"}).status_code == 200
    _error(client.get("/healthz", headers={"host": "192.0.2.6:8000"}), 421, "host")


# -- Origin --------------------------------------------------------------------------------------

@pytest.mark.parametrize("origin", ["http://evil.example", "https://evil.example:8000", "null",
                                    "http://localhost.evil.example", "file://", "chrome-extension://abc"])
def test_a_foreign_origin_is_refused(client, origin):
    for response in (client.post("/v1/estimate", json=BODY, headers={"origin": origin}),
                     client.get("/v1/gpus", headers={"origin": origin})):
        error = _error(response, 403, "origin")
        assert "--cors-origin" in error["message"]
        assert "http(s)://[::1][:port]" in error["accepted"]
        assert "access-control-allow-origin" not in response.headers


@pytest.mark.parametrize("origin", ["http://localhost:8000", "http://127.0.0.1:3000",
                                    "https://localhost", "http://[::1]:8000"])
def test_the_same_origin_and_local_origins_are_served(client, origin):
    response = client.post("/v1/estimate", json=BODY,
                           headers={"host": "localhost:8000", "origin": origin})
    assert response.status_code == 200
    assert "access-control-allow-origin" not in response.headers  # CORS is off


# -- Content-Type ------------------------------------------------------------------------------

@pytest.mark.parametrize("content_type", ["text/plain", "text/plain;charset=UTF-8",
                                          "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x",
                                          "application/jsonp"])
def test_a_post_body_that_is_not_json_is_415(client, content_type):
    """The content types a page on another site may post without a CORS preflight."""
    for path in ("/v1/estimate", "/v1/plan"):
        response = client.post(path, content=json.dumps(BODY),
                               headers={"content-type": content_type})
        error = _error(response, 415, "content-type")
        assert error["accepted"] == ["application/json"]


@pytest.mark.parametrize("content_type", ["application/json", "Application/JSON; charset=utf-8",
                                          None])
def test_a_json_body_is_read(client, content_type):
    """Declared JSON, or nothing declared (a script; a browser posting from elsewhere still
    sends Origin)."""
    headers = {"content-type": content_type} if content_type else {}
    response = client.post("/v1/estimate", content=json.dumps(BODY).encode(), headers=headers)
    assert response.status_code == 200


def test_the_page_posts_json():
    """The page's own requests pass the check (tests/test_browser.py runs them in Chromium)."""
    script = (ROOT / "core" / "fmest" / "serve" / "static" / "app.js").read_text()
    posts = [m.start() for m in re.finditer(r'method:\s*"POST"', script)]
    assert len(posts) >= 2  # /v1/estimate and /v1/plan
    for start in posts:
        call = script[start:script.index("})", start)]
        assert re.search(r'"Content-Type":\s*"application/json"', call), call


# -- CORS --------------------------------------------------------------------------------------

PREFLIGHT = {"access-control-request-method": "POST",
             "access-control-request-headers": "content-type"}


def test_cors_is_off_by_default(client):
    response = client.options("/v1/estimate", headers={"origin": "https://app.example.com",
                                                       **PREFLIGHT})
    _error(response, 403, "origin")
    assert not any(h.startswith("access-control-") for h in response.headers)


def test_cors_serves_exactly_the_named_origins():
    client = TestClient(create_app(cors_origins=["HTTPS://App.Example.com:443/"]),
                        raise_server_exceptions=False)
    allowed = {"origin": "https://app.example.com"}
    response = client.options("/v1/estimate", headers={**allowed, **PREFLIGHT})
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == "https://app.example.com"
    assert "POST" in response.headers["access-control-allow-methods"]
    response = client.post("/v1/estimate", json=BODY, headers=allowed)
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == "https://app.example.com"
    # its errors are readable by that page too
    response = client.post("/v1/estimate", json={"model": "Llama-2-7b-hf", "zero": 7},
                           headers=allowed)
    assert response.status_code == 422
    assert response.headers["access-control-allow-origin"] == "https://app.example.com"
    for other in ("https://app.example.com:8443", "http://app.example.com",
                  "https://evil.example"):
        response = client.post("/v1/estimate", json=BODY, headers={"origin": other})
        _error(response, 403, "origin")
        assert "access-control-allow-origin" not in response.headers


def test_refusals_are_in_the_openapi_schema(client):
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/estimate", "/v1/plan"):
        assert {"403", "415", "421", "413", "422"} <= set(paths[path]["post"]["responses"])
    assert {"403", "421"} <= set(paths["/v1/models"]["get"]["responses"])


# -- bounded work ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def planner(app):
    from fmest.serve.plan import plan_available

    if not plan_available(app.state.service):
        pytest.skip("fmest plan is not installed")


@pytest.mark.parametrize("flag,value,bound", [("top", 100000, 100), ("refine", 1000, 10),
                                              ("top", "1e5", 100)])
def test_plan_work_is_bounded(client, planner, flag, value, bound):
    from fmest.serve.plan import PLAN_BOUNDS

    assert {b.path: b.maximum for b in PLAN_BOUNDS}[flag] == bound
    response = client.post("/v1/plan", json=dict(BODY, **{flag: value}))
    error = _error(response, 422, flag)
    assert f"bound {bound}:" in error["message"]


def test_plan_at_the_bounds_is_served(client, planner):
    response = client.post("/v1/plan", json=dict(BODY, gpus="H100", max_gpus=8, top=100,
                                                 refine=10))
    assert response.status_code == 200, response.text
    assert 0 < len(response.json()["plans"]) <= 100


def test_an_estimate_input_with_too_many_jobs_is_422(client):
    document = json.loads(ESTIMATE_INPUT.read_text())
    one = document["job_configs"][0]
    response = client.post("/v1/estimate", json=dict(document, job_configs=[one] * 1000))
    error = _error(response, 422, "job_configs")
    assert f"bound {JOBS_BOUND.maximum:g}:" in error["message"]
    assert "(got 1000)" in error["message"]
    for key in ("jobConfigs", "input"):  # the camelCase key, and the job under "input"
        body = ({"input": dict(document, job_configs=[one] * 65)} if key == "input"
                else {"estimator_metadata": document["estimator_metadata"], key: [one] * 65})
        _error(client.post("/v1/estimate", json=body), 422, "job_configs")
    response = client.post("/v1/estimate", json=dict(document, job_configs=[one] * 64))
    assert response.status_code == 200
    assert len(response.json()["jobs"]) == 64


# -- the model cache -----------------------------------------------------------------------------

LLAMA = json.loads((ROOT / "core" / "fmest" / "models" / "presets" / "llama-2-7b-hf.json")
                   .read_text())["config"]


def _config(i: int, **more) -> dict:
    return dict(LLAMA, vocab_size=32000 + i, **more)


def test_the_model_cache_stays_bounded_after_300_inline_configs():
    from fmest import engine as engine_module
    from fmest.job import Job
    from fmest.testing import new_engine

    engine = new_engine()
    first = Job(model="inline", model_config=_config(0))
    spec = engine.resolve_model(first)
    for i in range(1, 300):
        engine.resolve_model(Job(model="inline", model_config=_config(i)))
        if i % 50 == 0:  # kept in use, so kept
            assert engine.resolve_model(first) is spec
        assert len(engine._model_cache) <= engine_module.MODEL_CACHE_ENTRIES
    assert len(engine._model_cache) == engine_module.MODEL_CACHE_ENTRIES
    assert engine.resolve_model(first) is spec
    # the least recently used went first
    assert engine.resolve_model(Job(model="inline", model_config=_config(1))).vocab_size == 32001
    assert engine._model_cache_chars == sum(len(k[1] or "") for k in engine._model_cache)


def test_the_model_cache_bounds_the_config_text_it_keeps(monkeypatch):
    from fmest import engine as engine_module
    from fmest.job import Job
    from fmest.testing import new_engine

    labels = {str(k): f"label_{k}" for k in range(2000)}  # ~40 KB of config text each
    monkeypatch.setattr(engine_module, "MODEL_CACHE_CONFIG_CHARS", 200_000)
    engine = new_engine()
    for i in range(20):
        engine.resolve_model(Job(model="inline", model_config=_config(i, id2label=labels)))
        assert engine._model_cache_chars <= 200_000
    assert 0 < len(engine._model_cache) < 20
    monkeypatch.setattr(engine_module, "MODEL_CACHE_CONFIG_CHARS", 1000)
    big = Job(model="inline", model_config=_config(99, id2label=labels))
    assert engine.resolve_model(big).vocab_size == 32099  # answered, not kept
    assert all(k[1] is None or len(k[1]) <= 200_000 for k in engine._model_cache)


# -- fmest serve -----------------------------------------------------------------------------------

def test_fmest_serve_passes_its_settings(monkeypatch):
    import uvicorn

    from fmest.serve import (
        DEFAULT_H11_MAX_INCOMPLETE_EVENT_SIZE,
        DEFAULT_LIMIT_CONCURRENCY,
        DEFAULT_TIMEOUT_KEEP_ALIVE_SECONDS,
    )

    calls: list = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append((app, kw)))
    from uvicorn.protocols.http.h11_impl import H11Protocol

    assert cli.main(["serve", "--host", "0.0.0.0", "--allow-host", "Fmest.Example.com.",
                     "--cors-origin", "https://app.example.com", "--workers", "0",
                     "--limit-concurrency", "8"]) == 0
    (app, settings), = calls
    protocol = settings.pop("http")   # h11 with the request-head deadline (serve/protocol.py)
    assert issubclass(protocol, H11Protocol) and protocol.header_timeout_seconds == 10
    assert settings == {"host": "0.0.0.0", "port": 8000, "log_level": "info",
                        "timeout_keep_alive": DEFAULT_TIMEOUT_KEEP_ALIVE_SECONDS,
                        "limit_concurrency": 8,
                        "h11_max_incomplete_event_size": DEFAULT_H11_MAX_INCOMPLETE_EVENT_SIZE}
    assert (DEFAULT_TIMEOUT_KEEP_ALIVE_SECONDS, DEFAULT_LIMIT_CONCURRENCY,
            DEFAULT_H11_MAX_INCOMPLETE_EVENT_SIZE) == (5, 2048, 16384)
    assert app.state.service.engine.plugin_timeout == 60.0   # half of the 120 s --timeout
    client = TestClient(app)
    for host in ("fmest.example.com", "localhost:8000", "0.0.0.0:8000"):
        assert client.get("/healthz", headers={"host": host}).status_code == 200
    assert client.get("/healthz", headers={"host": "evil.example"}).status_code == 421
    response = client.get("/healthz", headers={"origin": "https://app.example.com"})
    assert response.headers["access-control-allow-origin"] == "https://app.example.com"


@pytest.mark.parametrize("argv", [["--cors-origin", "*"], ["--cors-origin", "app.example.com"],
                                  ["--cors-origin", "https://app.example.com/path"],
                                  ["--allow-host", "*"], ["--allow-host", "http://x/"],
                                  ["--limit-concurrency", "0"]])
def test_fmest_serve_refuses_malformed_settings(argv, monkeypatch, capsys):
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: pytest.fail("served"))
    with pytest.raises(SystemExit) as done:
        cli.main(["serve", *argv])
    assert done.value.code == 2
    assert argv[0] in capsys.readouterr().err
