"""LitGPT's stacks (stacks.toml [lit-gpt] and [litgpt]): each rule against a hand count from
the code it cites.

Sources: Lightning-AI/litgpt 8641822b3249bb94f068c254aa5d13decbc9f0a0 (Lit-GPT, the commit of
the resource tables in benchmarks/data/parts/r1_SOURCES.md): finetune/lora.py, lit_gpt/model.py,
lit_gpt/config.py; Lightning-AI/pytorch-lightning 71aed751f7f0ca8422ddca256e602099070f490b (the
lightning pin of that commit's requirements.txt): src/lightning/fabric/strategies/fsdp.py,
src/lightning/fabric/plugins/precision/bitsandbytes.py; bitsandbytes 0.41.1 (the tables'
version): bitsandbytes/autograd/_functions.py ``MatMul4Bit``.

Four behaviours are fmest.stacks.StackProfile fields (fsdp_no_sync_accumulation,
fsdp_flat_param_grads, quantize_head, quant_saves_gemm_inputs; memory_theory reads them with
``stack_says``); their tests turn them on and off on the shipped profile (``_proposed``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import attrs
import pytest

import fmest_memory_theory.plugin as memory_plugin
from fmest.convert import job_from_dict
from fmest.stacks import StackProfile, load_profiles, resolve_stack
from fmest.testing import new_engine
from fmest_memory_theory import estimator as E
from fmest_memory_theory import formulas as F
from fmest_memory_theory.layer import layer_activation_bytes

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import measured  # noqa: E402

PLUGINS = ((memory_plugin, "memory_theory"),)
#: Llama-2-7B (meta-llama/Llama-2-7b-hf config.json; Lit-GPT config "Llama-2-7b-hf")
H, I, L, V = 4096, 11008, 32, 32000
BLOCK_PARAMS = 4 * H * H + 3 * H * I + 2 * H      # q, k, v, o + gate, up, down + 2 RMSNorms
T = 1304                                          # the longest Alpaca sample, Llama 2 tokenizer
A100_40 = {"gpu": "A100-SXM-40GB"}


def _profile(name: str) -> StackProfile:
    return next(p for p in load_profiles() if p.name == name)


FIELDS = ("fsdp_no_sync_accumulation", "fsdp_flat_param_grads", "quantize_head",
          "quant_saves_gemm_inputs")


def _proposed(**flags) -> StackProfile:
    """The shipped [lit-gpt] profile with its four behaviours on (``flags`` turns some off)."""
    return attrs.evolve(_profile("lit-gpt"), **{**{name: True for name in FIELDS}, **flags})


def _job(technique="lora", gpus=1, accum=128, mb=1, ckpt="none"):
    training = {"technique": technique, "stack": "lit-gpt", "dtype": "bf16",
                "precision": "pure", "seq_len": T, "micro_batch_size": mb,
                "grad_accum_steps": accum, "lora_rank": 8, "lora_alpha": 16,
                "lora_target_modules": ["q_proj", "v_proj"], "activation_checkpointing": ckpt}
    if technique == "qlora":
        training["quantization_bits"] = 4
    par = {"fsdp": "full_shard"} if gpus > 1 else {}
    return job_from_dict({"model": "meta-llama/Llama-2-7b-hf", "training": training,
                          "parallelism": par, "hardware": {**A100_40, "gpus_per_node": gpus}})


def _ctx(job, profile=None):
    ctx = new_engine(*PLUGINS).context(job)
    if profile is None:
        return ctx
    stack = resolve_stack(profile, job, reason="test: proposed profile fields")
    return attrs.evolve(ctx, transforms=attrs.evolve(ctx.transforms, stack=stack))


def _setup_and_params(job, profile=None):
    setup = E.job_setup(job, _ctx(job, profile))
    stage = E.Stage(name="all", layers=L, has_embedding=True, has_head=True, inflight=1)
    return setup, E.stage_params(setup, stage)


# --- the profiles ------------------------------------------------------------------------------

def test_litgpt_profiles_are_their_own_and_sourced():
    """``litgpt`` is no longer an alias of ``pytorch``; every value set is sourced."""
    for name in ("lit-gpt", "litgpt"):
        profile = _profile(name)
        for key in ("fused", "attention_kernel", "overlap", "optimizer_impl",
                    "host_model_copy"):
            assert key in profile.sources, (name, key)
        assert profile.host_model_copy == "meta_init"    # init_module(empty_init=...) / lazy_load
        assert not profile.fused                          # op-by-op model code, no compile
    assert "litgpt" not in _profile("pytorch").aliases
    ctx = new_engine().context(_job())
    assert ctx.transforms.stack.name == "lit-gpt"


# --- benchmarks/measured.py mapping ------------------------------------------------------------

def _litgpt_rows(kind=None):
    """The 2023 Lit-GPT resource tables (the 2024 config-hub rows run litgpt's own profile:
    tests/test_litgpt2024_profile.py)."""
    return [r for r in measured.load_rows(kind) if r["stack"] == "litgpt"
            and r["source"] == "litgpt-resource-tables-2023-10"]


def test_litgpt_step_rows_state_no_tokens_per_iteration():
    """get_batch (finetune/lora.py at 8641822) pads each micro-batch to its own longest sample;
    the tables publish only the dataset's longest, so no step row can say its tokens."""
    rows = [r for r in _litgpt_rows("throughput") if r["technique"] in ("lora", "qlora")]
    assert rows
    for row in rows:
        job, why = measured.row_to_job(row)
        assert job is None and "tokens per iteration not stated" in why, row["id"]


def test_litgpt_memory_rows_run_the_lit_gpt_profile_at_the_longest_sample():
    rows = [r for r in _litgpt_rows("memory") if r["technique"] in ("lora", "qlora")]
    assert rows
    for row in rows:
        job, why = measured.row_to_job(row)
        assert job is not None, (row["id"], why)
        assert job["training"]["stack"] == "lit-gpt"
        assert job["training"]["seq_len"] == int(row["seq_len"])   # longest_seq_ix first


def test_phi_rows_run_litgpt_fused_tanh_gelu():
    """Lit-GPT's GptNeoxMLP runs F.gelu(x, approximate="tanh") (phi-1_5 config
    gelu_approximate="tanh"), one op that saves only its input, where transformers'
    ``gelu_new`` saves 3 more intermediate-sized tensors (formulas.ACTIVATION_EXTRA_SAVED)."""
    row = next(r for r in _litgpt_rows("memory")
               if r["id"] == "r1-litgpt-phi-1-5-1-3-b-lora-none-g1-mb1-mem")
    job, _ = measured.row_to_job(row)
    assert job["model_config"]["hidden_act"] == "gelu_pytorch_tanh"
    llama = next(r for r in _litgpt_rows("memory")
                 if r["id"] == "r1-litgpt-llama-2-7-b-lora-none-g1-mb1-mem")
    assert "model_config" not in measured.row_to_job(llama)[0]
    engine = new_engine(*PLUGINS)
    fused = engine.estimate(job_from_dict(job), quantities=("memory",)).memory
    hf = dict(job)
    hf.pop("model_config")
    eager = engine.estimate(job_from_dict(hf), quantities=("memory",)).memory
    tokens, inter, layers = 1044, 8192, 24         # longest sample (phi tokenizer), phi-1.5
    expected = F.ACTIVATION_EXTRA_SAVED["gelu_new"] * tokens * inter * 2 * layers
    diff = eager.components["activations"] - fused.components["activations"]
    assert diff == pytest.approx(expected, rel=1e-6)


def test_config_reader_restates_phi_activation(tmp_path):
    from fmest.configs import load_configs

    path = tmp_path / "lora.yaml"
    path.write_text("checkpoint_dir: checkpoints/microsoft/phi-1_5\nprecision: bf16-true\n"
                    "lora_r: 8\ndevices: 1\ntrain:\n  micro_batch_size: 2\n"
                    "  max_seq_length: 512\n")
    data = load_configs([str(path)]).data
    assert data["model_config"]["hidden_act"] == "gelu_pytorch_tanh"
    assert data["training"]["stack"] == "litgpt"
    path.write_text("checkpoint_dir: checkpoints/meta-llama/Llama-2-7b-hf\nlora_r: 8\n")
    assert "model_config" not in load_configs([str(path)]).data


# --- the profile's behaviour fields ---------------------------------------------------------------

def test_a_profile_without_the_behaviours_keeps_them_off():
    """Eager PyTorch (no such field on its profile) accumulates sharded gradients."""
    setup, params = _setup_and_params(_job(gpus=2, accum=64, ckpt="full"), _profile("pytorch"))
    assert not any(E.stack_says(setup.stack, name) for name in FIELDS)
    assert E._no_sync_accumulated_bytes(setup, params) == 0.0


def test_fsdp1_no_sync_keeps_whole_block_gradients():
    """Fabric no_backward_sync = FSDP1 no_sync(): unsharded gradients until the last
    micro-batch; use_orig_params=True FlatParameters require grad when any tensor does, so
    each Block unit (it holds LoRA A/B) accumulates a gradient of the whole Block in bf16;
    the root unit (wte, ln_f, lm_head) is frozen."""
    job = _job(gpus=2, accum=64, ckpt="full")
    setup, params = _setup_and_params(job, _proposed())
    acc = E._no_sync_accumulated_bytes(setup, params)
    assert acc == pytest.approx(L * BLOCK_PARAMS * 2, rel=1e-9)     # 12.95 GB
    buffers = E.framework_buffer_terms(setup, params, E.model_state_terms(setup, params),
                                       E.Stage(name="all", layers=L, has_embedding=True,
                                               has_head=True, inflight=1))
    assert buffers.unsharded_accumulation and buffers.accumulated == acc
    # the whole estimate rises by the accumulated gradients (peak inside backward)
    base = E.estimate_bytes(job, _ctx(job, _proposed(fsdp_no_sync_accumulation=False)))
    with_acc = E.estimate_bytes(job, _ctx(job, _proposed()))
    sharded_lora_grads = base.components["gradients"]
    assert with_acc.total_bytes - base.total_bytes == pytest.approx(
        acc - sharded_lora_grads, rel=0.02)
    # no accumulation (one micro-batch per step): nothing accumulates
    one = _job(gpus=2, accum=1, ckpt="full")
    assert E._no_sync_accumulated_bytes(*_setup_and_params(one, _proposed())) == 0.0


def test_fsdp2_no_sync_keeps_only_adapter_gradients():
    """LitGPT since 2024 shards LoRA with FSDP2 (per-parameter): only the adapters have
    gradients to accumulate unsharded."""
    setup, params = _setup_and_params(_job(gpus=2, accum=64, ckpt="full"),
                                      _proposed(fsdp_flat_param_grads=False))
    adapters = L * 2 * 8 * (H + H)                 # q and v: A (r x h) + B (h x r)
    assert E._no_sync_accumulated_bytes(setup, params) == pytest.approx(adapters * 2)


def test_bnb_precision_quantizes_the_head():
    """BitsandbytesPrecision.init_context swaps every nn.Linear, lm_head included."""
    job = _job(technique="qlora")
    setup_q, params = _setup_and_params(job, _proposed())
    setup_k, _ = _setup_and_params(job, _proposed(quantize_head=False))
    quantized, _ = E._base_weight_bytes(setup_q, params)
    kept, _ = E._base_weight_bytes(setup_k, params)
    nf4 = F.nf4_bytes_per_param(job.training.double_quantization)
    assert kept - quantized == pytest.approx(V * H * (2 - nf4), rel=1e-9)


def test_bnb_041_matmul4bit_keeps_its_input():
    """MatMul4Bit.forward keeps ctx.tensors = (A, B): per layer the qkv input and the MLP
    input (norm outputs, h each) and the down projection's input (the SwiGLU product, i) join
    what LoRA on q/v keeps; the LoRA adapter reads its own dropout copy (lit-gpt
    finetune/lora.py lora_dropout 0.05), not the qkv input, and the output projection's input
    is the attention kernel's own output."""
    job = _job(technique="qlora")
    setup, _ = _setup_and_params(job, _proposed())
    base, _ = _setup_and_params(job, _proposed(quant_saves_gemm_inputs=False))
    kept, _ = layer_activation_bytes(setup.model, setup.dims, setup.lora, E._layer_inputs(setup))
    plain, _ = layer_activation_bytes(base.model, base.dims, base.lora, E._layer_inputs(base))
    assert kept - plain == pytest.approx(T * (2 * H + I) * 2, rel=1e-9)


def test_quantized_head_dequantized_at_backward_start():
    """Lightning quantizes from an fp16 copy, so dequantize_4bit returns fp16 and MatMul4Bit
    casts it to bf16 beside it: 4 bytes per head parameter at the start of backward."""
    job = _job(technique="qlora")
    setup, params = _setup_and_params(job, _proposed())
    base, bparams = _setup_and_params(job, _proposed(quantize_head=False))
    stage = E.Stage(name="all", layers=L, has_embedding=True, has_head=True, inflight=1)

    def bwd_extra(s, p):
        state = E.model_state_terms(s, p)
        bufs = E.framework_buffer_terms(s, p, state, stage)
        return E.activation_terms(s, p, state, bufs, stage).logits_bwd_extra

    assert bwd_extra(setup, params) - bwd_extra(base, bparams) == pytest.approx(V * H * 4)
