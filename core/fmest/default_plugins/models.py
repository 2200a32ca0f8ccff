"""Registers the shipped model presets (``fmest/models/presets/*.json``)."""

from functools import partial

from fmest.hookspecs import hookimpl


@hookimpl
def fmest_register_models(register):
    from fmest.models.presets import list_presets, load_preset

    for info in list_presets():
        register(info.name, partial(load_preset, info.name), aliases=tuple(info.aliases),
                 source=info.source)
