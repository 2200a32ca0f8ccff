"""Registers the shipped model presets (``fmest/models/presets/*.json``).

``FMEST_DISABLE_PLUGINS=models`` removes them; local configs and the Hub still resolve through
the ``model_resolver`` default plugin."""

from functools import partial

from fmest.hookspecs import hookimpl


@hookimpl
def fmest_register_models(register):
    from fmest.models.presets import find_preset, list_presets, load_preset

    for info in list_presets():
        # the short name ("Llama-2-7b-hf" of "meta-llama/Llama-2-7b-hf") is a key too, where
        # no earlier preset claims it (the same rule as fmest.models.presets.find_preset)
        keys = (info.name.split("/")[-1], *info.aliases)
        aliases = tuple(dict.fromkeys(k for k in keys if k.lower() != info.name.lower()
                                      and find_preset(k) == info.name))
        register(info.name, partial(load_preset, info.name), aliases=aliases,
                 source=info.source, model_type=info.model_type, retrieved=info.retrieved)

