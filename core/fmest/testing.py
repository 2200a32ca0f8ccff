"""Test helpers for fmest and for plugin authors (a pytest plugin, auto-loaded).

Fixtures:

* ``fmest_pm`` — a fresh plugin manager with the core's default plugins and *no* installed
  entry-point plugins; register the plugins under test on it.
* ``fmest_engine_factory`` — ``factory(*plugins)`` returning an :class:`fmest.engine.Engine`
  over a fresh manager with the given plugins (modules or objects, optionally ``(plugin, name)``
  pairs) registered.
"""

from __future__ import annotations

import pytest

#: A two-layer Llama config small enough to trace in seconds (the torch runner's tests)
TINY_LLAMA_CONFIG = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "num_key_value_heads": 4,
                     "intermediate_size": 688, "vocab_size": 4000,
                     "max_position_embeddings": 1024, "tie_word_embeddings": False}


def new_pm(*plugins, entrypoints: bool = False, defaults: bool = True):
    """A fresh plugin manager: default plugins plus ``plugins`` (each a module/object or a
    ``(plugin, name)`` pair)."""
    from fmest.plugins import new_plugin_manager

    pm = new_plugin_manager(entrypoints=entrypoints, defaults=defaults, disable=set(), only=None)
    for p in plugins:
        plugin, name = p if isinstance(p, tuple) else (p, getattr(p, "__name__", None))
        pm.register(plugin, name=name)
    pm.check_pending()
    return pm


def new_engine(*plugins, entrypoints: bool = False):
    """An engine over :func:`new_pm`."""
    from fmest.engine import Engine

    return Engine(new_pm(*plugins, entrypoints=entrypoints))


@pytest.fixture
def fmest_pm():
    return new_pm()


@pytest.fixture
def fmest_engine_factory():
    return new_engine


def run_cli(engine, argv, capsys) -> tuple[int, str, str]:
    """``fmest ARGV`` in-process over ``engine``: ``(exit code, stdout, stderr)``, an argparse
    refusal's ``SystemExit`` read as its code (pytest's ``capsys`` captures the output)."""
    from fmest.cli import main

    capsys.readouterr()
    try:
        rc = main(argv, engine=engine)
    except SystemExit as exc:  # argparse refusals
        rc = exc.code if isinstance(exc.code, int) else 2
    out = capsys.readouterr()
    return rc, out.out, out.err


def planner_engine_errors(engine, job, constraints, *, select=None, n: int = 40,
                          seed: int = 0) -> list:
    """How the planner's array mirror agrees with the engine: evaluate ``constraints`` on
    ``job`` (:func:`fmest.plan.planner.evaluate_space`), draw up to ``n`` configurations
    (seeded; ``select(res, ctx)`` -> a boolean mask restricts the draw) and re-estimate each
    with the engine's theory; returns ``(config job, memory error, step-time error)`` per draw,
    errors as planner / engine - 1."""
    import numpy as np

    from fmest.plan.planner import config_job, evaluate_space

    res, _, _, _, ctx = evaluate_space(job, constraints, engine=engine)
    rows = np.arange(len(res["mb"])) if select is None else np.flatnonzero(select(res, ctx))
    out = []
    for i in np.random.default_rng(seed).choice(rows, size=min(n, rows.size), replace=False):
        j = config_job(job, res, int(i), ctx["shardings"], method="theory")
        report = engine.estimate(j, quantities=("memory", "time"))
        out.append((j, res["memory"][i] / report.memory.total_bytes - 1,
                    res["step"][i] / report.time.step_seconds - 1))
    return out


def fsdp_full_shard_rows(res, ctx):
    """A :func:`planner_engine_errors` selection: FSDP full-shard configurations without a
    pipeline."""
    import numpy as np

    names = [name for name, _ in ctx["shardings"]]
    return (np.asarray([names[int(h)] == "fsdp_full_shard" for h in res["hidx"]])
            & (np.asarray(res["pp"]) == 1))
