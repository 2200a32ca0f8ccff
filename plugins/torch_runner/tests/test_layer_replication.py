"""Layer replication (:mod:`fmest_torch_runner.layer_replication`): the trace of an L-layer
model synthesised from traces of 1..4 layers must equal the full trace -- the same peak bytes,
per-window peaks and breakdowns, window ends, allocator replay and parameter counts -- on a
dense Llama-like model, a LoRA one, a GPT-2 one (dropout, biased layer norms, tied
embeddings) and a Qwen2-like one (tied embeddings, biases, GQA) with gradient checkpointing and
bf16 autocast. Tiny models (hidden 256-384, 7-9 layers, seq 128).
"""

from __future__ import annotations

import attrs
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from fmest.testing import TINY_LLAMA_CONFIG  # noqa: E402
from fmest_torch_runner import layer_replication as lr  # noqa: E402
from fmest_torch_runner.fake_trace import patched_mask_helper  # noqa: E402
from fmest_torch_runner.runner import RunSpec, run  # noqa: E402

TINY_QWEN2 = {"model_type": "qwen2", "hidden_size": 384, "num_hidden_layers": 8,
              "num_attention_heads": 6, "num_key_value_heads": 2, "intermediate_size": 1024,
              "vocab_size": 16000, "max_position_embeddings": 2048, "tie_word_embeddings": True,
              "hidden_act": "silu", "rms_norm_eps": 1e-06}
TINY_GPT2 = {"model_type": "gpt2", "n_embd": 256, "n_layer": 8, "n_head": 4,
             "vocab_size": 8000, "n_positions": 2048, "activation_function": "gelu_new",
             "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
             "tie_word_embeddings": True}
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
#: what a replicated result may differ in: timings and notes
_NOT_COMPARED = ("wall_seconds", "step_seconds", "notes")


def _llama(layers: int) -> dict:
    return {**TINY_LLAMA_CONFIG, "num_hidden_layers": layers}


CASES = {
    "dense_llama": RunSpec(hf_config=_llama(7), seq_len=128, micro_batch_size=2),
    "lora_llama": RunSpec(hf_config=_llama(9), seq_len=128, micro_batch_size=2,
                          technique="lora", lora_targets=ALL_LINEAR, param_dtype="bf16",
                          autocast_dtype="bf16", precision="amp"),
    # layer norms with biases, like the final norm: needs the wider reference context
    "gpt2_dropout": RunSpec(hf_config=TINY_GPT2, seq_len=128, micro_batch_size=2),
    "qwen2_gc_amp": RunSpec(hf_config=TINY_QWEN2, seq_len=128, micro_batch_size=2,
                            gradient_checkpointing=True, autocast_dtype="bf16",
                            precision="amp"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_replicated_trace_equals_the_full_trace(name, monkeypatch):
    spec = CASES[name]
    monkeypatch.setattr(lr, "MIN_LAYERS", 7)
    monkeypatch.setenv("FMEST_TRACE_REPLICATE", "0")
    full = run(spec, "fake", round_bytes=512)
    monkeypatch.setenv("FMEST_TRACE_REPLICATE", "1")
    rep = run(spec, "fake", round_bytes=512)
    assert full.status == rep.status == "ok", (full.error, rep.error)
    assert any(n.startswith("layer replication:") for n in rep.notes), rep.notes
    assert not any(n.startswith("layer replication:") for n in full.notes)
    assert rep.peak_bytes == full.peak_bytes
    assert rep.reserved_peak_bytes == full.reserved_peak_bytes
    a, b = full.to_dict(), rep.to_dict()
    assert {k: v for k, v in a.items() if k not in _NOT_COMPARED} == \
        {k: v for k, v in b.items() if k not in _NOT_COMPARED}


def test_replay_of_the_log_reproduces_the_tracker():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from fmest_torch_runner.model_builder import build_model
    from fmest_torch_runner.steps import train_steps
    from fmest_torch_runner.tracker import StorageTracker

    spec = RunSpec(hf_config=_llama(2), seq_len=64, micro_batch_size=2)
    with patched_mask_helper():
        fake_mode = FakeTensorMode()
        model = build_model(spec, "fake", fake_mode)
        with fake_mode:
            tracker = StorageTracker(round_bytes=512, record=True)
            with tracker:
                train_steps(model, spec, "fake", tracker)
    assert tracker.log
    again = StorageTracker(round_bytes=512)
    again.replay_log(tracker.log)
    assert again.events == tracker.events
    assert again.window_end == tracker.window_end
    assert again.overall_window == tracker.overall_window
    assert (again.overall.total, again.overall.by_category) == \
        (tracker.overall.total, tracker.overall.by_category)
    assert {w: (p.total, p.by_category) for w, p in again.windows.items()} == \
        {w: (p.total, p.by_category) for w, p in tracker.windows.items()}


def test_canonical_orders_runs_of_frees_only():
    log = [("a", 8, "params"), ("a", 8, "activations"), ("a", 4, "activations"),
           ("f", 2), ("f", 1), ("p", "s1_forward", "forward"), ("f", 2), ("r", 1, "grads"),
           ("f", 1), ("f", 0)]
    assert lr.canonical(log) == [("a", 8, "params"), ("a", 8, "activations"),
                                 ("a", 4, "activations"), ("f", 1), ("f", 2),
                                 ("p", "s1_forward", "forward"), ("f", 2), ("r", 1, "grads"),
                                 ("f", 0), ("f", 1)]


def test_fit_needs_the_fourth_trace_reproduced():
    spec = RunSpec(hf_config=_llama(7), seq_len=64, micro_batch_size=2)
    with patched_mask_helper():
        logs = [lr._trace_log(attrs.evolve(spec, num_layers=k), 512).log  # type: ignore
                for k in range(1, 5)]
    model = lr.fit(logs)
    assert model is not None
    assert lr.synthesise(model, 3) == logs[3]
    assert lr.synthesise(model, 0) == logs[0]
    broken = list(logs[3])
    broken.insert(len(broken) // 2, ("a", 512, "temporaries"))
    assert lr.fit([*logs[:3], broken]) is None


def test_layers_that_differ_are_traced_whole(monkeypatch):
    uniform = RunSpec(hf_config=TINY_QWEN2)
    assert lr.eligible(uniform, 7) == 8
    assert lr.eligible(uniform, 9) is None  # too few layers to gain anything
    mixed = RunSpec(hf_config={**TINY_QWEN2, "use_sliding_window": True, "sliding_window": 64,
                               "max_window_layers": 3})
    assert lr.eligible(mixed, 7) is None  # layer_types: 3 full-attention, 5 sliding
    assert lr.eligible(attrs.evolve(uniform, fsdp_world_size=2), 7) is None
    monkeypatch.setenv("FMEST_TRACE_REPLICATE", "0")
    assert lr.eligible(uniform, 7) is None
