"""The FastAPI application behind ``fmest serve``.

Every route answers JSON. ``POST /v1/estimate`` reads its body through the CLI's input door
(:mod:`fmest.serve.inputs`) and returns exactly what ``fmest estimate --format json`` prints.
Errors are ``{"error": {"field", "message", "accepted"}}``: 422 for bad input (an
:class:`fmest.errors.InputError` keeps its field and accepted values), 413 for a body over the
size limit, 408 for a body that does not arrive within its deadline, 504 past the time limit,
500 (logged, never a traceback in the body) for a bug.

Before any route, :class:`_Transport` refuses what a web page could send from elsewhere: a
``Host`` outside the allow-list (421: DNS rebinding), an ``Origin`` outside it (403: another
site's page), a POST body that is not declared JSON (415). CORS is off unless origins are named.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import os
from importlib import resources
from typing import Any, Iterable, Optional, Sequence
from urllib.parse import urlsplit

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.staticfiles import StaticFiles

from fmest import __version__
from fmest.compat.fm_training_estimator.ui import api as fmte_api
from fmest.errors import FmestError, InputError, error_body, error_object
from fmest.serve import cors_origin, host_name, schema
from fmest.serve.files import FileAccess, checked_plan_response
from fmest.serve.inputs import INPUT_SOURCE, estimate_args, parse_json  # noqa: F401
from fmest.serve.service import CONCURRENT_METHODS, JOBS_BOUND, estimate_response  # noqa: F401
from fmest.serve.service import ServiceEngine as _ServiceEngine
from fmest.serve.workers import ThreadWork, WorkerConfig, WorkerPool, WorkStopped

log = logging.getLogger("fmest.serve")

#: Default request body limit: a job with an inline Hugging Face config.json is a few KiB;
#: the largest shipped preset config is under 10 KiB. 1 MiB leaves room for EstimateInputs
#: with many jobs while keeping one request from holding much memory.
DEFAULT_MAX_BODY_BYTES = 1 << 20
#: Default per-request time limit. A formula estimate takes milliseconds; a traced estimate of
#: a large model on first use (no disk cache) takes tens of seconds.
DEFAULT_TIMEOUT_SECONDS = 120.0
#: Default deadline for a request body to arrive whole once its route reads it: a body is at
#: most --max-body-bytes (1 MiB), seconds on any link that is not a hostile drip.
DEFAULT_BODY_TIMEOUT_SECONDS = 30.0
#: Worker threads for estimates. Formula estimates hold the GIL, so more threads add no
#: throughput, only switching; a few keep the queue first-come first-served (lower p99 under
#: load, benchmarks/serve_load.py) while one slow request does not block the others.
WORKER_THREADS = 4
#: The names the service answers to unless told more (``create_app(allow_hosts=...)``;
#: ``fmest serve`` adds its ``--host`` and every ``--allow-host``): this machine's loopback
#: names. A page on a name an attacker controls, re-pointed at 127.0.0.1 (DNS rebinding), sends
#: that name as ``Host`` and is refused; the connection's own address is always accepted (an
#: address is no name anyone can re-point).
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
#: The one body type the POST routes read. A page on another site can post a "simple" CORS
#: request (text/plain, a form) without asking first; JSON needs a preflight, which only a
#: ``--cors-origin`` passes.
JSON_MEDIA_TYPE = "application/json"
#: fm-training-estimator's route and the body types it reads: its users post the config with
#: ``curl -d@config.json`` (a form type) as its README shows. A browser page on another site
#: can post those without a preflight, but it sends ``Origin``, which is checked first.
FMTE_ROUTE, FMTE_MEDIA_TYPES = fmte_api.ROUTE, fmte_api.MEDIA_TYPES
def _input_error_body(exc: InputError) -> dict:
    return error_object(exc)


def create_app(engine=None, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
               allow_hosts: Iterable[str] = LOCAL_HOSTS, cors_origins: Iterable[str] = (),
               allow_paths: Sequence[str | os.PathLike] = (),
               fmte_paths: tuple[Optional[str], Optional[str]] = (None, None),
               workers: int = 0, cpu_budget_seconds: Optional[float] = None,
               plugin_timeout_seconds: Optional[float] = None,
               body_timeout_seconds: float = DEFAULT_BODY_TIMEOUT_SECONDS) -> FastAPI:
    """The service over ``engine`` (default: a new engine over the installed plugins).
    ``allow_paths``: the directories under which requests may name files (none by default;
    :mod:`fmest.serve.files`). ``allow_hosts``: the names requests may give as ``Host`` and a
    browser's ``Origin`` (:data:`LOCAL_HOSTS` by default); ``cors_origins``: the other sites
    whose pages may call the API (``scheme://host[:port]``; none by default). ``fmte_paths``:
    the lookup CSV and learned bundle of fm-training-estimator's route ``/api/estimate``
    (the operator's, read as given). ``workers``: run the estimates in that many worker
    processes, each request's work stopped at ``timeout_seconds`` of wall time or
    ``cpu_budget_seconds`` of CPU or when its client goes (:mod:`fmest.serve.workers`); 0 keeps
    them in threads of this process with ``engine``. ``body_timeout_seconds``: a request body
    that has not arrived whole this long after the route began to read it is answered 408 (and
    the connection closed); the deadline for the request head is the server's
    (:mod:`fmest.serve.protocol`)."""
    access = FileAccess.of(allow_paths)
    if engine is None:
        from fmest.engine import Engine

        engine = Engine()
    service = _ServiceEngine(engine)
    pool: Optional[WorkerPool] = None
    if workers:
        pool = WorkerPool(workers, WorkerConfig(
            allow_paths=tuple(os.fspath(p) for p in allow_paths), fmte_paths=fmte_paths,
            cpu_budget_seconds=cpu_budget_seconds, plugin_timeout=plugin_timeout_seconds),
            budget_seconds=timeout_seconds)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        if pool is not None:
            pool.close()

    app = FastAPI(title="fmest", version=__version__, description=schema.DESCRIPTION,
                  lifespan=lifespan,
                  # FastAPI's /docs and /redoc pages load their scripts from a CDN; the service
                  # stays offline and serves the schema itself at /openapi.json
                  docs_url=None, redoc_url=None)
    app.state.service = service
    app.state.pool = pool
    origins = sorted(set(map(cors_origin, cors_origins)))
    app.add_middleware(_Transport, hosts=frozenset(map(host_name, allow_hosts)),
                       cors_origins=frozenset(origins))
    if origins:  # added last, so it runs first: it answers preflights and labels every answer
        app.add_middleware(CORSMiddleware, allow_origins=origins, allow_methods=["GET", "POST"],
                           allow_headers=["Content-Type"])
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
        raw = await read_body(request)
        if not raw.strip():
            raise InputError("body", "empty; send a JSON object (schema: /openapi.json)")
        return parse_json(raw)

    async def read_body(request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_body_bytes:
            raise _TooLarge(max_body_bytes)
        chunks, size = [], 0
        # the whole body within the deadline: a client sending a byte now and then would
        # otherwise hold its connection, and the memory read so far, for as long as it likes
        with anyio.move_on_after(body_timeout_seconds) as deadline:
            async for chunk in request.stream():
                size += len(chunk)
                if size > max_body_bytes:
                    raise _TooLarge(max_body_bytes)
                chunks.append(chunk)
        if deadline.cancelled_caught:
            raise _BodyTooSlow(body_timeout_seconds)
        return b"".join(chunks)

    @app.exception_handler(_TooLarge)
    async def _too_large(request: Request, exc: _TooLarge):
        return JSONResponse(error_body("body", f"request body over the limit of "
                                       f"{exc.limit} bytes"), status_code=413)

    @app.exception_handler(_BodyTooSlow)
    async def _body_too_slow(request: Request, exc: _BodyTooSlow):
        # the rest of the body may still be on its way: close rather than read it
        return JSONResponse(error_body("body", f"the request body did not arrive within the "
                                       f"server's limit of {exc.limit:g} s (fmest serve "
                                       "--body-timeout)"), status_code=408,
                            headers={"connection": "close"})

    threads = anyio.CapacityLimiter(WORKER_THREADS)
    thread_work = ThreadWork(timeout_seconds)

    async def in_thread(fn, *args):
        def tracked():
            token = thread_work.start()
            try:
                return fn(*args)
            finally:
                thread_work.end(token)
        try:
            return await asyncio.wait_for(anyio.to_thread.run_sync(tracked, limiter=threads),
                                          timeout_seconds)
        except asyncio.TimeoutError:
            return JSONResponse(error_body("request", f"took longer than the server's limit "
                                           f"of {timeout_seconds:g} s"), status_code=504)

    async def in_worker(request: Request, kind: str, payload: Any, fn, *args):
        """The work of one request: in a worker process under its budget when the service
        has a pool, else in a thread."""
        if pool is None:
            return await in_thread(fn, *args)
        try:
            status, body = await pool.run(kind, payload, gone=request.is_disconnected)
        except WorkStopped as exc:
            return JSONResponse(error_body("request", exc.reason), status_code=exc.status)
        if status == "ok":
            return body
        return JSONResponse(body, status_code=500 if status == "bug" else 422)

    @app.post("/v1/estimate", tags=["estimate"], openapi_extra=schema.estimate_openapi(),
              summary="Estimate a job: the CLI's `fmest estimate --format json` object",
              responses=_refusals(403, 415, 421))
    async def estimate(request: Request):
        body = await read_json(request)
        args, job_input = estimate_args(body)
        result = await in_worker(request, "estimate", (args, job_input), estimate_response, args,
                                 job_input, service, access)
        if isinstance(result, JSONResponse):
            return result
        return Response(result, media_type="application/json")

    from fmest import flags as flag_table
    from fmest.serve.plan import plan_available

    plan_flags = flag_table.PLAN_FLAGS if plan_available(service) else None

    @app.post("/v1/plan", tags=["plan"], openapi_extra=schema.plan_openapi(plan_flags),
              summary="Plan: every layout that fits, cost against time (needs fmest.plan)",
              responses=_refusals(403, 415, 421))
    async def plan(request: Request):
        if plan_flags is None:
            return JSONResponse(error_body(None, "this fmest has no planner the service can "
                                           "call (fmest.plan.plan_output); POST /v1/estimate "
                                           "works"),
                                status_code=501)
        body = await read_json(request)
        result = await in_worker(request, "plan", body, checked_plan_response, plan_flags, body,
                                 service, access)
        if isinstance(result, JSONResponse):
            return result
        return Response(result, media_type="application/json")

    @app.post(fmte_api.ROUTE, tags=["fm-training-estimator"], openapi_extra=schema.fmte_openapi(),
              summary="fm-training-estimator's route: its flat config as JSON text in, its "
                      "flat answer as a JSON string out (docs/compat.md)",
              responses=_refusals(403, 415, 421))
    async def fmte_estimate(request: Request):
        config = fmte_api.read_config(await read_body(request))
        result = await in_worker(request, "fmte", config, functools.partial(
            fmte_api.answer, data_path=fmte_paths[0], model_path=fmte_paths[1],
            engine=service.engine, access=access), config)
        if isinstance(result, JSONResponse):
            return result
        return Response(result, media_type="application/json")

    @app.get("/v1/models", tags=["registries"], openapi_extra=schema.list_openapi("Model"),
             summary="Model presets (as `fmest models --format json`)",
             responses=_refusals(403, 421))
    def models():
        from fmest.serve.listings import models_listing

        return models_listing(service.engine)

    @app.get("/v1/gpus", tags=["registries"], openapi_extra=schema.list_openapi("Gpu"),
             summary="Accelerators (as `fmest gpus --format json`)",
             responses=_refusals(403, 421))
    def gpus():
        from fmest.serve.listings import gpus_listing

        return gpus_listing(service.engine)

    @app.get("/v1/prices", tags=["registries"], openapi_extra=schema.list_openapi("Price"),
             summary="Cloud price quotes registered by plugins",
             responses=_refusals(403, 421))
    def prices():
        from fmest.serve.listings import prices_listing

        return prices_listing(service.engine)

    @app.get("/v1/stacks", tags=["registries"], openapi_extra=schema.list_openapi("Stack"),
             summary="Training-stack profiles (as `fmest stacks --json`)",
             responses=_refusals(403, 421))
    def stacks():
        from fmest.serve.listings import stacks_listing

        return stacks_listing(service.engine)

    @app.get("/healthz", tags=["service"], openapi_extra=schema.health_openapi(),
             summary="Liveness, version and plugin load errors",
             responses=_refusals(403, 421))
    def healthz():
        from fmest.plugins import plugin_hooks

        work = pool.health() if pool is not None else thread_work.health()
        return {"status": "degraded" if work["stuck"] else "ok", "version": __version__,
                "plugins": sorted(plugin_hooks(service.engine.pm)),
                "load_errors": [str(e) for e in service.engine.load_errors],
                "plan": plan_flags is not None, "workers": work}

    @app.get("/", include_in_schema=False)
    def page():
        return FileResponse(os.path.join(static_dir, "index.html"),
                            headers={"Cache-Control": "no-cache"})

    app.mount("/static", StaticFiles(directory=static_dir), name="static")
    return app


class _TooLarge(Exception):
    def __init__(self, limit: int) -> None:
        self.limit = limit


class _BodyTooSlow(Exception):
    def __init__(self, limit: float) -> None:
        self.limit = limit


def _refusals(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI answers of :class:`_Transport`'s refusals."""
    text = {403: "a browser page from an origin this server does not allow (`Origin`)",
            415: "a body not sent as `Content-Type: application/json`",
            421: "a host name this server does not answer for (`Host`; fmest serve "
                 "--allow-host)"}
    return {code: {"description": text[code],
                   "content": {JSON_MEDIA_TYPE: {"schema": schema.ERROR_SCHEMA}}}
            for code in codes}


class _Transport:
    """The checks of every request before any route (ASGI middleware): ``Host`` (421),
    ``Origin`` (403) and a POST body's ``Content-Type`` (415), answered with the service's
    error JSON naming the header.

    * ``Host`` must name one of ``hosts`` or the address the connection came in on. A request
      without one cannot come from a browser and passes (an HTTP/1.0 health check).
    * ``Origin``, which browsers send with every cross-site request and every POST, must be
      ``http(s)://`` one of those hosts (any port) or one of ``cors_origins``.
    * A POST that declares a ``Content-Type`` must declare JSON. One that declares none is read
      as JSON (scripts; a browser that sends none still sends ``Origin``).
    """

    def __init__(self, app, *, hosts: frozenset[str], cors_origins: frozenset[str]) -> None:
        self.app = app
        self.hosts = hosts
        self.cors_origins = cors_origins

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            refusal = self.refusal(scope, Headers(scope=scope))
            if refusal is not None:
                status, body = refusal
                await JSONResponse(body, status_code=status)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def refusal(self, scope, headers: Headers) -> tuple[int, dict] | None:
        server = scope.get("server") or (None, None)
        hosts = (self.hosts | {host_name(str(server[0]))}) if server[0] else self.hosts
        accepted = sorted(self.hosts)
        host = headers.get("host")
        if host is not None and host_name(host) not in hosts:
            return 421, error_body("host", "this server does not answer for this name (fmest "
                                   "serve --allow-host NAME adds one)", accepted)
        origin = headers.get("origin")
        if origin is not None and not self.origin_allowed(origin, hosts):
            return 403, error_body("origin", "pages from this origin may not call this server "
                                   "(fmest serve --cors-origin ORIGIN lets one)",
                                   [f"http(s)://{f'[{h}]' if ':' in h else h}[:port]"
                                    for h in accepted]
                                   + sorted(self.cors_origins))
        media = headers.get("content-type")
        accepted_media = FMTE_MEDIA_TYPES if scope.get("path") == FMTE_ROUTE \
            else (JSON_MEDIA_TYPE,)
        if scope["method"] == "POST" and media is not None \
                and media.split(";", 1)[0].strip().lower() not in accepted_media:
            return 415, error_body("content-type", f"the body must be JSON, sent as "
                                   f"Content-Type: {JSON_MEDIA_TYPE}", list(accepted_media))
        return None

    def origin_allowed(self, origin: str, hosts: frozenset[str]) -> bool:
        try:
            parts = urlsplit(origin)
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False  # "null" (a sandboxed frame, a file:// page), an extension
        if parts.hostname.rstrip(".") in hosts:
            return True
        try:
            return cors_origin(origin) in self.cors_origins
        except argparse.ArgumentTypeError:
            return False
