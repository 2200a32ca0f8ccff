"""``fmest serve``: POST /v1/estimate answers exactly what ``fmest estimate --format json``
prints, errors are JSON with the field and accepted values, limits hold, listings match the
CLI, concurrent requests get the sequential answers, and the OpenAPI schema holds for generated
requests (schemathesis)."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'fmest[serve]'")
pytest.importorskip("httpx", reason="needs the serve extra")

from fastapi.testclient import TestClient  # noqa: E402

from fmest import cli  # noqa: E402
from fmest.serve.app import INPUT_SOURCE, create_app  # noqa: E402

DATA = Path(__file__).parent / "data"
ESTIMATE_INPUT = DATA / "configs" / "fm-training-estimator" / "estimate_input.json"
JOB = {"model": "meta-llama/Llama-2-7b-hf",
       "training": {"seq_len": 4096, "micro_batch_size": 2, "activation_checkpointing": "full"},
       "parallelism": {"zero_stage": 3}, "hardware": {"gpu": "A100-80GB", "gpus_per_node": 8},
       "workload": {"dataset_tokens": 2e9}}


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app(), raise_server_exceptions=False)


def _cli_json(argv, capsys) -> dict:
    capsys.readouterr()
    assert cli.main(["estimate", *argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("body,argv", [
    ({"model": "Llama-2-7b-hf", "gpu": "A100-80GB", "micro_batch": 2, "grad_checkpoint": True,
      "lora": True, "lora_target_modules": ["q_proj", "v_proj", "o_proj"]},
     ["--model", "Llama-2-7b-hf", "--gpu", "A100-80GB", "--micro-batch", "2",
      "--grad-checkpoint", "true", "--lora", "--lora-target-modules", "q_proj", "v_proj",
      "o_proj"]),
    (JOB, "job"),
    ({"input": JOB, "per_device_batch": 1, "zero": 2, "dataset_tokens": "300M"},
     ["--per-device-batch", "1", "--zero", "2", "--dataset-tokens", "300M"]),
    (json.loads(ESTIMATE_INPUT.read_text()), "estimate_input"),
    (dict(json.loads(ESTIMATE_INPUT.read_text()), gpu="H100", seq_len=1024),
     ["--gpu", "H100", "--seq-len", "1024"]),
    (dict(json.loads(ESTIMATE_INPUT.read_text()), job_configs=2 * json.loads(
        ESTIMATE_INPUT.read_text())["job_configs"]), "estimate_input"),
], ids=["flags", "job", "job-and-flags", "estimate-input", "estimate-input-and-flags",
        "estimate-input-two-jobs"])
def test_estimate_is_the_cli_json(client, body, argv, tmp_path, capsys):
    if argv == "job" or argv == "estimate_input":
        argv = []
    sections = ("estimator_metadata", "job_configs", *(k for k in JOB if k != "model"))
    job_input = body.get("input") if "input" in body else {
        k: v for k, v in body.items() if k in sections}
    if "input" not in body and job_input and "job_configs" not in job_input:
        job_input = dict(job_input, model=body["model"])
    if job_input:
        path = tmp_path / "job.json"
        path.write_text(json.dumps(job_input))
        argv = ["-f", str(path), *argv]
    response = client.post("/v1/estimate", json=body)
    assert response.status_code == 200, response.text
    expected = _cli_json(argv, capsys)
    if job_input:  # messages name the input: the file for -f, the request body for the API
        expected = json.loads(json.dumps(expected).replace(str(tmp_path / "job.json"),
                                                           INPUT_SOURCE))
    assert response.json() == expected


def test_estimate_input_reports_ignored_fields(client):
    body = json.loads(ESTIMATE_INPUT.read_text())
    warnings = client.post("/v1/estimate", json=body).json()["warnings"]
    assert any(w.startswith(f"input field ignored: {INPUT_SOURCE}: estimator.base_data_path")
               for w in warnings), warnings


@pytest.mark.parametrize("body,status,field,accepted", [
    ({"model": "Llama-2-7b-hf", "dtype": "fp7"}, 422, "dtype", ["fp32", "bf16", "fp16", "fp8"]),
    ({"model": "Llama-2-7b-hf", "zero": 4}, 422, "zero", [0, 1, 2, 3]),
    ({"model": "Llama-2-7b-hf", "seq_len": 0}, 422, "seq_len", []),
    ({"model": "Llama-2-7b-hf", "tp": 3}, 422, "parallelism.tp", [1, 2, 4, 8, 16, 32]),
    ({"model": "Llama-2-7b-hf", "gpu": "A100-90GB"}, 422, "hardware.gpu", None),
    ({"model": "Llama-2-7b-hf", "flashattn": "perhaps"}, 422, "flashattn", [True, False]),
    ({"model": "Llama-2-7b-hf", "training": {"seq_len": "long"}}, 422, "training.seq_len", []),
    ({"model": "Llama-2-7b-hf", "trainig": {}}, 422, "trainig", None),
    ({"model": "Llama-2-7b-hf", "input_file": "/etc/passwd"}, 422, "input_file", None),
    ({"model": "Llama-2-7b-hf", "lora_target_modules": []}, 422, "lora_target_modules", []),
    ({"per_device_batch": 2}, 422, "model", []),
    ({"model": "Llama-2-7b-hf", "grad_checkpoint": "partly"}, 422, "grad_checkpoint",
     ["none", "full", "selective", "true", "false"]),
    ({"input": [1, 2]}, 422, "input", []),
    ([1, 2], 422, "body", []),
])
def test_bad_input_is_a_json_error_naming_the_field(client, body, status, field, accepted):
    response = client.post("/v1/estimate", json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"field", "message", "accepted"}
    assert error["field"] == field
    assert error["message"] and "Traceback" not in error["message"]
    if accepted is not None:
        assert error["accepted"][:len(accepted)] == accepted


def test_malformed_and_oversized_bodies():
    small = TestClient(create_app(max_body_bytes=200), raise_server_exceptions=False)
    response = small.post("/v1/estimate", content=b'{"model": ')
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "body"
    assert "malformed JSON at line 1" in response.json()["error"]["message"]
    response = small.post("/v1/estimate", content=b'{"model": "Llama-2-7b-hf", "mfu": NaN}')
    assert response.status_code == 422
    assert response.json()["error"]["message"].startswith("NaN is not a JSON number")
    response = small.post("/v1/estimate", json={"model": "Llama-2-7b-hf", "dataset": "x" * 300})
    assert response.status_code == 413
    assert response.json()["error"] == {"field": "body", "message":
                                        "request body over the limit of 200 bytes",
                                        "accepted": []}


def test_time_limit_answers_504():
    from fmest.hookspecs import hookimpl
    from fmest.testing import new_engine

    class SlowMemory:
        """A memory plugin that takes longer than the service's time limit."""

        @hookimpl
        def fmest_estimate_memory(self, job, ctx):
            time.sleep(1.0)

    app = create_app(new_engine((SlowMemory(), "slow")), timeout_seconds=0.2)
    response = TestClient(app).post("/v1/estimate", json={"model": "Llama-2-7b-hf"})
    assert response.status_code == 504
    assert response.json()["error"]["field"] == "request"
    assert "limit of 0.2 s" in response.json()["error"]["message"]


def test_a_bug_is_a_500_without_traceback(monkeypatch):
    from fmest.serve import app as app_module

    def broken(*args):
        raise KeyError("secret internal detail")

    monkeypatch.setattr(app_module, "estimate_response", broken)
    response = TestClient(create_app(), raise_server_exceptions=False).post(
        "/v1/estimate", json={"model": "Llama-2-7b-hf"})
    assert response.status_code == 500
    assert response.json()["error"]["message"] == ("internal error (KeyError); the server log "
                                                   "has the details")


def test_listings_match_the_cli(client, capsys):
    for name in ("models", "gpus"):
        capsys.readouterr()
        assert cli.main([name, "--format", "json"]) == 0
        assert client.get(f"/v1/{name}").json() == json.loads(capsys.readouterr().out)
    prices = client.get("/v1/prices").json()
    assert prices and all(p["usd_per_gpu_hour"] == pytest.approx(
        p["usd_per_instance_hour"] / p["gpus_per_instance"]) for p in prices)
    capsys.readouterr()
    assert cli.main(["stacks", "--json"]) == 0
    stacks = client.get("/v1/stacks").json()
    assert stacks == json.loads(capsys.readouterr().out) and stacks
    health = client.get("/healthz").json()
    assert health["status"] == "ok" and "memory_theory" in health["plugins"]


def test_plan_is_501_without_a_planner(client):
    from fmest.serve.plan import plan_available

    response = client.post("/v1/plan", json={"model": "Llama-2-7b-hf"})
    if plan_available(client.app.state.service):
        assert response.status_code in (200, 422)
    else:
        assert response.status_code == 501
        assert "no planner" in response.json()["error"]["message"]
        assert response.json()["error"]["field"] is None


def _plan_engine():
    """The installed plugins plus ``fmest plan`` (registered here until it is a default)."""
    pytest.importorskip("fmest.plan")
    from fmest import plan

    if not hasattr(plan, "plan_output"):
        pytest.skip("this fmest.plan has no plan_output")
    from fmest.engine import Engine

    engine = Engine()
    if "plan" not in engine.commands():
        import fmest.default_plugins.plan as plan_plugin

        engine.pm.register(plan_plugin, name="plan")
    return engine


def test_plan_is_the_cli_json(capsys):
    engine = _plan_engine()
    client = TestClient(create_app(engine))
    assert client.get("/healthz").json()["plan"] is True
    body = {"model": "meta-llama/Llama-2-7b-hf", "seq_len": 4096, "dataset_tokens": 1e9,
            "max_gpus": 16, "gpus": "A100-80GB,H100", "top": 12}
    response = client.post("/v1/plan", json=body)
    assert response.status_code == 200, response.text
    capsys.readouterr()
    assert cli.main(["plan", "--model", "meta-llama/Llama-2-7b-hf", "--seq-len", "4096",
                     "--dataset-tokens", "1e9", "--max-gpus", "16", "--gpus", "A100-80GB,H100",
                     "--top", "12", "--format", "json"], engine=engine) == 0
    expected = json.loads(capsys.readouterr().out)
    got = response.json()
    for timing in ("seconds", "configs_per_second"):  # wall-clock of the search itself
        expected.pop(timing), got.pop(timing)
    assert got == expected and any(p["pareto"] for p in got["plans"])
    bad = client.post("/v1/plan", json=dict(body, export="deepspeed"))
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "export"


def test_unknown_route_is_a_json_404(client):
    response = client.get("/v1/nothing")
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "Not Found"


def test_page_and_its_assets_are_served_offline(client):
    page = client.get("/")
    assert page.status_code == 200 and "/static/app.js" in page.text
    for asset in ("/static/app.js", "/static/app.css"):
        text = client.get(asset).text
        assert "http://" not in text and "https://" not in text  # nothing from a CDN


def test_concurrent_requests_get_the_sequential_answers():
    """A cold service (empty model caches) under 16 threads answers every request as a
    fresh engine does one at a time."""
    import httpx

    from fmest.serve.local import serving

    bodies = [{"model": model, "per_device_batch": batch, "gpu": gpu}
              for model in ("Llama-2-7b-hf", "Qwen/Qwen2.5-7B", "mistralai/Mixtral-8x7B-v0.1")
              for batch, gpu in ((1, "A100-80GB"), (3, "H100"), (8, "L40S"))]
    sequential = TestClient(create_app())
    expected = [sequential.post("/v1/estimate", json=b).json() for b in bodies]
    with serving(create_app()) as url, httpx.Client(base_url=url, timeout=60) as http:
        with ThreadPoolExecutor(16) as pool:
            got = list(pool.map(lambda i: http.post("/v1/estimate", json=bodies[i % len(bodies)]),
                                range(len(bodies) * 6)))
    for i, response in enumerate(got):
        assert response.status_code == 200
        assert response.json() == expected[i % len(bodies)]


def test_openapi_schema_holds_for_generated_requests():
    """Property test: schemathesis generates requests from the served OpenAPI schema; every
    answer is documented, conforms to its schema, and no request makes a server error."""
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    app = create_app()
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    checks = [not_a_server_error, status_code_conformance, content_type_conformance,
              response_schema_conformance]
    operations = [op.ok() for op in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/v1/estimate", "/v1/plan", "/v1/models",
                                              "/v1/gpus", "/v1/prices", "/v1/stacks",
                                              "/healthz"}
    from fmest.serve.plan import plan_available

    for operation in operations:
        examples = 100 if operation.path == "/v1/estimate" else 3
        # without a planner /v1/plan answers its documented 501 (test_plan_is_501_...)
        these = (checks[1:] if operation.path == "/v1/plan"
                 and not plan_available(app.state.service) else checks)

        @settings(max_examples=examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def run(case):
            case.call_and_validate(checks=these)  # noqa: B023  (run() runs in this iteration)

        run()


def test_serve_is_a_cli_command(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["serve", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "--host" in out and "--port" in out and "--max-body-bytes" in out
