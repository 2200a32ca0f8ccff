"""``fmest serve``: the REST service and the page (optional extra ``fmest[serve]``).

* :func:`fmest.serve.app.create_app` builds the FastAPI application (routes in docs/serve.md);
* :func:`add_arguments` / :func:`run_command` are the ``serve`` sub-command, registered by the
  default plugin ``fmest.default_plugins.serve`` through ``fmest_register_commands``.

Importing this package does not import FastAPI, so the core CLI works without the extra.
"""

from __future__ import annotations

import argparse

from fmest.errors import FmestError


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
        timeout_seconds=args.timeout or app_module.DEFAULT_TIMEOUT_SECONDS)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0
