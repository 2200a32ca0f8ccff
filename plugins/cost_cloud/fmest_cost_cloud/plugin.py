"""The ``cost_cloud`` plugin: the shipped price table, the cost estimate, ``fmest prices``."""

from __future__ import annotations

from fmest.hookspecs import hookimpl
from fmest_cost_cloud.cost import estimate_cost
from fmest_cost_cloud.table import shipped_quotes


@hookimpl
def fmest_register_prices(register):
    for quote in shipped_quotes():
        register(quote)


@hookimpl
def fmest_estimate_cost(job, ctx, time):
    return estimate_cost(job, ctx, time)


@hookimpl
def fmest_register_commands(register):
    from fmest_cost_cloud import command

    register("prices", command.HELP, command.add_arguments, command.run)
