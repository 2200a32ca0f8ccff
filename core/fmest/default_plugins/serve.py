"""Registers ``fmest serve`` (the REST service and page, :mod:`fmest.serve`). FastAPI and
uvicorn are imported only when the command runs (optional extra ``fmest[serve]``)."""

from fmest.hookspecs import hookimpl


@hookimpl
def fmest_register_commands(register):
    from fmest.plugins import lazy_command

    register("serve", "serve the REST API (POST /v1/estimate, ...) and the page at /",
             *lazy_command("fmest.serve", "add_arguments", "run_command"))
