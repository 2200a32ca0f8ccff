"""Building the plugin manager: default plugins, then entry points of the group ``fmest``.

Environment:

* ``FMEST_DISABLE_PLUGINS=a,b`` skips those plugins (entry-point names or default plugin names).
* ``FMEST_PLUGINS=a,b`` loads only those entry-point plugins (default plugins always load
  unless disabled).
* ``FMEST_NO_ENTRYPOINTS=1`` loads no entry-point plugins (tests use a fresh manager instead).

A plugin that fails to import or register is recorded in ``pm.fmest_load_errors`` with its
name and how to disable it; the other plugins keep working.
"""

from __future__ import annotations

import importlib
import os
from importlib.metadata import entry_points

import pluggy
from attrs import frozen

from fmest import hookspecs

ENTRYPOINT_GROUP = "fmest"

#: Default plugins shipped in the core: name -> module. They use the same hooks as any other.
DEFAULT_PLUGINS = {
    "gpus": "fmest.default_plugins.gpus",
    "models": "fmest.default_plugins.models",
    "optimizers": "fmest.default_plugins.optimizers",
    "parallelism": "fmest.default_plugins.parallelism",
    "policies": "fmest.default_plugins.policies",
}


@frozen
class LoadError:
    plugin: str
    error: str

    def __str__(self) -> str:
        return (f"plugin {self.plugin!r} failed to load: {self.error} "
                f"(disable it with FMEST_DISABLE_PLUGINS={self.plugin})")


def _env_list(name: str) -> set[str] | None:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return None
    return {p.strip() for p in raw.split(",") if p.strip()}


def new_plugin_manager(*, entrypoints: bool | None = None, defaults: bool = True,
                       disable: set[str] | None = None,
                       only: set[str] | None = None) -> pluggy.PluginManager:
    """A fresh plugin manager with the hook specs, default plugins and (optionally) the
    installed entry-point plugins. Arguments override the environment variables."""
    pm = pluggy.PluginManager("fmest")
    pm.add_hookspecs(hookspecs)
    pm.fmest_load_errors = []  # type: ignore[attr-defined]
    disabled = disable if disable is not None else (_env_list("FMEST_DISABLE_PLUGINS") or set())
    allowed = only if only is not None else _env_list("FMEST_PLUGINS")
    if entrypoints is None:
        entrypoints = os.environ.get("FMEST_NO_ENTRYPOINTS", "") not in ("1", "true", "yes")
    if defaults:
        for name, module in DEFAULT_PLUGINS.items():
            if name not in disabled:
                pm.register(importlib.import_module(module), name=name)
    if entrypoints:
        seen: set[str] = set()
        for ep in sorted(entry_points(group=ENTRYPOINT_GROUP), key=lambda e: e.name):
            if ep.name in disabled or ep.name in seen:
                continue
            if allowed is not None and ep.name not in allowed:
                continue
            seen.add(ep.name)
            try:
                plugin = ep.load()
                pm.register(plugin, name=ep.name)
            except Exception as exc:  # a broken plugin must not take the others down
                pm.fmest_load_errors.append(LoadError(ep.name, f"{type(exc).__name__}: {exc}"))
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        name = getattr(exc, "plugin_name", None) or "?"
        pm.fmest_load_errors.append(LoadError(str(name), str(exc)))
        pm.unregister(name=name)
    return pm


def plugin_hooks(pm: pluggy.PluginManager) -> dict[str, list[str]]:
    """Plugin name -> the fmest hooks it implements (for ``fmest plugins``)."""
    out: dict[str, list[str]] = {}
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue
        out[name] = sorted(h.name for h in pm.get_hookcallers(plugin) or [])
    return out
