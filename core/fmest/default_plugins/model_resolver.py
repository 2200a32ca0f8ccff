"""The core's default model resolution (``trylast``): a preset from the model registry (any
plugin's), a local ``config.json`` or folder, then the Hub. A plugin resolves other names
(an internal model zoo) by implementing ``fmest_resolve_model`` and returning ``None`` for the
names it does not know."""

from fmest.hookspecs import hookimpl


@hookimpl(trylast=True)
def fmest_resolve_model(name, registries):
    from fmest.models.local import resolve_model

    return resolve_model(name, presets=registries.models)
