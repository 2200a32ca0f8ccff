"""Raw dimensions (--hidden-size ...) give a Llama-style config that matches the preset."""

from __future__ import annotations

import pytest

from fmest.errors import InputError
from fmest.models.hf import config_from_dimensions, spec_from_hf_config
from fmest.models.presets import load_preset


def test_llama2_7b_from_dimensions():
    cfg = config_from_dimensions(hidden_size=4096, num_layers=32, num_heads=32,
                                 intermediate_size=11008, vocab_size=32000)
    spec = spec_from_hf_config(cfg, name="raw", source="flags")
    assert spec.param_counts().total == load_preset("meta-llama/Llama-2-7b-hf").param_counts().total
    assert not spec.warnings


def test_defaults_and_missing():
    cfg = config_from_dimensions(hidden_size=4096, num_layers=2, num_heads=32)
    assert cfg["intermediate_size"] == 11008 and cfg["num_key_value_heads"] == 32
    with pytest.raises(InputError) as err:
        config_from_dimensions(hidden_size=4096, num_layers=2)
    assert err.value.field == "num_heads"


def test_weights_only_from_param_count():
    spec = spec_from_hf_config({"_fmest_params": 7e9}, name="7b", source="--params")
    assert spec.param_counts().total == 7_000_000_000
    assert any("weights-only" in w for w in spec.warnings)
    with pytest.raises(InputError):
        spec_from_hf_config({"_fmest_params": "lots"}, name="x", source="--params")
