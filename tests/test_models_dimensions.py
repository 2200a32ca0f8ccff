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
