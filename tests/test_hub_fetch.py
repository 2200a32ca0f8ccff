"""fmest.models.hub: a Hub id that is no preset and no local path is fetched from
``$HF_ENDPOINT/<id>/resolve/main/config.json`` (a local http.server here), cached, capped in size
and time, refused offline, and its failures name the model with the near presets."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from fmest.errors import InputError, UnknownNameError
from fmest.models import hub
from fmest.models.local import resolve_model

CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 256,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "intermediate_size": 512, "vocab_size": 1000, "tie_word_embeddings": False}
# 2 layers x (q 256x256 + k,v 256x128 x2 + o 256x256 + 3 x 256x512 + 2 norms) + norm + emb + head
EXPECTED = 2 * (256 * 256 * 2 + 2 * 256 * 128 + 3 * 256 * 512 + 2 * 256) + 256 + 2 * 1000 * 256


class _Handler(http.server.BaseHTTPRequestHandler):
    routes: dict = {}
    hits: list = []

    def do_GET(self):  # noqa: N802
        self.hits.append((self.path, self.headers.get("Authorization")))
        kind, payload = self.routes.get(self.path, ("404", b""))
        if kind == "sleep":
            time.sleep(payload)
            kind, payload = "ok", json.dumps(CONFIG).encode()
        if kind == "404":
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if kind != "nolength":
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *a):
        pass


@pytest.fixture
def server(monkeypatch, tmp_path):
    _Handler.routes, _Handler.hits = {}, []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{srv.server_address[1]}")
    monkeypatch.setenv("FMEST_CACHE_DIR", str(tmp_path / "cache"))
    for k in ("HF_HUB_OFFLINE", "FMEST_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
              "FMEST_HUB_TIMEOUT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr("fmest.models.local._from_hf_cache", lambda *a: None)
    yield _Handler
    srv.shutdown()
    srv.server_close()


def _route(h, model_id, kind, payload):
    h.routes[f"/{model_id}/resolve/main/config.json"] = (kind, payload)


def test_fetch_then_cache_hit(server, monkeypatch):
    _route(server, "acme/tiny-llama", "ok", json.dumps(CONFIG).encode())
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    spec = resolve_model("acme/tiny-llama")
    assert spec.param_counts().total == EXPECTED
    assert spec.source.startswith("fetched from the Hugging Face Hub: http://127.0.0.1:")
    assert server.hits == [("/acme/tiny-llama/resolve/main/config.json", "Bearer hf_secret")]
    # second lookup: the cache, no request; works offline too
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    again = resolve_model("acme/tiny-llama")
    assert again.source.startswith("Hugging Face Hub cache ")
    assert again.param_counts().total == EXPECTED
    assert len(server.hits) == 1
    assert (hub.cache_dir() / "acme--tiny-llama" / "main" / "config.json").is_file()


def test_concurrent_lookups_fetch_once(server):
    _route(server, "acme/slow", "sleep", 0.3)
    out, errs = [], []

    def go():
        try:
            out.append(resolve_model("acme/slow").param_counts().total)
        except Exception as e:  # pragma: no cover - reported below
            errs.append(e)

    ts = [threading.Thread(target=go) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(10)
    assert not errs and out == [EXPECTED] * 4
    assert len(server.hits) == 1


def test_size_cap(server, monkeypatch):
    monkeypatch.setattr(hub, "MAX_BYTES", 1000)
    big = json.dumps({**CONFIG, "pad": "x" * 5000}).encode()
    _route(server, "acme/big", "ok", big)
    _route(server, "acme/big-chunked", "nolength", big)
    for mid in ("acme/big", "acme/big-chunked"):
        with pytest.raises(UnknownNameError) as ei:
            resolve_model(mid)
        assert "1,000-byte cap" in str(ei.value)
        assert "the Hub lookup failed" in str(ei.value)
    assert not hub.cache_dir().exists() or not any(hub.cache_dir().rglob("config.json"))


def test_timeout(server, monkeypatch):
    _route(server, "acme/stuck", "sleep", 3.0)
    monkeypatch.setenv("FMEST_HUB_TIMEOUT", "0.5")
    t = time.perf_counter()
    with pytest.raises(UnknownNameError) as ei:
        resolve_model("acme/stuck")
    assert time.perf_counter() - t < 2.5
    assert "within 0.5 s" in str(ei.value)


def test_bad_timeout_env(server, monkeypatch):
    monkeypatch.setenv("FMEST_HUB_TIMEOUT", "soon")
    with pytest.raises(InputError) as ei:
        resolve_model("acme/whatever")
    assert ei.value.field == "FMEST_HUB_TIMEOUT"


def test_404_lists_near_presets(server):
    with pytest.raises(UnknownNameError) as ei:
        resolve_model("someone/Qwen3-8C")
    msg = str(ei.value)
    assert "not a preset, not a local config.json, and the Hub lookup failed: HTTP 404" in msg
    assert any("qwen3-8b" in a.lower() for a in ei.value.accepted)
    assert ei.value.field == "model"


def test_not_json(server):
    _route(server, "acme/html", "ok", b"<html>login</html>")
    with pytest.raises(UnknownNameError) as ei:
        resolve_model("acme/html")
    assert "not valid JSON" in str(ei.value)


@pytest.mark.parametrize("var", ["HF_HUB_OFFLINE", "FMEST_OFFLINE"])
def test_offline_env_sends_nothing(server, monkeypatch, var):
    _route(server, "acme/tiny-llama", "ok", json.dumps(CONFIG).encode())
    monkeypatch.setenv(var, "1")
    with pytest.raises(UnknownNameError) as ei:
        resolve_model("acme/tiny-llama")
    assert f"{var} is set" in str(ei.value)
    assert server.hits == []


def test_unreachable_endpoint(server, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(UnknownNameError) as ei:
        resolve_model("acme/tiny-llama")
    assert "cannot reach http://127.0.0.1:9" in str(ei.value)
