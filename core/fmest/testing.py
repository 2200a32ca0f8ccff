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
