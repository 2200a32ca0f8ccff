"""Registers the built-in policies: theory, traced, learned, hybrid."""

from fmest.hookspecs import hookimpl


@hookimpl
def fmest_register_policies(register):
    from fmest.policies import builtin_policies

    for policy in builtin_policies():
        register(policy)
