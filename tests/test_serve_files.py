"""``fmest serve`` driven by a hostile client: it reads no file a request names unless it was
started with ``--allow-path DIR``, and then only files whose real path lies under DIR; every
refusal is the same body whether the path exists or not (:mod:`fmest.serve.files`). JSON
bodies nested too deeply or with huge integers are 422 on ``body``, not server errors."""

from __future__ import annotations

import argparse
import builtins
import json
import os
from pathlib import Path
from typing import Any, Callable

import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install 'fmest[serve]'")
pytest.importorskip("httpx", reason="needs the serve extra")

from fastapi.testclient import TestClient  # noqa: E402

from fmest import cli  # noqa: E402
from fmest.errors import FmestError  # noqa: E402
from fmest.serve import add_arguments, run_command  # noqa: E402
from fmest.serve.app import create_app  # noqa: E402
from fmest.serve.inputs import MAX_INT_DIGITS, MAX_JSON_DEPTH  # noqa: E402

ESTIMATE_INPUT = Path(__file__).parent / "data" / "configs" / "fm-training-estimator" / \
    "estimate_input.json"
TINY = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688,
        "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
        "vocab_size": 1000, "max_position_embeddings": 512, "tie_word_embeddings": False}
#: a marker in every hostile path, so a test can see whether the server looked at one
MARKER = "fmest-hostile-7f3a"


def _estimate_input(dataset: Any = None, model: Any = None) -> dict:
    body = json.loads(ESTIMATE_INPUT.read_text())
    if dataset is not None:
        body["job_configs"][0]["data"]["dataset"] = dataset
    if model is not None:
        body["job_configs"][0]["fm"]["base_model_path"] = model
    return body


#: request bodies naming a path P, and the field the refusal names
BODIES: dict[str, tuple[Callable[[str], dict], str]] = {
    "model": (lambda p: {"model": p, "gpu": "H100"}, "model"),
    "job-model": (lambda p: {"model": p, "training": {"seq_len": 1024}}, "model"),
    "input-model": (lambda p: {"input": {"model": p}}, "model"),
    "dataset": (lambda p: {"model": "Llama-2-7b-hf", "dataset": p}, "dataset"),
    "job-dataset": (lambda p: {"model": "Llama-2-7b-hf", "workload": {"dataset_path": p}},
                    "workload.dataset_path"),
    "learned_model": (lambda p: {"model": "Llama-2-7b-hf", "method": "learned",
                                 "learned_model": p}, "learned_model"),
    "estimate-input-dataset": (lambda p: _estimate_input(dataset=p),
                               "job_configs[0].data.dataset"),
    "estimate-input-model": (lambda p: _estimate_input(model=p),
                             "job_configs[0].fm.base_model_path"),
}


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    """``allowed/`` (a model folder, a config.json, a dataset) and ``outside/`` (the same
    files, not allowed), plus symlinks from ``allowed/`` out of it."""
    root = tmp_path_factory.mktemp("serve-files")
    for name in ("allowed", "outside"):
        folder = root / name
        (folder / "tiny").mkdir(parents=True)
        (folder / "tiny" / "config.json").write_text(json.dumps(TINY))
        (folder / "config.json").write_text(json.dumps(TINY))
        (folder / "d.jsonl").write_text(
            "\n".join(json.dumps({"text": "x" * 400}) for _ in range(10)) + "\n")
    allowed = root / "allowed"
    (allowed / "link.json").symlink_to(root / "outside" / "config.json")
    (allowed / "link-dir").symlink_to(root / "outside" / "tiny")
    (allowed / "passwd.jsonl").symlink_to("/etc/passwd")
    (allowed / "leaky").mkdir()
    (allowed / "leaky" / "config.json").symlink_to(root / "outside" / "config.json")
    return root


@pytest.fixture(scope="module")
def closed() -> TestClient:
    return TestClient(create_app(), raise_server_exceptions=False)


@pytest.fixture(scope="module")
def opened(shared) -> TestClient:
    return TestClient(create_app(allow_paths=(shared / "allowed",)),
                      raise_server_exceptions=False)


def _hostile_paths(shared: Path) -> list[str]:
    return ["/etc/passwd", "/etc", "/etc/shadow", f"/nonexistent/{MARKER}/config.json",
            str(shared / "outside" / "config.json"), str(shared / "outside" / "tiny"),
            str(shared / "outside" / "d.jsonl"), f"{shared}/allowed/../outside/config.json",
            "~/.ssh/id_rsa", "relative/path.jsonl"]


def _refusals(client: TestClient, make: Callable[[str], dict], paths: list[str],
              route: str = "/v1/estimate") -> set[bytes]:
    bodies = set()
    for path in paths:
        response = client.post(route, json=make(path))
        assert response.status_code == 422, (path, response.text)
        bodies.add(response.content)
    return bodies


@pytest.mark.parametrize("name", sorted(BODIES))
@pytest.mark.parametrize("server", ["closed", "opened"])
def test_every_path_outside_the_allow_list_gets_one_body(name, server, shared, request):
    """/etc/passwd, a directory, a file that does not exist, an unreadable one, files beside
    the allowed directory and a ``..`` out of it: byte-identical answers naming the field and
    no path."""
    client = request.getfixturevalue(server)
    make, field = BODIES[name]
    bodies = _refusals(client, make, _hostile_paths(shared))
    assert len(bodies) == 1, bodies
    error = json.loads(bodies.pop())["error"]
    assert error["field"] == field
    assert "etc" not in error["message"] and "exist" not in error["message"]
    assert "--allow-path" in error["message"]


def test_a_hub_id_is_refused_like_a_path(closed, shared):
    """A Hub id and a relative path are the same string; the service decides without the
    disk and without the network, so both get the one refusal."""
    make, _ = BODIES["model"]
    assert len(_refusals(closed, make, ["some-org/some-model", "/etc/passwd",
                                        "./some-org/some-model"])) == 1


def test_registered_names_and_inline_configs_need_no_file(closed):
    for body in ({"model": "Llama-2-7b-hf"}, {"model": "meta-llama/Llama-2-7b-hf"},
                 {"model": "bigscience/bloomz-7b1"},           # an alias of a preset
                 {"model": "my label", "model_config": TINY},  # a label beside the config
                 {"model": "Llama-2-7b-hf", "learned_model": "default", "method": "learned"},
                 _estimate_input()):
        response = closed.post("/v1/estimate", json=body)
        assert response.status_code == 200, (body, response.text)


def test_without_an_allow_list_no_path_is_looked_at(closed, shared, monkeypatch):
    """Without ``--allow-path`` the server never stats nor opens the path a request names,
    whether it exists or not."""
    marked = shared / MARKER
    marked.mkdir(exist_ok=True)
    (marked / "config.json").write_text(json.dumps(TINY))
    (marked / "d.jsonl").write_text(json.dumps({"text": "hello"}) + "\n")
    seen: list[str] = []

    def spy(real):
        def call(path, *args, **kwargs):
            if MARKER in str(path):
                seen.append(str(path))
            return real(path, *args, **kwargs)
        return call

    for module, name in ((os, "stat"), (os, "lstat"), (builtins, "open")):
        monkeypatch.setattr(module, name, spy(getattr(module, name)))
    for make, _field in BODIES.values():
        for path in (str(marked / "config.json"), str(marked), str(marked / "d.jsonl"),
                     f"/nonexistent/{MARKER}"):
            assert closed.post("/v1/estimate", json=make(path)).status_code == 422
    assert seen == []


def _cli_json(argv: list[str], capsys) -> dict:
    capsys.readouterr()
    assert cli.main(["estimate", *argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_files_under_an_allowed_directory_are_read_as_the_cli_reads_them(opened, shared,
                                                                         capsys):
    allowed = shared / "allowed"
    for argv in (["--model", str(allowed / "tiny"), "--gpu", "H100"],
                 ["--model", str(allowed / "config.json"), "--gpu", "H100"],
                 ["--model", "Llama-2-7b-hf", "--dataset", str(allowed / "d.jsonl")]):
        body = {argv[i][2:]: argv[i + 1] for i in range(0, len(argv), 2)}
        response = opened.post("/v1/estimate", json=body)
        assert response.status_code == 200, (body, response.text)
        assert response.json() == _cli_json(argv, capsys)
    counted = opened.post("/v1/estimate", json=_estimate_input(dataset=str(allowed / "d.jsonl")))
    assert counted.status_code == 200, counted.text
    assert counted.json()["input"]["origins"]["workload.dataset_tokens"].startswith(
        "d.jsonl: 10 records, 4,000 characters")


def test_symlinks_out_of_the_allowed_directory_are_refused(opened, shared):
    allowed = shared / "allowed"
    nowhere = f"/nonexistent/{MARKER}"
    for name, links in (("model", [allowed / "link.json", allowed / "link-dir",
                                   allowed / "leaky"]),
                        ("dataset", [allowed / "passwd.jsonl", allowed / "link.json"])):
        make, _ = BODIES[name]
        assert len(_refusals(opened, make, [*map(str, links), nowhere])) == 1


def test_a_tokenizer_is_looked_for_only_beside_a_permitted_model(opened, shared):
    """The dataset counter looks for ``tokenizer.json`` beside the job's model; an inline
    config's label (any string) outside the allow-list is not looked at."""
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"x": 0, "[UNK]": 1},
                                                           unk_token="[UNK]"))
    for name in ("allowed", "outside"):
        tok.save(str(shared / name / "tiny" / "tokenizer.json"))

    def method(model: str) -> str:
        response = opened.post("/v1/estimate", json={
            "model": model, "model_config": TINY,
            "dataset": str(shared / "allowed" / "d.jsonl")})
        assert response.status_code == 200, response.text
        return response.json()["input"]["origins"]["workload.dataset_tokens"]

    assert "tokenizer.json" in method(str(shared / "allowed" / "tiny"))
    assert "characters per token" in method(str(shared / "outside" / "tiny"))


def test_the_plan_route_reads_no_named_file_either(closed, shared):
    if not closed.get("/healthz").json()["plan"]:
        pytest.skip("no planner installed")
    for name in ("model", "dataset", "learned_model"):
        make, field = BODIES[name]
        bodies = _refusals(closed, make, _hostile_paths(shared), route="/v1/plan")
        assert len(bodies) == 1
        assert json.loads(bodies.pop())["error"]["field"] == field


def test_allow_path_is_an_option_of_fmest_serve(shared, monkeypatch):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    allowed = str(shared / "allowed")
    args = parser.parse_args(["--allow-path", allowed, "--allow-path", str(shared)])
    assert args.allow_path == [allowed, str(shared)]
    assert parser.parse_args([]).allow_path == []
    uvicorn = pytest.importorskip("uvicorn")
    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: served.append(app))
    assert run_command(parser.parse_args(["--allow-path", allowed]), None) == 0
    client = TestClient(served[0], raise_server_exceptions=False)
    assert client.post("/v1/estimate", json={"model": f"{allowed}/tiny"}).status_code == 200
    with pytest.raises(FmestError, match="--allow-path .*: not a directory"):
        create_app(allow_paths=(str(shared / "allowed" / "config.json"),))


def _nested(depth: int) -> bytes:
    return b'{"a": ' * (depth - 1) + b"{}" + b"}" * (depth - 1)


@pytest.mark.parametrize("raw", [
    b"[" * 200_000 + b"]" * 200_000,
    _nested(MAX_JSON_DEPTH + 1),
    b'{"model": "Llama-2-7b-hf", "training": {"seq_len": ' + b"[" * 2000 + b"]" * 2000 + b"}}",
], ids=["200000-deep", "one-over-the-limit", "deep-inside-a-job"])
def test_deep_json_is_refused(closed, raw):
    response = closed.post("/v1/estimate", content=raw)
    assert response.status_code == 422, response.text
    assert response.json()["error"] == {
        "field": "body", "accepted": [],
        "message": f"JSON nested deeper than {MAX_JSON_DEPTH} levels (the limit)"}


def test_json_at_the_depth_limit_is_parsed(closed):
    response = closed.post("/v1/estimate", content=_nested(MAX_JSON_DEPTH))
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "a"   # an unknown field, not the depth


@pytest.mark.parametrize("digits,sign", [(5000, b""), (MAX_INT_DIGITS + 1, b"-"),
                                         (4301, b"")])
def test_huge_integers_are_refused(closed, digits, sign):
    raw = b'{"model": "Llama-2-7b-hf", "seq_len": ' + sign + b"9" * digits + b"}"
    response = closed.post("/v1/estimate", content=raw)
    assert response.status_code == 422, response.text
    assert response.json()["error"] == {
        "field": "body", "accepted": [],
        "message": f"an integer of {digits} digits; the limit is {MAX_INT_DIGITS} digits"}


def test_an_integer_within_the_limit_reaches_its_flag(closed):
    raw = b'{"model": "Llama-2-7b-hf", "seq_len": ' + b"9" * MAX_INT_DIGITS + b"}"
    response = closed.post("/v1/estimate", content=raw)
    assert response.status_code == 422
    assert response.json()["error"]["field"] != "body"
