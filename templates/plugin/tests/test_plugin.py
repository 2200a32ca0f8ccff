"""The plugin on a fresh engine (fmest.testing): its GPU resolves and its prices are quoted."""

import fmest_yourplugin.plugin as plugin
from fmest.testing import new_engine


def test_gpu_and_prices_are_registered():
    engine = new_engine((plugin, "yourplugin"))
    assert engine.registries.gpus.get("YOURGPU") is plugin.GPU
    quotes = [q for q, source in engine.registries.prices.with_sources()
              if source == "yourplugin"]
    assert {q.price_type for q in quotes} == {"on_demand", "spot"}
    assert engine.load_errors == []
