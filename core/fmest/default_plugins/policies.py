"""Registers the built-in policies: theory, traced, learned, hybrid."""

from fmest.hookspecs import hookimpl
from fmest.policies import builtin_policies


@hookimpl
def fmest_register_policies(register):
    for policy in builtin_policies():
        register(policy)
