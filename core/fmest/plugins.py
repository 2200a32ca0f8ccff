"""Building the plugin manager: default plugins, then entry points of the group ``fmest``.

Environment:

* ``FMEST_DISABLE_PLUGINS=a,b`` skips those plugins (entry-point names or default plugin names).
* ``FMEST_PLUGINS=a,b`` loads only those entry-point plugins (default plugins always load
  unless disabled).
* ``FMEST_NO_ENTRYPOINTS=1`` loads no entry-point plugins (tests use a fresh manager instead).
* ``FMEST_PLUGIN_TIMEOUT=S`` gives every estimation-hook call (and model resolution) a
  deadline of ``S`` seconds (:class:`PluginDeadline`; read by :class:`fmest.engine.Engine`).

A plugin that fails to import or register is recorded in ``pm.fmest_load_errors`` with its
name and how to disable it; the other plugins keep working.
"""

from __future__ import annotations

import importlib
import math
import os
import threading
from importlib.metadata import entry_points
from typing import Any, Callable, Optional

import pluggy
from attrs import frozen

from fmest import hookspecs
from fmest.errors import InputError, PluginError

ENTRYPOINT_GROUP = "fmest"

#: Default plugins shipped in the core: name -> module. They use the same hooks as any other.
DEFAULT_PLUGINS = {
    "allocator": "fmest.default_plugins.allocator",
    "compat": "fmest.default_plugins.compat",
    "gpus": "fmest.default_plugins.gpus",
    "models": "fmest.default_plugins.models",
    "model_resolver": "fmest.default_plugins.model_resolver",
    "optimizers": "fmest.default_plugins.optimizers",
    "parallelism": "fmest.default_plugins.parallelism",
    "plan": "fmest.default_plugins.plan",
    "policies": "fmest.default_plugins.policies",
    "serve": "fmest.default_plugins.serve",
    "solve": "fmest.default_plugins.solve",
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
              reraise: tuple = (), only=None, deadline: Optional["PluginDeadline"] = None):
    """Call every implementation of ``hook_name`` separately.

    Returns ``(answers, failures)``: ``answers`` are ``(plugin name, result)`` pairs for results
    that are not ``None`` (and are instances of ``expect`` when given); a raise (other than the
    ``reraise`` types) or a result of the wrong type is a :class:`HookFailure` naming the plugin.
    ``only(plugin name) -> bool`` skips implementations the caller does not want to ask.
    With a ``deadline`` (:class:`PluginDeadline`), an implementation that does not answer in
    time is a :class:`HookFailure` too (its answer is left out); without one, each
    implementation is called directly on the calling thread.
    """
    call = call_impl if deadline is None else deadline.caller(hook_name)
    answers, failures = [], []
    for impl in each_impl(pm, hook_name):
        if only is not None and not only(impl.plugin_name):
            continue
        try:
            result = call(impl, kwargs)
        except PluginTimeout as exc:
            failures.append(HookFailure(plugin=impl.plugin_name, error=exc.reason))
            continue
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


def call_first(pm: pluggy.PluginManager, hook_name: str, kwargs: dict, *, reraise: tuple = (),
               deadline: Optional["PluginDeadline"] = None):
    """A ``firstresult`` hook through the same binding: implementations in pluggy's call order
    (``tryfirst`` first, ``trylast`` last); the first non-``None`` result wins. Returns
    ``(plugin name, result)`` or ``(None, None)``; an exception other than ``reraise`` becomes
    a :class:`fmest.errors.PluginError` naming the plugin. With a ``deadline``, an
    implementation that does not answer in time raises :class:`PluginTimeout` (a
    ``PluginError`` naming the plugin): the first answer cannot be told from a later one that
    would have come, so the next implementation is not asked in its place."""
    call = call_impl if deadline is None else deadline.caller(hook_name)
    for impl in reversed(getattr(pm.hook, hook_name).get_hookimpls()):
        try:
            result = call(impl, kwargs)
        except PluginTimeout:
            raise
        except reraise:
            raise
        except Exception as exc:
            raise PluginError(impl.plugin_name, f"{hook_name} failed: "
                              f"{type(exc).__name__}: {exc}") from exc
        if result is not None:
            return impl.plugin_name, result
    return None, None


# -- a deadline per plugin call (FMEST_PLUGIN_TIMEOUT) ----------------------------------------
PLUGIN_TIMEOUT_ENV = "FMEST_PLUGIN_TIMEOUT"
#: what the deadline setting accepts (the error of a bad value lists it)
PLUGIN_TIMEOUT_ACCEPTED = ("a number of seconds > 0, e.g. 30 or 2.5",
                           "empty or 0 for no deadline")
#: an idle worker thread of a :class:`PluginDeadline` ends after this many seconds unused
WORKER_IDLE_SECONDS = 60.0
#: most idle worker threads a :class:`PluginDeadline` keeps (more end when their call returns)
WORKER_IDLE_MAX = 16


def parse_plugin_timeout(value: Any, field: str = PLUGIN_TIMEOUT_ENV) -> Optional[float]:
    """Seconds of the per-call plugin deadline from ``value`` (a number or its text): ``None``
    for no deadline (``None``, empty, ``0``); anything else that is not a finite number of
    seconds > 0 is an :class:`fmest.errors.InputError` naming ``field`` and the accepted
    values."""
    if value is None:
        return None
    raw = value.strip() if isinstance(value, str) else value
    if raw == "":
        return None
    try:
        if isinstance(raw, bool):
            raise TypeError
        seconds = float(raw)
    except (TypeError, ValueError):
        seconds = math.nan
    if seconds == 0:
        return None
    if not (0 < seconds <= threading.TIMEOUT_MAX):  # NaN, inf, negative, unparsable
        raise InputError(field, "must be a number of seconds (the deadline of each plugin "
                         "call)", value=value, accepted=PLUGIN_TIMEOUT_ACCEPTED)
    return seconds


def plugin_timeout_from_env() -> Optional[float]:
    """``$FMEST_PLUGIN_TIMEOUT`` in seconds, ``None`` when unset, empty or 0; a bad value is an
    :class:`fmest.errors.InputError` naming the variable and the accepted values."""
    return parse_plugin_timeout(os.environ.get(PLUGIN_TIMEOUT_ENV), PLUGIN_TIMEOUT_ENV)


class PluginTimeout(PluginError):
    """A plugin's hook implementation did not answer within the deadline.

    ``reason`` is the message without the plugin (a :class:`HookFailure`'s ``error``: the
    report names the plugin beside it); ``str()`` names the plugin too."""

    def __init__(self, plugin: str, hook: str, seconds: float) -> None:
        self.hook = hook
        self.seconds = seconds
        self.reason = (f"{hook} took longer than {seconds:g} s ({PLUGIN_TIMEOUT_ENV} / "
                       "fmest serve --plugin-timeout); its answer is left out")
        super().__init__(plugin, self.reason)


class _Call:
    """One hook call handed to a worker thread, and what came of it."""

    __slots__ = ("key", "context", "impl", "kwargs", "done", "finished", "result", "error",
                 "abandoned", "hung")

    def __init__(self, key: tuple[str, str], context: Any, impl: Any, kwargs: dict) -> None:
        self.key = key
        self.context = context
        self.impl = impl
        self.kwargs = kwargs
        #: held until the call returns (a lock is the cheapest one-shot signal between threads)
        self.done = threading.Lock()
        self.done.acquire()
        self.finished = False
        self.result: Any = None
        self.error: Optional[BaseException] = None
        #: the caller stopped waiting (the deadline passed, or it was interrupted)
        self.abandoned = False
        #: the deadline passed: counted in its PluginDeadline's hung calls until it returns
        self.hung = False


class _Worker(threading.Thread):
    """A daemon thread that runs the calls its :class:`PluginDeadline` hands it, one at a
    time; a daemon never holds up the interpreter's exit, even while a call hangs."""

    def __init__(self, owner: "PluginDeadline") -> None:
        super().__init__(name="fmest-plugin-call", daemon=True)
        self.owner = owner
        self.inbox: Any = owner._new_queue()

    def run(self) -> None:
        owner = self.owner
        while True:
            try:
                call = self.inbox.get(timeout=WORKER_IDLE_SECONDS)
            except owner._empty:
                if owner._retire(self):
                    return
                continue            # taken just now: its call is on the way
            try:
                call.result = call.context.run(call_impl, call.impl, call.kwargs)
            except BaseException as exc:  # handed to the caller, which raises it there
                call.error = exc
            if not owner._finished(self, call):
                return


class PluginDeadline:
    """Runs hook implementations with a deadline of ``seconds`` per call (one per engine:
    :class:`fmest.engine.Engine` keeps it, from ``plugin_timeout`` / ``FMEST_PLUGIN_TIMEOUT``).

    A Python thread cannot be stopped, so each call runs on a daemon worker thread and the
    calling thread waits for it at most ``seconds``; the call runs in a copy of the caller's
    :mod:`contextvars` context (what a plugin sets there does not come back to the caller). A
    call past the deadline raises :class:`PluginTimeout` and its thread is abandoned: it is
    handed no other call while that one runs, so no later call waits behind it. There is no
    shared queue to wait in either (the role an executor's would play): each waiting caller has
    a worker of its own, idle workers are reused (at most :data:`WORKER_IDLE_MAX` kept) and end
    after :data:`WORKER_IDLE_SECONDS` unused.

    A plugin's hook whose abandoned call is still running is *hung*: later calls to that hook
    of that plugin fail at once with the same :class:`PluginTimeout` instead of starting one
    more thread that would hang too. So a plugin that never returns costs one thread for the
    life of the process, not one per request. When the abandoned call returns after all (a
    slow plugin, not a stuck one: a first trace that fills a cache), the plugin is asked again
    from the next call on.
    """

    def __init__(self, seconds: float) -> None:
        import contextvars
        import queue

        if not (0 < seconds <= threading.TIMEOUT_MAX):
            raise ValueError(f"seconds must be > 0 and finite (got {seconds!r})")
        self.seconds = float(seconds)
        self._copy_context = contextvars.copy_context
        self._new_queue = queue.SimpleQueue
        self._empty = queue.Empty
        self._start()

    def _start(self) -> None:
        """Fresh state, also in a forked child: the parent's threads do not come with it."""
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        #: (plugin, hook) -> how many of its abandoned calls are still running
        self._hung: dict[tuple[str, str], int] = {}

    def hung(self) -> list[tuple[str, str]]:
        """``(plugin, hook)`` pairs with an abandoned call still running (asked again only
        once it returns)."""
        with self._lock:
            return sorted(self._hung)

    def caller(self, hook_name: str) -> Callable[[Any, dict], Any]:
        """``call(impl, kwargs)`` for the implementations of ``hook_name``
        (:func:`call_impl` with this deadline)."""
        def call(impl: Any, kwargs: dict) -> Any:
            return self.call(impl, hook_name, kwargs)
        return call

    def call(self, impl: Any, hook_name: str, kwargs: dict) -> Any:
        """:func:`call_impl` on a worker thread: its result, or its exception raised here, or
        :class:`PluginTimeout` when it takes longer than :attr:`seconds` (or is still running
        from an earlier call that did)."""
        if self._pid != os.getpid():
            self._start()
        key = (impl.plugin_name, hook_name)
        if key in self._hung:
            raise PluginTimeout(impl.plugin_name, hook_name, self.seconds)
        call = _Call(key, self._copy_context(), impl, kwargs)
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            worker = _Worker(self)
            worker.start()
        worker.inbox.put(call)
        try:
            finished = call.done.acquire(timeout=self.seconds)
        except BaseException:   # interrupted (Ctrl-C): the call is left to finish alone
            with self._lock:
                call.abandoned = True
            raise
        if not finished:
            with self._lock:
                finished = call.finished   # it may have ended just now
                if not finished:
                    call.abandoned = call.hung = True
                    self._hung[key] = self._hung.get(key, 0) + 1
            if not finished:
                raise PluginTimeout(impl.plugin_name, hook_name, self.seconds)
        if call.error is not None:
            error, call.error = call.error, None
            raise error
        return call.result

    def _finished(self, worker: _Worker, call: _Call) -> bool:
        """A worker's call returned: wake the caller, or if the caller has gone, lift the hung
        mark it left. True while the worker is kept for the next call (it is idle again before
        its caller wakes, so the caller's next call finds it)."""
        with self._lock:
            if call.abandoned:
                call.result = call.error = None   # nobody will read them
            if call.hung:
                left = self._hung.get(call.key, 0) - 1
                if left > 0:
                    self._hung[call.key] = left
                else:
                    self._hung.pop(call.key, None)
            kept = len(self._idle) < WORKER_IDLE_MAX
            if kept:
                self._idle.append(worker)
            call.finished = True
            call.done.release()
            return kept

    def _retire(self, worker: _Worker) -> bool:
        """An idle worker's wait ran out: it ends unless a caller took it just now."""
        with self._lock:
            if worker in self._idle:
                self._idle.remove(worker)
                return True
            return False


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
