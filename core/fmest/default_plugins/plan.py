"""The ``fmest plan`` command, registered like any plugin's command (docs/plan.md)."""

from __future__ import annotations

from fmest.hookspecs import hookimpl


@hookimpl
def fmest_register_commands(register):
    from fmest.plugins import lazy_command

    register("plan", "search GPU types, counts and layouts for the cheapest or fastest run "
             "that fits (cost/time Pareto front)", *lazy_command("fmest.plan.command"))
