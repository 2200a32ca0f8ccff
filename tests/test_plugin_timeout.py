"""A deadline per plugin call (``Engine(plugin_timeout=...)``, ``FMEST_PLUGIN_TIMEOUT``): a plugin
that does not answer in time is a failure naming it, the other plugins answer, later calls to
it fail at once while its call still runs, and without a deadline every hook is called
directly on the calling thread."""

from __future__ import annotations

import contextvars
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import fmest_memory_theory.plugin as theory
from fmest.engine import Engine
from fmest.errors import InputError, PluginError
from fmest.estimates import MemoryEstimate, Provenance
from fmest.hookspecs import hookimpl
from fmest.job import Job, Training
from fmest.plugins import PLUGIN_TIMEOUT_ENV, parse_plugin_timeout
from fmest.testing import new_pm

GIB = 1024**3
JOB = Job(model="meta-llama/Llama-2-7b-hf", training=Training(seq_len=1024))
DEADLINE = 0.3
MESSAGE = (f"fmest_estimate_memory took longer than {DEADLINE:g} s (FMEST_PLUGIN_TIMEOUT / "
           "fmest serve --plugin-timeout); its answer is left out")
#: a test's hung threads run at most this long, whatever happens to the test
CAP_SECONDS = 10.0


@pytest.fixture
def release():
    """Set at the end of each test: the stuck plugins' threads return and end."""
    event = threading.Event()
    yield event
    event.set()


class Stuck:
    """``fmest_estimate_memory`` waits on an event (a plugin blocked on I/O or a lock)."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release
        self.calls = 0

    @hookimpl
    def fmest_estimate_memory(self, job, ctx):
        self.calls += 1
        self.release.wait(CAP_SECONDS)
        return None


class Busy(Stuck):
    """``fmest_estimate_memory`` spins in pure Python (holding the GIL between switches)."""

    @hookimpl
    def fmest_estimate_memory(self, job, ctx):
        self.calls += 1
        end = time.monotonic() + CAP_SECONDS
        while not self.release.is_set() and time.monotonic() < end:
            pass
        return None


class Seen:
    """Records the thread (and a context variable) each memory call ran with."""

    VAR: contextvars.ContextVar[str] = contextvars.ContextVar("fmest_test_var", default="unset")

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.values: list[str] = []

    @hookimpl
    def fmest_estimate_memory(self, job, ctx):
        self.threads.append(threading.current_thread())
        self.values.append(self.VAR.get())
        return MemoryEstimate(total_bytes=GIB, components={"weights": GIB},
                              provenance=Provenance(basis="analytic"))


def _engine(*plugins, timeout=DEADLINE) -> Engine:
    return Engine(new_pm((theory, "memory_theory"), *plugins), plugin_timeout=timeout)


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


@pytest.mark.parametrize("kind", [Stuck, Busy])
def test_a_plugin_past_the_deadline_is_named_and_the_others_answer(kind, release):
    stuck = kind(release)
    eng = _engine((stuck, "stuck"))
    report, took = _timed(lambda: eng.estimate(JOB, quantities=("memory",)))
    assert took < 1.0
    assert report.memory is not None and report.memory.provenance.plugin == "memory_theory"
    failures = report.decisions["memory"].failures
    assert [(f.plugin, f.error) for f in failures] == [("stuck", MESSAGE)]
    assert any(w.startswith("plugin 'stuck' failed on memory: " + MESSAGE) for w in report.warnings)
    assert report.to_dict()["decisions"]["memory"]["failures"] == [
        {"plugin": "stuck", "error": MESSAGE}]
    # the same answer as an engine without the stuck plugin
    plain = Engine(new_pm((theory, "memory_theory")), plugin_timeout=0).estimate(
        JOB, quantities=("memory",))
    assert report.memory.total_bytes == plain.memory.total_bytes

    # remembered: the next estimate does not wait again, nor start another thread
    report, took = _timed(lambda: eng.estimate(JOB, quantities=("memory",)))
    assert took < DEADLINE / 2
    assert [(f.plugin, f.error) for f in report.decisions["memory"].failures] == \
        [("stuck", MESSAGE)]
    assert stuck.calls == 1
    assert eng._deadline is not None and eng._deadline.hung() == [
        ("stuck", "fmest_estimate_memory")]

    # once its call returns after all, the plugin is asked again
    release.set()
    end = time.monotonic() + 2
    while eng._deadline.hung() and time.monotonic() < end:
        time.sleep(0.01)
    assert eng._deadline.hung() == []
    report = eng.estimate(JOB, quantities=("memory",))
    assert stuck.calls == 2 and report.decisions["memory"].failures == ()


def test_without_a_deadline_hooks_run_on_the_calling_thread(monkeypatch):
    monkeypatch.delenv(PLUGIN_TIMEOUT_ENV, raising=False)
    seen = Seen()
    eng = Engine(new_pm((seen, "seen")))
    assert eng.plugin_timeout is None and eng._deadline is None
    eng.estimate(JOB, quantities=("memory",))
    assert seen.threads == [threading.current_thread()]


def test_with_a_deadline_hooks_see_the_callers_context():
    seen = Seen()
    eng = Engine(new_pm((seen, "seen")), plugin_timeout=5)
    token = Seen.VAR.set("caller's")
    try:
        report = eng.estimate(JOB, quantities=("memory",))
    finally:
        Seen.VAR.reset(token)
    assert report.memory.provenance.plugin == "seen"
    assert seen.threads and seen.threads[0] is not threading.current_thread()
    assert seen.values == ["caller's"]


def test_concurrent_callers_each_get_their_own_deadline(release):
    """The service's threads: no call waits behind another's, a stuck plugin fails each of
    the calls that were already waiting on it, and every answer is the same."""
    eng = _engine((Stuck(release), "stuck"))
    results: list = []

    def ask() -> None:
        report, took = _timed(lambda: eng.estimate(JOB, quantities=("memory",)))
        results.append((report.memory.total_bytes,
                        [f.plugin for f in report.decisions["memory"].failures], took))

    threads = [threading.Thread(target=ask) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert len(results) == 6
    assert len({r[0] for r in results}) == 1 and all(r[1] == ["stuck"] for r in results)
    assert max(r[2] for r in results) < 1.5
    assert eng._deadline is not None and eng._deadline.hung() == [
        ("stuck", "fmest_estimate_memory")]
    release.set()
    end = time.monotonic() + 2
    while eng._deadline.hung() and time.monotonic() < end:
        time.sleep(0.01)
    assert eng._deadline.hung() == []


def test_a_forked_child_starts_afresh():
    """The parent's worker threads and hung calls do not exist in a forked child (a server
    that forks its workers): the child's first call starts over instead of waiting on them."""
    seen = Seen()
    eng = Engine(new_pm((seen, "seen")), plugin_timeout=5)
    eng.estimate(JOB, quantities=("memory",))
    deadline = eng._deadline
    assert deadline is not None and deadline._idle
    deadline._hung[("seen", "fmest_estimate_memory")] = 1
    deadline._pid = -1     # as if this were the child of the process that made the engine
    report = eng.estimate(JOB, quantities=("memory",))
    assert report.memory.provenance.plugin == "seen" and len(seen.threads) == 2
    assert deadline.hung() == []


def test_raising_plugins_and_propagated_errors_cross_the_worker_thread():
    class Broken:
        @hookimpl
        def fmest_estimate_memory(self, job, ctx):
            raise RuntimeError("boom")

    class Refuses:
        @hookimpl
        def fmest_estimate_memory(self, job, ctx):
            raise InputError("training.seq_len", "too long for this plugin", value=1)

    report = _engine((Broken(), "broken")).estimate(JOB, quantities=("memory",))
    assert [(f.plugin, f.error) for f in report.decisions["memory"].failures] == \
        [("broken", "RuntimeError: boom")]
    with pytest.raises(InputError, match="too long for this plugin"):
        _engine((Refuses(), "refuses")).estimate(JOB, quantities=("memory",))


def test_a_stuck_model_resolver_is_a_plugin_error_naming_it(release):
    class Resolver:
        @hookimpl(tryfirst=True)
        def fmest_resolve_model(self, name, registries):
            release.wait(CAP_SECONDS)

    eng = _engine((Resolver(), "resolver"))
    t0 = time.perf_counter()
    with pytest.raises(PluginError) as err:
        eng.estimate(JOB, quantities=("memory",))
    assert time.perf_counter() - t0 < 1.0
    assert err.value.plugin == "resolver"
    assert "fmest_resolve_model took longer than 0.3 s (FMEST_PLUGIN_TIMEOUT" in str(err.value)
    t0 = time.perf_counter()
    with pytest.raises(PluginError, match="resolver"):
        eng.estimate(JOB, quantities=("memory",))
    assert time.perf_counter() - t0 < DEADLINE / 2


@pytest.mark.parametrize(("raw", "seconds"), [
    ("2.5", 2.5), (" 30 ", 30.0), ("", None), ("  ", None), ("0", None), ("0.0", None),
    (None, None), (1, 1.0)])
def test_the_setting_parses(raw, seconds):
    assert parse_plugin_timeout(raw) == seconds


@pytest.mark.parametrize("raw", ["abc", "-1", "nan", "inf", "1e30", "30s", True])
def test_a_bad_setting_names_the_variable_and_what_it_accepts(raw):
    with pytest.raises(InputError) as err:
        parse_plugin_timeout(raw)
    assert err.value.field == "FMEST_PLUGIN_TIMEOUT"
    assert "number of seconds > 0" in str(err.value) and "0 for no deadline" in str(err.value)


def test_the_engine_reads_the_environment(monkeypatch):
    monkeypatch.setenv(PLUGIN_TIMEOUT_ENV, "2.5")
    assert Engine(new_pm()).plugin_timeout == 2.5
    assert Engine(new_pm(), plugin_timeout=0).plugin_timeout is None   # the argument wins
    assert Engine(new_pm(), plugin_timeout=4).plugin_timeout == 4.0
    for empty in ("", "0"):
        monkeypatch.setenv(PLUGIN_TIMEOUT_ENV, empty)
        assert Engine(new_pm()).plugin_timeout is None
    monkeypatch.setenv(PLUGIN_TIMEOUT_ENV, "soon")
    with pytest.raises(InputError, match="FMEST_PLUGIN_TIMEOUT: must be a number of seconds"):
        Engine(new_pm())
    with pytest.raises(InputError, match="plugin_timeout"):
        Engine(new_pm(), plugin_timeout=-1)


def test_a_bad_setting_is_one_line_from_the_cli(monkeypatch, capsys):
    from fmest.cli import main

    monkeypatch.setenv(PLUGIN_TIMEOUT_ENV, "soon")
    monkeypatch.setenv("FMEST_NO_ENTRYPOINTS", "1")
    assert main(["gpus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fmest: error: FMEST_PLUGIN_TIMEOUT: must be a number of seconds")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_hung_call_does_not_hold_up_the_interpreters_exit(tmp_path):
    script = textwrap.dedent("""
        import threading
        import fmest_memory_theory.plugin as theory
        from fmest.engine import Engine
        from fmest.hookspecs import hookimpl
        from fmest.job import Job
        from fmest.testing import new_pm

        class Stuck:
            @hookimpl
            def fmest_estimate_memory(self, job, ctx):
                threading.Event().wait()

        eng = Engine(new_pm((theory, "memory_theory"), (Stuck(), "stuck")), plugin_timeout=0.2)
        report = eng.estimate(Job(model="meta-llama/Llama-2-7b-hf"), quantities=("memory",))
        print(report.decisions["memory"].failures[0].plugin)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=20)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stuck"
