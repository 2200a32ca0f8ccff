"""``fmest serve``: the REST service and the page (optional extra ``fmest[serve]``).

* :func:`fmest.serve.app.create_app` builds the FastAPI application (routes in docs/serve.md);
* :func:`add_arguments` / :func:`run_command` are the ``serve`` sub-command, registered by the
  default plugin ``fmest.default_plugins.serve`` through ``fmest_register_commands``.

Importing this package does not import FastAPI, so the core CLI works without the extra.
"""

from __future__ import annotations

import argparse
from urllib.parse import urlsplit

from fmest.errors import FmestError

#: uvicorn's connection settings (docs/serve.md, "Running it for others"). An idle keep-alive
#: connection is closed after 5 s (uvicorn's default: the page's requests come in bursts, and
#: an idle socket holds a slot of the concurrency limit). Beyond 256 open connections or
#: requests in flight uvicorn answers 503 at once: 4 worker threads answer ~250 estimates/s, so
#: 256 queued requests wait about a second; the load benchmark's 64 connections fit; each
#: request may hold its parsed body (--max-body-bytes) while it waits. h11 holds at most 16 KiB
#: of a request head that has not arrived whole (its default, stated so a change shows); past
#: that, 400. uvicorn has no deadline for a request to arrive: a connection that sends nothing,
#: or a byte now and then, stays open and holds a slot (the reverse proxy's job).
DEFAULT_TIMEOUT_KEEP_ALIVE_SECONDS = 5
#: Worker processes of ``fmest serve`` (``--workers``): two keep one slow request from holding
#: the service; each is an interpreter with fmest and its plugins (~100 MB, more once a traced
#: estimate loads torch).
DEFAULT_WORKERS = 2
DEFAULT_LIMIT_CONCURRENCY = 256
DEFAULT_H11_MAX_INCOMPLETE_EVENT_SIZE = 16 * 1024


def host_name(text: str) -> str:
    """The host of a ``Host`` header or an ``--allow-host`` value: lower case, without port,
    IPv6 brackets or a trailing dot (``[::1]:8000`` -> ``::1``, ``Example.COM.`` ->
    ``example.com``)."""
    text = text.strip().lower()
    if text.startswith("["):
        text = text[1:].split("]", 1)[0]
    elif text.count(":") == 1:  # name:port; a bare IPv6 address has several colons
        text = text.split(":", 1)[0]
    return text.rstrip(".")


def cors_origin(text: str) -> str:
    """An ``--cors-origin`` value as browsers send ``Origin``: ``scheme://host[:port]``, lower
    case, without the scheme's default port. Raises :class:`argparse.ArgumentTypeError`."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        parts, port = None, None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname \
            or parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise argparse.ArgumentTypeError(f"expected an origin such as https://fmest.example.com "
                                         f"or http://localhost:3000, got {text!r}")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    default = {"http": 80, "https": 443}[parts.scheme]
    return f"{parts.scheme}://{host}" + (f":{port}" if port not in (None, default) else "")


def _allowed_host(text: str) -> str:
    name = host_name(text)
    if not name or any(c in text for c in "/@* \t") or "[" in name:
        raise argparse.ArgumentTypeError(f"expected a host name or address such as "
                                         f"fmest.example.com, got {text!r}")
    return name


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from fmest.flags import parse_positive_int

    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on "
                        "(default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 "
                        "picks a free one)")
    parser.add_argument("--max-body-bytes", type=parse_positive_int, default=None,
                        metavar="N", help="largest request body accepted (default 1 MiB)")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="per-request time limit (default 120)")
    parser.add_argument("--allow-host", action="append", default=[], type=_allowed_host,
                        metavar="NAME", help="also answer requests for NAME (their Host "
                        "header, and a browser's Origin): the name clients or a reverse proxy "
                        "use; repeatable (default: 127.0.0.1, localhost, ::1 and --host; "
                        "others get 421)")
    parser.add_argument("--cors-origin", action="append", default=[], type=cors_origin,
                        metavar="ORIGIN", help="let web pages from ORIGIN "
                        "(scheme://host[:port]) call the API (CORS); repeatable (default: "
                        "none; the service's own page needs none)")
    parser.add_argument("--timeout-keep-alive", type=parse_positive_int,
                        default=DEFAULT_TIMEOUT_KEEP_ALIVE_SECONDS, metavar="SECONDS",
                        help="close a connection idle this long after an answer (default "
                        f"{DEFAULT_TIMEOUT_KEEP_ALIVE_SECONDS})")
    parser.add_argument("--limit-concurrency", type=parse_positive_int,
                        default=DEFAULT_LIMIT_CONCURRENCY, metavar="N",
                        help="most connections or requests at once; beyond it, answer 503 "
                        f"(default {DEFAULT_LIMIT_CONCURRENCY})")
    parser.add_argument("--h11-max-incomplete-event-size", type=parse_positive_int,
                        default=DEFAULT_H11_MAX_INCOMPLETE_EVENT_SIZE, metavar="BYTES",
                        help="most bytes of an unfinished request head held; a head sent in "
                        "pieces past it gets 400 (default 16 KiB)")
    parser.add_argument("--allow-path", action="append", default=[], metavar="DIR",
                        help="let requests name files (model config.json or folder, dataset, "
                        "learned-model bundle) whose real path lies under DIR; repeatable "
                        "(default: requests name no file, only registered names and inline "
                        "configs)")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS, metavar="N",
                        help="worker processes the estimates run in; each request's work is "
                        "stopped (the worker killed and replaced) past --timeout, past "
                        "--cpu-budget or when its client goes; 0 runs them in threads of the "
                        f"server, where the limit stops the waiting, not the work (default "
                        f"{DEFAULT_WORKERS})")
    parser.add_argument("--cpu-budget", type=float, default=None, metavar="SECONDS",
                        help="CPU seconds one request's work may use in its worker (default: "
                        "--timeout)")
    parser.add_argument("--fmte-lookup-data", default=None, metavar="CSV",
                        help="POST /api/estimate (fm-training-estimator's route): the CSV of "
                        "measured runs it answers from first (its formats v1/v2/v3; "
                        "docs/compat.md)")
    parser.add_argument("--fmte-model", default=None, metavar="DIR",
                        help="POST /api/estimate: an fmest learned bundle it answers from "
                        "before theory")


def run_command(args: argparse.Namespace, engine) -> int:
    try:
        import uvicorn

        from fmest.serve import app as app_module
    except ImportError as exc:
        raise FmestError(f"fmest serve needs the serve extra ({exc.name} is missing): "
                         "pip install 'fmest[serve]'") from None
    app = app_module.create_app(
        engine,
        max_body_bytes=args.max_body_bytes or app_module.DEFAULT_MAX_BODY_BYTES,
        timeout_seconds=args.timeout or app_module.DEFAULT_TIMEOUT_SECONDS,
        allow_hosts=(*app_module.LOCAL_HOSTS, args.host, *args.allow_host),
        cors_origins=tuple(args.cors_origin),
        allow_paths=tuple(args.allow_path or ()),
        fmte_paths=(args.fmte_lookup_data, args.fmte_model),
        workers=max(0, args.workers),
        cpu_budget_seconds=args.cpu_budget or args.timeout or app_module.DEFAULT_TIMEOUT_SECONDS)
    # h11, not httptools (uvicorn's choice when installed): only h11 takes the head limit, and
    # the estimates, not the parsing, bound the throughput
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", http="h11",
                timeout_keep_alive=args.timeout_keep_alive,
                limit_concurrency=args.limit_concurrency,
                h11_max_incomplete_event_size=args.h11_max_incomplete_event_size)
    return 0
