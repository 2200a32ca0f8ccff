"""torch.nn.LayerNorm models save their norm input without RMSNorm's explicit fp32 upcast and
pre-scale copy (fmest_memory_theory.formulas.LAYER_NORM_MODEL_TYPES): the compute dtype, or
fp32 when torch.autocast casts the input (layer_norm is on autocast's fp32 list); MPT's
low-precision LayerNorm keeps the compute dtype under autocast too."""

from __future__ import annotations

import pytest

pytest.importorskip("fmest_memory_theory")

from fmest_memory_theory import formulas as F  # noqa: E402
from fmest_memory_theory.layer import LayerInputs, norm_block_bytes  # noqa: E402

TOKENS, HIDDEN = 4096, 1024


def _inputs(layer_norm: str, autocast: bool, trainable: bool = True) -> LayerInputs:
    return LayerInputs(tokens=TOKENS, batch=1, seq=TOKENS, act_bytes=2, tp=1,
                       sequence_parallel=False, attention="sdpa", compiled=False,
                       trainable_all=trainable, adapter_bytes=2, checkpointing="none",
                       autocast=autocast, layer_norm=layer_norm)


def test_rmsnorm_keeps_fp32_input_and_prescale_copy():
    assert norm_block_bytes(HIDDEN, _inputs("", False), False) == TOKENS * HIDDEN * (4 + 2)
    assert norm_block_bytes(HIDDEN, _inputs("", False, trainable=False), False) \
        == TOKENS * HIDDEN * 4


@pytest.mark.parametrize("autocast, per_element", [(False, 2), (True, 4)])
def test_native_layer_norm_keeps_its_input_only(autocast, per_element):
    assert norm_block_bytes(HIDDEN, _inputs("native", autocast), False) \
        == TOKENS * HIDDEN * per_element


def test_low_precision_layer_norm_ignores_autocast():
    assert norm_block_bytes(HIDDEN, _inputs("low", True), False) == TOKENS * HIDDEN * 2


def test_model_types():
    assert F.LAYER_NORM_MODEL_TYPES["gpt2"] == "native"
    assert F.LAYER_NORM_MODEL_TYPES["mpt"] == "low"
    assert "llama" not in F.LAYER_NORM_MODEL_TYPES


def test_engine_uses_it_for_a_layer_norm_preset():
    from fmest import to_job
    from fmest.testing import new_engine

    engine = new_engine(entrypoints=True)

    def acts(model: str) -> float:
        job = to_job({"model": model, "training": {"seq_len": 1024, "dtype": "bf16",
                                                   "precision": "pure"},
                      "hardware": {"gpu": "A100-80GB"}})
        return engine.estimate(job, quantities=("memory",)).memory.components["activations"]

    import fmest_memory_theory.formulas as formulas

    with_ln = acts("gpt2")
    saved = dict(formulas.LAYER_NORM_MODEL_TYPES)
    try:
        formulas.LAYER_NORM_MODEL_TYPES.clear()
        without = acts("gpt2")
    finally:
        formulas.LAYER_NORM_MODEL_TYPES.update(saved)
    assert with_ln < without
