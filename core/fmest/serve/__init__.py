"""``fmest serve``: the REST service and the page (optional extra ``fmest[serve]``).

* :func:`fmest.serve.app.create_app` builds the FastAPI application (routes in docs/serve.md);
* :func:`add_arguments` / :func:`run_command` are the ``serve`` sub-command, registered by the
  default plugin ``fmest.default_plugins.serve`` through ``fmest_register_commands``.

Importing this package does not import FastAPI, so the core CLI works without the extra.
"""

from __future__ import annotations

import argparse
import logging
from typing import Optional
from urllib.parse import urlsplit

from fmest.errors import FmestError
from fmest.serve.protocol import DEFAULT_HEADER_TIMEOUT_SECONDS, http_protocol

log = logging.getLogger("fmest.serve")

#: uvicorn's connection settings (docs/serve.md, "Running it for others"). An idle keep-alive
#: connection is closed after 5 s (uvicorn's default: the page's requests come in bursts, and
#: an idle socket holds a slot of the concurrency limit). h11 holds at most 16 KiB of a request
#: head that has not arrived whole (its default, stated so a change shows); past that, 400.
DEFAULT_TIMEOUT_KEEP_ALIVE_SECONDS = 5
#: Worker processes of ``fmest serve`` (``--workers``): two keep one slow request from holding
#: the service; each is an interpreter with fmest and its plugins (~100 MB, more once a traced
#: estimate loads torch).
DEFAULT_WORKERS = 2
#: Beyond this many open connections or requests in flight uvicorn answers 503 at once. It
#: counts connections that have not sent a request yet, so it is set well above the 1,000 slow
#: connections a hostile client may open within one --header-timeout (benchmarks/serve_slow.py):
#: each such connection costs the server about 5 KiB (asyncio transport, h11 state; measured),
#: plus up to 16 KiB of a head in pieces (--h11-max-incomplete-event-size): 2,048 of them,
#: under 45 MiB. A request in flight may hold its body (--max-body-bytes, 1 MiB, which must
#: arrive within --body-timeout) while it waits for a worker: 2,048 x 1 MiB is 2 GiB at the
#: worst, which is why a public service lowers --max-body-bytes (64 KiB: 128 MiB).
DEFAULT_LIMIT_CONCURRENCY = 2048
DEFAULT_H11_MAX_INCOMPLETE_EVENT_SIZE = 16 * 1024
#: Open files the server needs besides its connections (listening socket, worker pipes, logs,
#: the package's files): the soft RLIMIT_NOFILE should leave this much above
#: --limit-concurrency, or connections past it are refused by the kernel (EMFILE) and asyncio
#: stops accepting for a second, healthy requests included.
SPARE_FILES = 64


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


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def raise_open_files_limit(wanted: int) -> Optional[int]:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit (best effort, logged) and
    return the soft limit now in force (``None`` where the platform has no such limit). Logs a
    warning when it stays below ``wanted``."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        # macOS reports no hard limit but refuses a soft one above kern.maxfilesperproc
        targets = [1 << 20, 65536, 10240]
    else:
        targets = [hard]
    for target in targets:
        if soft != resource.RLIM_INFINITY and soft >= target:
            break
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            continue
        log.info("fmest serve: open-file limit raised from %d to %d", soft, target)
        soft = target
        break
    if soft != resource.RLIM_INFINITY and soft < wanted:
        log.warning("fmest serve: the open-file limit is %d (hard limit %s), below "
                    "--limit-concurrency plus %d spare files (%d): connections past it are "
                    "refused; raise it (ulimit -n, systemd LimitNOFILE) or lower "
                    "--limit-concurrency", soft,
                    "none" if hard == resource.RLIM_INFINITY else hard, SPARE_FILES, wanted)
    return int(soft)


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
                        f"(default {DEFAULT_LIMIT_CONCURRENCY}; the open-file limit is raised "
                        "to fit at start)")
    parser.add_argument("--header-timeout", type=_seconds,
                        default=DEFAULT_HEADER_TIMEOUT_SECONDS, metavar="SECONDS",
                        help="close a connection whose request head has not arrived this long "
                        "after it opened or after its last answer (default "
                        f"{DEFAULT_HEADER_TIMEOUT_SECONDS:g})")
    parser.add_argument("--plugin-timeout", type=_seconds, default=None, metavar="SECONDS",
                        help="seconds one plugin call may take; past it that plugin's answer is "
                        "left out, named in the answer, and the other plugins answer "
                        "(FMEST_PLUGIN_TIMEOUT; default: half of --timeout)")
    parser.add_argument("--body-timeout", type=_seconds, default=None, metavar="SECONDS",
                        help="answer 408 to a request whose body has not arrived whole this "
                        "long after its head (default 30)")
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
    timeout = args.timeout or app_module.DEFAULT_TIMEOUT_SECONDS
    plugin_timeout = args.plugin_timeout or timeout / 2
    # this process's engine (listings, --workers 0) is built again with it; the workers build
    # theirs with it (create_app's plugin_timeout)
    from fmest.engine import Engine

    if isinstance(engine, Engine):
        engine = Engine(engine.pm, plugin_timeout=plugin_timeout)
    app = app_module.create_app(
        engine,
        max_body_bytes=args.max_body_bytes or app_module.DEFAULT_MAX_BODY_BYTES,
        timeout_seconds=args.timeout or app_module.DEFAULT_TIMEOUT_SECONDS,
        allow_hosts=(*app_module.LOCAL_HOSTS, args.host, *args.allow_host),
        cors_origins=tuple(args.cors_origin),
        allow_paths=tuple(args.allow_path or ()),
        fmte_paths=(args.fmte_lookup_data, args.fmte_model),
        workers=max(0, args.workers),
        cpu_budget_seconds=args.cpu_budget or args.timeout or app_module.DEFAULT_TIMEOUT_SECONDS,
        body_timeout_seconds=args.body_timeout or app_module.DEFAULT_BODY_TIMEOUT_SECONDS,
        plugin_timeout_seconds=plugin_timeout)
    if not log.handlers and not logging.getLogger().handlers:
        # the service's own lines (the open-file limit, a fallback) as uvicorn prints its own
        from uvicorn.logging import DefaultFormatter

        handler = logging.StreamHandler()
        handler.setFormatter(DefaultFormatter("%(levelprefix)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    raise_open_files_limit(args.limit_concurrency + SPARE_FILES)
    # h11, not httptools (uvicorn's choice when installed): only h11 takes the head limit, and
    # the estimates, not the parsing, bound the throughput; fmest's subclass adds the deadline
    # for the request head (plain h11, with a warning, where uvicorn's internals differ)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info",
                http=http_protocol(args.header_timeout),
                timeout_keep_alive=args.timeout_keep_alive,
                limit_concurrency=args.limit_concurrency,
                h11_max_incomplete_event_size=args.h11_max_incomplete_event_size)
    return 0
