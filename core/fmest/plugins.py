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
from typing import Any, Callable

import pluggy
from attrs import frozen

from fmest import hookspecs

ENTRYPOINT_GROUP = "fmest"

#: Default plugins shipped in the core: name -> module. They use the same hooks as any other.
DEFAULT_PLUGINS = {
    "compat": "fmest.default_plugins.compat",
    "gpus": "fmest.default_plugins.gpus",
    "models": "fmest.default_plugins.models",
    "model_resolver": "fmest.default_plugins.model_resolver",
    "optimizers": "fmest.default_plugins.optimizers",
    "parallelism": "fmest.default_plugins.parallelism",
    "plan": "fmest.default_plugins.plan",
    "policies": "fmest.default_plugins.policies",
    "serve": "fmest.default_plugins.serve",
    "stacks": "fmest.default_plugins.stacks",
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


class PluginManager(pluggy.PluginManager):
    """pluggy's manager with the plugins that failed to load or register, each named
    (``fmest_load_errors``: the engine reports them, the others go on)."""

    def __init__(self, project_name: str = "fmest") -> None:
        super().__init__(project_name)
        self.fmest_load_errors: list[LoadError] = []


def _register(pm: PluginManager, plugin, name: str) -> None:
    """Register ``plugin`` as ``name``; a validation error is recorded under that name."""
    try:
        pm.register(plugin, name=name)
    except Exception as exc:  # a hook implementation whose arguments the spec does not have
        if pm.is_registered(plugin):
            pm.unregister(plugin)
        pm.fmest_load_errors.append(LoadError(name, f"{type(exc).__name__}: {exc}"))


def check_pending(pm: PluginManager) -> None:
    """pluggy's ``check_pending`` until clean: each plugin with a hook implementation that
    matches no spec (a misspelled hook name) is recorded by name and unregistered."""
    while True:
        try:
            pm.check_pending()
            return
        except pluggy.PluginValidationError as exc:
            name = pm.get_name(exc.plugin) or repr(exc.plugin)
            pm.fmest_load_errors.append(LoadError(str(name), str(exc)))
            pm.unregister(exc.plugin)


def new_plugin_manager(*, entrypoints: bool | None = None, defaults: bool = True,
                       disable: set[str] | None = None,
                       only: set[str] | None = None) -> PluginManager:
    """A fresh plugin manager with the hook specs, default plugins and (optionally) the
    installed entry-point plugins. Arguments override the environment variables."""
    pm = PluginManager("fmest")
    pm.add_hookspecs(hookspecs)
    disabled = disable if disable is not None else (_env_list("FMEST_DISABLE_PLUGINS") or set())
    allowed = only if only is not None else _env_list("FMEST_PLUGINS")
    if entrypoints is None:
        entrypoints = os.environ.get("FMEST_NO_ENTRYPOINTS", "") not in ("1", "true", "yes")
    if defaults:
        for name, module in DEFAULT_PLUGINS.items():
            if name not in disabled:
                _register(pm, importlib.import_module(module), name)
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
            except Exception as exc:  # a broken plugin must not take the others down
                pm.fmest_load_errors.append(LoadError(ep.name, f"{type(exc).__name__}: {exc}"))
                continue
            _register(pm, plugin, ep.name)
    check_pending(pm)
    return pm


# -- the one calling layer --------------------------------------------------------------------
@frozen(kw_only=True)
class HookFailure:
    """One implementation that raised or broke the return contract."""

    plugin: str
    error: str


def call_impl(impl, kwargs: dict):
    """Call one hook implementation the way pluggy does: only with the arguments it declares
    (``impl.argnames``), so an implementation may take a subset of the spec's arguments and a
    spec may grow an argument without breaking installed plugins."""
    return impl.function(*[kwargs[name] for name in impl.argnames])


def each_impl(pm: pluggy.PluginManager, hook_name: str):
    """The implementations of ``hook_name`` sorted by plugin name (answers never depend on
    install order); re-sorted only when the registered implementations change."""
    impls = getattr(pm.hook, hook_name).get_hookimpls()
    cache = pm.__dict__.setdefault("_fmest_sorted_impls", {})
    hit = cache.get(hook_name)
    if hit is not None and hit[0] == impls:
        return hit[1]
    ordered = sorted(impls, key=lambda impl: impl.plugin_name)
    cache[hook_name] = (impls, ordered)
    return ordered


def call_each(pm: pluggy.PluginManager, hook_name: str, kwargs: dict, *, expect=None,
              reraise: tuple = (), only=None):
    """Call every implementation of ``hook_name`` separately.

    Returns ``(answers, failures)``: ``answers`` are ``(plugin name, result)`` pairs for results
    that are not ``None`` (and are instances of ``expect`` when given); a raise (other than the
    ``reraise`` types) or a result of the wrong type is a :class:`HookFailure` naming the plugin.
    ``only(plugin name) -> bool`` skips implementations the caller does not want to ask.
    """
    answers, failures = [], []
    for impl in each_impl(pm, hook_name):
        if only is not None and not only(impl.plugin_name):
            continue
        try:
            result = call_impl(impl, kwargs)
        except reraise:
            raise
        except Exception as exc:  # a broken plugin names itself and spares the others
            failures.append(HookFailure(plugin=impl.plugin_name,
                                        error=f"{type(exc).__name__}: {exc}"))
            continue
        if result is None:
            continue
        if expect is not None and not isinstance(result, expect):
            failures.append(HookFailure(plugin=impl.plugin_name, error=(
                f"{hook_name} returned {type(result).__name__}, expected {expect.__name__}")))
            continue
        answers.append((impl.plugin_name, result))
    return answers, failures


def call_first(pm: pluggy.PluginManager, hook_name: str, kwargs: dict, *, reraise: tuple = ()):
    """A ``firstresult`` hook through the same binding: implementations in pluggy's call order
    (``tryfirst`` first, ``trylast`` last); the first non-``None`` result wins. Returns
    ``(plugin name, result)`` or ``(None, None)``; an exception other than ``reraise`` becomes
    a :class:`fmest.errors.PluginError` naming the plugin."""
    from fmest.errors import PluginError

    for impl in reversed(getattr(pm.hook, hook_name).get_hookimpls()):
        try:
            result = call_impl(impl, kwargs)
        except reraise:
            raise
        except Exception as exc:
            raise PluginError(impl.plugin_name, f"{hook_name} failed: "
                              f"{type(exc).__name__}: {exc}") from exc
        if result is not None:
            return impl.plugin_name, result
    return None, None


def call_register(pm: pluggy.PluginManager, hook_name: str, make_register, errors: list) -> None:
    """Run a registration hook: each implementation gets its own ``register`` callable
    (``make_register(plugin name)``); one that raises (or registers something the registry
    rejects) is recorded in ``errors`` as a :class:`LoadError` naming it, and the others go
    on. A duplicate key stays fatal: it is a conflict between two plugins the user must
    resolve (the error names both)."""
    from fmest.errors import DuplicateRegistrationError

    for impl in each_impl(pm, hook_name):
        try:
            call_impl(impl, {"register": make_register(impl.plugin_name)})
        except DuplicateRegistrationError:
            raise
        except Exception as exc:
            errors.append(LoadError(impl.plugin_name,
                                    f"{hook_name}: {type(exc).__name__}: {exc}"))


def lazy_command(module: str, add_arguments: str = "add_arguments",
                 run: str = "run") -> tuple[Callable[[Any], Any], Callable[[Any, Any], int]]:
    """``(add_arguments, run)`` for ``register(name, help, add_arguments, run)`` that import
    ``module`` only when the command is built or run: ``fmest --help`` loads every plugin to
    list their commands, so a command's code should not load with the plugin."""
    def add(parser: Any) -> Any:
        return getattr(importlib.import_module(module), add_arguments)(parser)

    def call(args: Any, engine: Any) -> int:
        return int(getattr(importlib.import_module(module), run)(args, engine))

    add.__qualname__ = f"{module}.{add_arguments}"
    call.__qualname__ = f"{module}.{run}"
    return add, call


def plugin_commands(pm: pluggy.PluginManager, errors: list) -> dict:
    """CLI sub-commands from ``fmest_register_commands``: name -> (help, add_arguments, run);
    a plugin whose registration fails is appended to ``errors`` and the others go on. Needs
    no registries, so ``fmest --help`` loads the plugins but builds nothing."""
    out: dict = {}

    def make(plugin):
        def register(name, help, add_arguments, run):
            if not (isinstance(name, str) and callable(add_arguments) and callable(run)):
                raise TypeError("register(name, help, add_arguments, run) needs a name and "
                                "two callables")
            out[name] = (help, add_arguments, run)
        return register

    call_register(pm, "fmest_register_commands", make, errors)
    return out


def plugin_hooks(pm: pluggy.PluginManager) -> dict[str, list[str]]:
    """Plugin name -> the fmest hooks it implements (for ``fmest plugins``)."""
    out: dict[str, list[str]] = {}
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue
        out[name] = sorted(h.name for h in pm.get_hookcallers(plugin) or [])
    return out
