"""The alias table: fine-tunes answer offline as their base architecture, with a warning."""

from __future__ import annotations

import json

import pytest

from fmest.models.aliases import ALIAS_FILE, alias_loader, match_alias
from fmest.models.local import _ShippedPresets, resolve_model
from fmest.models.presets import find_preset, load_preset


def test_every_alias_entry_has_a_source_and_a_known_target():
    table = json.loads(ALIAS_FILE.read_text())
    assert table["retrieved"]
    for entry in table["exact"]:
        assert entry["source"].startswith("https://"), entry
        assert find_preset(entry["preset"]) is not None, entry["preset"]
    for rule in table["name_rules"]:
        assert rule["remove"] and rule["source"].startswith("https://"), rule


@pytest.mark.parametrize("name, base", [
    ("bigscience/bloomz-7b1", "bigscience/bloom-7b1"),
    ("meta-llama/Llama-2-7b-chat-hf", "meta-llama/Llama-2-7b-hf"),
    ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B"),
    ("google/gemma-2-9b-it", "google/gemma-2-9b"),
    ("HuggingFaceH4/zephyr-7b-beta", "mistralai/Mistral-7B-v0.1"),
    ("lmsys/vicuna-7b-v1.5", "meta-llama/Llama-2-7b-hf"),
    ("teknium/OpenHermes-2.5-Mistral-7B", "mistralai/Mistral-7B-v0.1"),
    ("bigscience/T0pp", "google/flan-t5-xxl"),
])
def test_alias_maps_to_base_with_warning(name, base):
    spec = alias_loader(name, _ShippedPresets())()
    assert spec.name == name
    assert spec.param_counts().total == load_preset(base).param_counts().total
    assert any(f"estimated as {base!r}" in w and "alias table" in w for w in spec.warnings)


def test_rules_match_whole_name_parts_only():
    assert match_alias("google/gemma-2-9b-itx", find_preset) is None
    assert match_alias("someone/unknown-model-Instruct", find_preset) is None
    assert match_alias("", find_preset) is None


def test_bloomz_resolves_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = resolve_model("bigscience/bloomz-7b1")
    assert spec.name == "bigscience/bloomz-7b1"
    assert spec.param_counts().total == 7069016064  # bloom-7b1's published count
    assert any("bloom-7b1" in w for w in spec.warnings)


def test_hub_config_over_the_size_cap_is_refused(monkeypatch):
    """A Hub endpoint that answers more than HUB_CONFIG_MAX_BYTES is refused, not read whole."""
    import io
    import urllib.request

    from fmest.models import local

    class Answer(io.BytesIO):
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    big = b'{"x": "' + b"a" * (local.HUB_CONFIG_MAX_BYTES + 10) + b'"}'
    monkeypatch.setattr(urllib.request, "urlopen", lambda req, timeout: Answer(big))
    data, err = local._fetch_with_deadline("org/model", "main", 2.0)
    assert data is None and "over 1,048,576 bytes" in err
    small = b'{"model_type": "llama"}'
    monkeypatch.setattr(urllib.request, "urlopen", lambda req, timeout: Answer(small))
    assert local._fetch_with_deadline("org/model", "main", 2.0) == ({"model_type": "llama"}, None)
