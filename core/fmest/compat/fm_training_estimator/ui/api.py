"""The original's REST route (``fm_training_estimator/ui/api.py`` @ 1d04f05):
``POST /api/estimate``.

Request: the flat config (or an ``EstimateInput``) as JSON text. The original reads the body with
FastAPI's ``Body()`` and calls ``json.loads`` on it, so it takes the config as the raw body
(``curl localhost:3000/api/estimate -d@config.json``, sent as a form or text) or, with
``Content-Type: application/json``, as a JSON *string* holding the JSON text; this route takes
both, and a JSON object too. Answer: :func:`fmest.compat.fm_training_estimator.ui.core.run`'s
dict, JSON-encoded into a string and sent as JSON (a double-encoded answer, as the original's
``return json.dumps(output)``): a client decodes it twice.

``fmest serve`` answers this route beside its own ``/v1/...`` (with its file policy: a request
names no file the server's ``--allow-path`` does not permit); :func:`api`/:func:`run_api` give
the original's stand-alone app.
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional

from fmest.errors import InputError

try:  # FastAPI reads the handler's annotation by name from this module's globals
    from starlette.requests import Request
except ImportError:  # pragma: no cover - the serve extra is not installed
    Request = None  # type: ignore[assignment,misc]

ROUTE = "/api/estimate"
#: the body types the route reads: JSON, and what ``curl -d`` sends (a form) or a plain text
MEDIA_TYPES = ("application/json", "application/x-www-form-urlencoded", "text/plain")


def read_config(raw: bytes) -> Any:
    """The config a request body carries (raw JSON text, a JSON string of it, or an object)."""
    from fmest.serve.inputs import parse_json

    if not raw.strip():
        raise InputError("body", "empty; send the config as JSON")
    value = parse_json(raw)
    if isinstance(value, str):
        value = parse_json(value.encode())
    if not isinstance(value, dict):
        raise InputError("body", "expected the config as a JSON object (or a JSON string of "
                         "one)", value=type(value).__name__)
    return value


def answer(config: dict, *, data_path: Optional[str] = None,
           model_path: Optional[str] = None, engine=None, access=None) -> str:
    """The route's answer body: the flat answer as a JSON string, JSON-encoded.
    ``access``: the service's file policy (:class:`fmest.serve.files.FileAccess`); the paths
    a config names (model folder, dataset, ``base_data_path``) are checked against it."""
    from fmest.compat.fm_training_estimator.config.parser import flat_to_estimate_input
    from fmest.compat.fm_training_estimator.ui.core import run

    data = config if ("job_configs" in config or "jobConfigs" in config) \
        else flat_to_estimate_input(config)
    notes: list[str] = []
    if access is not None:
        data, notes = _check_files(data, access, engine)
    output = run(data, data_path, model_path, engine=engine)
    if notes and "warnings" in output:
        output["warnings"] = notes + list(output["warnings"])
    return json.dumps(json.dumps(output, default=float))


def _check_files(data: dict, access, engine) -> tuple[dict, list[str]]:
    """``data`` with the datasets the allow-list does not permit left out (the answer then has
    no run length, as for a Hub dataset name the CLI cannot read), and the warnings that say
    so; a model path or ``base_data_path`` outside it is refused (one fixed message each)."""
    import copy

    from fmest import flags as flag_table

    meta = data.get("estimator_metadata") or data.get("estimatorMetadata") \
        or data.get("estimator") or {}
    path = meta.get("base_data_path") if isinstance(meta, dict) else None
    if path and not access.allow.permits(str(path)):
        raise InputError("estimator_metadata.base_data_path",
                         "this server reads no file a request names unless it is under a "
                         "directory its operator allowed (fmest serve --allow-path DIR)")
    data = copy.deepcopy(data)
    notes = []
    for i, cfg in enumerate(data.get("job_configs") or data.get("jobConfigs") or []):
        block = cfg.get("data") if isinstance(cfg, dict) else None
        if not isinstance(block, dict):
            continue
        dataset = block.get("dataset")
        if dataset and not access.allow.permits(str(dataset)):
            block.pop("dataset")
            notes.append(f"job_configs[{i}].data.dataset: not read (this server reads no file "
                         "a request names unless its operator allowed the directory: fmest "
                         "serve --allow-path DIR); time and cost are not estimated")
    access.check_body(flag_table.ESTIMATE_FLAGS, data, engine.registries)
    return data, notes


def api(data_path: Optional[str] = None, model_path: Optional[str] = None, *, engine=None):
    """The original's FastAPI app: ``POST /api/estimate`` over ``data_path``/``model_path``
    (the operator's lookup CSV and model, read as given)."""
    from fastapi import FastAPI, Response
    from fastapi.responses import JSONResponse

    from fmest.errors import error_object

    app = FastAPI(title="fm-training-estimator (fmest)")

    @app.post(ROUTE)
    async def estimate(request: Request):
        try:
            config = read_config(await request.body())
            body = answer(config, data_path=data_path, model_path=model_path, engine=engine)
        except InputError as exc:
            return JSONResponse(error_object(exc), status_code=422)
        return Response(body, media_type="application/json")

    return app


def run_api(data_path: Optional[str] = None, model_path: Optional[str] = None,
            port: int = 3000, host: str = "127.0.0.1") -> None:
    """Serve :func:`api` (the original binds 0.0.0.0; this binds the local host unless
    ``host`` says otherwise: put a proxy in front to expose it, docs/serve.md)."""
    import uvicorn

    uvicorn.run(api(data_path, model_path), host=host, port=int(port))


def main(argv: Optional[list[str]] = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m fmest.compat.fm_training_estimator.ui.api",
                                description="fm-training-estimator's REST route, answered "
                                            "by fmest")
    p.add_argument("data_path", nargs="?", default=None, help="lookup CSV of measured runs")
    p.add_argument("model_path", nargs="?", default=None, help="fmest learned bundle")
    p.add_argument("--port", type=int, default=3000)
    p.add_argument("--host", default="127.0.0.1")
    a = p.parse_args(argv)
    run_api(a.data_path and os.fspath(a.data_path), a.model_path, a.port, a.host)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
