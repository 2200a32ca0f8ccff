"""The FastAPI application behind ``fmest serve``.

Every route answers JSON. ``POST /v1/estimate`` reads its body through the CLI's input door
(:mod:`fmest.serve.inputs`) and returns exactly what ``fmest estimate --format json`` prints.
Errors are ``{"error": {"field", "message", "accepted"}}``: 422 for bad input (an
:class:`fmest.errors.InputError` keeps its field and accepted values), 413 for a body over the
size limit, 504 past the time limit, 500 (logged, never a traceback in the body) for a bug.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from importlib import resources
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.staticfiles import StaticFiles

from fmest import __version__
from fmest.errors import FmestError, InputError, error_body, error_object
from fmest.serve import schema
from fmest.serve.inputs import INPUT_SOURCE, estimate_args

log = logging.getLogger("fmest.serve")

#: Default request body limit: a job with an inline Hugging Face config.json is a few KiB;
#: the largest shipped preset config is under 10 KiB. 1 MiB leaves room for EstimateInputs
#: with many jobs while keeping one request from holding much memory.
DEFAULT_MAX_BODY_BYTES = 1 << 20
#: Default per-request time limit. A formula estimate takes milliseconds; a traced estimate of
#: a large model on first use (no disk cache) takes tens of seconds.
DEFAULT_TIMEOUT_SECONDS = 120.0
#: Policies that answer from formulas only and may run in parallel threads. Every other policy
#: may trace with torch (process-wide dispatch state) or load bundles, and runs one at a time.
CONCURRENT_METHODS = frozenset({"theory"})
#: Worker threads for estimates. Formula estimates hold the GIL, so more threads add no
#: throughput, only switching; a few keep the queue first-come first-served (lower p99 under
#: load, benchmarks/serve_load.py) while one slow request does not block the others.
WORKER_THREADS = 4


def _input_error_body(exc: InputError) -> dict:
    return error_object(exc)


class _ServiceEngine:
    """The engine shared by the worker threads.

    Model resolution fills the engine's model cache and may read files or reach the Hub; it
    runs under a lock (the engine's ``resolve_model`` is wrapped on this instance) so
    concurrent first requests for a model load it once. Policies outside
    :data:`CONCURRENT_METHODS` run one at a time (see there).
    """

    def __init__(self, engine) -> None:
        self.engine = engine
        #: the CLI's plugin commands (``fmest plan`` among them when the planner is installed)
        self.commands = engine.commands()
        self.exclusive = threading.Lock()
        resolve_lock = threading.RLock()
        original = engine.resolve_model

        def resolve_model(job):
            with resolve_lock:
                return original(job)

        engine.resolve_model = resolve_model


def estimate_response(args, job_input, service: _ServiceEngine) -> str:
    """The JSON text ``fmest estimate --format json -f INPUT FLAGS`` prints for the parsed
    body: the CLI's own use cases (:func:`fmest.api.read_jobs`, :func:`fmest.api.estimate_jobs`)
    and renderer (:func:`fmest.output.report.reports_to_dict`)."""
    from fmest import api
    from fmest.inputs import read_document
    from fmest.output.report import reports_to_dict

    layers = read_document(job_input, source=INPUT_SOURCE) if job_input is not None else None
    pairs = api.read_jobs(args, job_layers=layers)
    if all(job.options.method in CONCURRENT_METHODS for job, _ in pairs):
        report = api.estimate_jobs(pairs, engine=service.engine)
    else:
        with service.exclusive:
            report = api.estimate_jobs(pairs, engine=service.engine)
    return json.dumps(reports_to_dict(report), default=str)


def create_app(engine=None, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS) -> FastAPI:
    """The service over ``engine`` (default: a new engine over the installed plugins)."""
    if engine is None:
        from fmest.engine import Engine

        engine = Engine()
    service = _ServiceEngine(engine)
    app = FastAPI(title="fmest", version=__version__, description=schema.DESCRIPTION,
                  # FastAPI's /docs and /redoc pages load their scripts from a CDN; the service
                  # stays offline and serves the schema itself at /openapi.json
                  docs_url=None, redoc_url=None)
    app.state.service = service
    static_dir = str(resources.files("fmest.serve") / "static")

    @app.exception_handler(InputError)
    async def _input_error(request: Request, exc: InputError):
        return JSONResponse(_input_error_body(exc), status_code=422)

    @app.exception_handler(FmestError)
    async def _fmest_error(request: Request, exc: FmestError):
        return JSONResponse(error_body(None, str(exc)), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        return JSONResponse(error_body(None, str(exc.detail)), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception):
        log.exception("fmest serve: unexpected error on %s", request.url.path)
        return JSONResponse(error_body(None, f"internal error ({type(exc).__name__}); the "
                                       "server log has the details"), status_code=500)

    async def read_json(request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_body_bytes:
            raise _TooLarge(max_body_bytes)
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_body_bytes:
                raise _TooLarge(max_body_bytes)
            chunks.append(chunk)
        raw = b"".join(chunks)
        if not raw.strip():
            raise InputError("body", "empty; send a JSON object (schema: /openapi.json)")
        try:
            return json.loads(raw, parse_constant=_no_constant)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            where = (f" at line {exc.lineno} column {exc.colno}: {exc.msg}"
                     if isinstance(exc, json.JSONDecodeError) else ": not UTF-8")
            raise InputError("body", f"malformed JSON{where}") from None

    @app.exception_handler(_TooLarge)
    async def _too_large(request: Request, exc: _TooLarge):
        return JSONResponse(error_body("body", f"request body over the limit of "
                                       f"{exc.limit} bytes"), status_code=413)

    workers = anyio.CapacityLimiter(WORKER_THREADS)

    async def in_thread(fn, *args):
        try:
            return await asyncio.wait_for(anyio.to_thread.run_sync(fn, *args, limiter=workers),
                                          timeout_seconds)
        except asyncio.TimeoutError:
            return JSONResponse(error_body("request", f"took longer than the server's limit "
                                           f"of {timeout_seconds:g} s"), status_code=504)

    @app.post("/v1/estimate", tags=["estimate"], openapi_extra=schema.estimate_openapi(),
              summary="Estimate a job: the CLI's `fmest estimate --format json` object")
    async def estimate(request: Request):
        body = await read_json(request)
        args, job_input = estimate_args(body)
        result = await in_thread(estimate_response, args, job_input, service)
        if isinstance(result, JSONResponse):
            return result
        return Response(result, media_type="application/json")

    from fmest import flags as flag_table
    from fmest.serve.plan import plan_available, plan_response

    plan_flags = flag_table.PLAN_FLAGS if plan_available(service) else None

    @app.post("/v1/plan", tags=["plan"], openapi_extra=schema.plan_openapi(plan_flags),
              summary="Plan: every layout that fits, cost against time (needs fmest.plan)")
    async def plan(request: Request):
        if plan_flags is None:
            return JSONResponse(error_body(None, "this fmest has no planner the service can "
                                           "call (fmest.plan.plan_output); POST /v1/estimate "
                                           "works"),
                                status_code=501)
        body = await read_json(request)
        result = await in_thread(plan_response, plan_flags, body, service)
        if isinstance(result, JSONResponse):
            return result
        return Response(result, media_type="application/json")

    @app.get("/v1/models", tags=["registries"], openapi_extra=schema.list_openapi("Model"),
             summary="Model presets (as `fmest models --format json`)")
    def models():
        from fmest.serve.listings import models_listing

        return models_listing(service.engine)

    @app.get("/v1/gpus", tags=["registries"], openapi_extra=schema.list_openapi("Gpu"),
             summary="Accelerators (as `fmest gpus --format json`)")
    def gpus():
        from fmest.serve.listings import gpus_listing

        return gpus_listing(service.engine)

    @app.get("/v1/prices", tags=["registries"], openapi_extra=schema.list_openapi("Price"),
             summary="Cloud price quotes registered by plugins")
    def prices():
        from fmest.serve.listings import prices_listing

        return prices_listing(service.engine)

    @app.get("/v1/stacks", tags=["registries"], openapi_extra=schema.list_openapi("Stack"),
             summary="Training-stack profiles (as `fmest stacks --json`)")
    def stacks():
        from fmest.serve.listings import stacks_listing

        return stacks_listing(service.engine)

    @app.get("/healthz", tags=["service"], openapi_extra=schema.health_openapi(),
             summary="Liveness, version and plugin load errors")
    def healthz():
        from fmest.plugins import plugin_hooks

        return {"status": "ok", "version": __version__,
                "plugins": sorted(plugin_hooks(service.engine.pm)),
                "load_errors": [str(e) for e in service.engine.load_errors],
                "plan": plan_flags is not None}

    @app.get("/", include_in_schema=False)
    def page():
        return FileResponse(os.path.join(static_dir, "index.html"),
                            headers={"Cache-Control": "no-cache"})

    app.mount("/static", StaticFiles(directory=static_dir), name="static")
    return app


def _no_constant(name: str):
    """Python's json reads NaN and Infinity; JSON has no such numbers."""
    raise InputError("body", f"{name} is not a JSON number", accepted=["finite numbers"])


class _TooLarge(Exception):
    def __init__(self, limit: int) -> None:
        self.limit = limit
