"""Registers the shipped accelerator table (``fmest/data/gpus.csv``)."""

from fmest.hookspecs import hookimpl


@hookimpl
def fmest_register_gpus(register):
    from fmest.gpus import shipped_gpus

    for spec in shipped_gpus():
        register(spec)
