"""The ``cost_cloud`` plugin: the shipped price table, the cost estimate, ``fmest prices``."""

from __future__ import annotations

from fmest.hookspecs import hookimpl

# the table and the cost code load on first use: loading the plugin (fmest --help lists every
# plugin's commands) stays cheap


@hookimpl
def fmest_register_prices(register):
    from fmest_cost_cloud.table import shipped_quotes

    for quote in shipped_quotes():
        register(quote)


@hookimpl
def fmest_estimate_cost(job, ctx, time):
    from fmest_cost_cloud.cost import estimate_cost

    return estimate_cost(job, ctx, time)


@hookimpl
def fmest_register_commands(register):
    from fmest.plugins import lazy_command
    from fmest_cost_cloud import PRICES_HELP

    register("prices", PRICES_HELP, *lazy_command("fmest_cost_cloud.command"))
