"""Tests of the time_roofline plugin: FLOP formulas against torch's FlopCounterMode on tiny
real models, properties of the step time and workload arithmetic (dataset files are counted at
the input door: tests/test_datasets.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fmest_time_roofline.estimator as estimator
import fmest_time_roofline.plugin as plugin
from fmest.convert import job_from_dict
from fmest.testing import new_engine
from fmest_time_roofline import formulas as F

TINY = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688,
        "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
        "vocab_size": 1000, "max_position_embeddings": 512, "tie_word_embeddings": False}


@pytest.fixture
def engine():
    return new_engine((plugin, "time_roofline"))


def _job(**over):
    base = {"model": "meta-llama/Llama-2-7b-hf",
            "training": {"seq_len": 2048, "micro_batch_size": 1},
            "hardware": {"gpu": "H100-SXM-80GB"}}
    for k, v in over.items():
        base.setdefault(k, {}).update(v) if isinstance(v, dict) else base.__setitem__(k, v)
    return job_from_dict(base)


def _time(engine, job):
    return engine.estimate(job, quantities=("time", "tokens"))


# -- FLOPs vs torch.utils.flop_counter on real (tiny) transformers models -----------------

def _counted_step_flops(model, inputs):
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        out = model(input_ids=inputs, labels=inputs)
        out.loss.backward()
    return counter.get_total_flops()


def _tiny_model(cfg=TINY):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**{k: v for k, v in cfg.items() if k != "model_type"})
    config._attn_implementation = "eager"  # eager bmm attention is counted by FlopCounterMode
    return transformers.LlamaForCausalLM(config), torch


def test_full_training_flops_match_flop_counter(engine):
    model, torch = _tiny_model()
    b, s = 2, 128
    counted = _counted_step_flops(model, torch.randint(0, 1000, (b, s)))
    spec = engine.resolve_model(job_from_dict({"model": "tiny", "model_config": TINY}))
    # eager attention computes the whole s x s square (masked), so no causal halving here
    per_token = 3 * F.linear_forward_flops_per_token(spec) \
        + 3 * F.attention_forward_flops_per_token(spec, s, causal=False)
    assert counted == pytest.approx(per_token * b * s, rel=0.01)


def test_lora_flops_match_flop_counter(engine):
    peft = pytest.importorskip("peft")
    model, torch = _tiny_model()
    r = 8
    model = peft.get_peft_model(model, peft.LoraConfig(r=r, target_modules=["q_proj", "v_proj"],
                                                       lora_dropout=0.0))
    b, s = 2, 64
    counted = _counted_step_flops(model, torch.randint(0, 1000, (b, s)))
    spec = engine.resolve_model(job_from_dict({"model": "tiny", "model_config": TINY}))
    from fmest.job import Training
    from fmest.physics.counting import lora_modules

    mods = lora_modules(spec, Training(technique="lora", lora_rank=r))
    ours = F.training_flops_per_token(spec, seq_len=s, technique="lora", lora_modules=mods,
                                      lora_rank=r)["model"]
    ours -= 3 * F.attention_forward_flops_per_token(spec, s, causal=True)
    ours += 3 * F.attention_forward_flops_per_token(spec, s, causal=False)  # eager square
    # autograd skips input gradients that nothing needs: layer 0's q/k/v projections and
    # lora_A read the (frozen) embeddings, so their dX is never computed.
    h, kv = TINY["hidden_size"], 2 * 32
    skipped = 2 * h * (h + 2 * kv) + 2 * 2 * r * h
    assert counted == pytest.approx((ours - skipped) * b * s, rel=0.01)


def test_frozen_base_is_4n_not_6n(engine):
    spec = engine.resolve_model(_job())
    full = F.training_flops_per_token(spec, seq_len=8, technique="full")["model"]
    lora = F.training_flops_per_token(spec, seq_len=8, technique="lora")["model"]
    assert lora / full == pytest.approx(4 / 6, rel=0.01)


def test_tied_head_is_counted_and_embedding_is_not(engine):
    spec = engine.resolve_model(job_from_dict({"model": "openai-community/gpt2"}))
    per_layer = sum(2 * lin.in_features * lin.out_features * lin.layers for lin in spec.linears)
    assert F.linear_forward_flops_per_token(spec) == per_layer + 2 * 768 * spec.vocab_size


def test_moe_counts_active_experts_only(engine):
    spec = engine.resolve_model(job_from_dict({"model": "mistralai/Mixtral-8x7B-v0.1"}))
    fwd = F.linear_forward_flops_per_token(spec)
    active = spec.param_counts().active - sum(g.params for g in spec.groups)
    assert fwd == pytest.approx(2 * active, rel=0.001)


def test_recompute_adds_hardware_not_model_flops(engine):
    spec = engine.resolve_model(_job())
    none = F.training_flops_per_token(spec, seq_len=2048)
    full = F.training_flops_per_token(spec, seq_len=2048, checkpointing="full")
    sel = F.training_flops_per_token(spec, seq_len=2048, checkpointing="selective")
    assert none["model"] == full["model"] == sel["model"]
    assert none["hardware"] < sel["hardware"] < full["hardware"]
    # early stop: the recompute is ~0.78 of a layer forward on Llama-2-7B (trace notes §3)
    layer_fwd = F.linear_forward_flops_per_token(spec) - 2 * 4096 * 32000 \
        + F.attention_forward_flops_per_token(spec, 2048)
    assert 0.7 < full["recompute"] / layer_fwd < 0.85


# -- properties of the step time ------------------------------------------------------------

@settings(max_examples=15, deadline=None)
@given(dp=st.sampled_from([1, 2, 4, 8, 16, 64]))
def test_more_gpus_never_slower_beyond_communication(dp):
    engine = new_engine((plugin, "time_roofline"))
    one = _time(engine, _job(parallelism={"dp": 1})).time
    many = _time(engine, _job(parallelism={"dp": dp},
                              hardware={"gpu": "H100-SXM-80GB", "nodes": max(1, dp // 8)})).time
    comm = sum(v for k, v in many.breakdown.items() if k.startswith("communication"))
    overhead_share = F.FRAMEWORK_OVERHEAD_FRACTION / (1 - F.FRAMEWORK_OVERHEAD_FRACTION)
    assert many.step_seconds <= one.step_seconds + comm * (1 + overhead_share) + 1e-9


@settings(max_examples=15, deadline=None)
@given(s=st.sampled_from([1024, 2048, 4096]), k=st.sampled_from([2, 3, 4]))
def test_time_grows_at_least_linearly_with_seq_len(s, k):
    # In the compute-bound regime (>= 4096 tokens per micro-batch). Below the roofline ridge a
    # GEMM is bound by reading its weights and its time grows slower than its rows: physical.
    engine = new_engine((plugin, "time_roofline"))
    a = _time(engine, _job(training={"seq_len": s, "micro_batch_size": 4})).time
    b = _time(engine, _job(training={"seq_len": s * k, "micro_batch_size": 4})).time
    # per-token work grows at least linearly (attention superlinearly); the per-step optimizer
    # update does not depend on the sequence, so the whole step only grows monotonically
    work = lambda t: t.breakdown["compute"] + t.breakdown["memory_bound"]  # noqa: E731
    assert work(b) >= work(a) * k * 0.999
    assert b.step_seconds > a.step_seconds


def test_faster_gpu_is_faster(engine):
    times = [_time(engine, _job(hardware={"gpu": g})).time.step_seconds
             for g in ("A100-SXM-80GB", "H100-SXM-80GB",
                       "B200-SXM-180GB")]
    assert times[0] > times[1] > times[2]


def test_total_time_is_steps_times_step_time(engine):
    job = _job(workload={"dataset_tokens": 1e9, "epochs": 2})
    t = _time(engine, job).time
    assert t.total_steps == pytest.approx(-(-2e9 // 2048))
    assert t.total_seconds == pytest.approx(t.total_steps * t.step_seconds)
    t2 = _time(engine, _job(workload={"num_samples": 1000, "avg_seq_len": 512})).time
    assert t2.total_steps == -(-1000 * 512 // 2048)
    t3 = _time(engine, _job(workload={"max_steps": 7})).time
    assert t3.total_seconds == pytest.approx(7 * t3.step_seconds)
    assert _time(engine, _job()).time.total_seconds is None


def test_breakdown_sums_to_step_and_tokens_match(engine):
    rep = _time(engine, _job(parallelism={"tp": 2, "dp": 4, "fsdp": "full_shard"},
                             training={"activation_checkpointing": "full"}))
    t, k = rep.time, rep.tokens
    assert sum(t.breakdown.values()) == pytest.approx(t.step_seconds)
    assert "communication_tp" in t.breakdown and "communication_dp" in t.breakdown
    assert k.tokens_per_second == pytest.approx(4 * 2048 / t.step_seconds)
    assert k.tokens_per_second_per_gpu == pytest.approx(k.tokens_per_second / 8)
    assert 0 < t.mfu <= t.hfu < 1
    assert t.provenance.basis == "analytic" and t.provenance.plugin == "time_roofline"


def test_mfu_override_and_compile(engine):
    slow = _time(engine, _job(options={"mfu": 0.2})).time
    fast = _time(engine, _job(options={"mfu": 0.6})).time
    assert slow.breakdown["compute"] == pytest.approx(3 * fast.breakdown["compute"], rel=0.01)
    eager = _time(engine, _job()).time
    comp = _time(engine, _job(training={"compile": True})).time
    assert comp.breakdown["memory_bound"] < eager.breakdown["memory_bound"]
    assert comp.breakdown["compute"] == pytest.approx(eager.breakdown["compute"])


def test_pipeline_bubble_follows_schedule(engine):
    base = {"pp": 4, "dp": 1}
    a = _time(engine, _job(parallelism=base, training={"grad_accum_steps": 8})).time
    i = _time(engine, _job(parallelism=dict(base, pp_schedule="interleaved", pp_virtual_stages=2),
                           training={"grad_accum_steps": 8})).time
    assert i.breakdown["pipeline_bubble"] == pytest.approx(a.breakdown["pipeline_bubble"] / 2)
    assert F.pipeline_bubble_fraction(4, 8) == pytest.approx(3 / 8)


def test_collectives_and_hierarchy():
    assert F.all_reduce_seconds(1e9, 1, 1e9) == 0
    assert F.all_reduce_seconds(1e9, 8, 1e11) == pytest.approx(2 * 7 / 8 * 1e-2, rel=0.01)

    class G:
        intra_node_bytes_per_s, inter_node_bytes_per_s, pcie_bytes_per_s = 450e9, 50e9, 64e9
    # one rank per node: the NIC is the bus; 8 per node: the NIC carries (k-1)/(n-1) of it
    one = F.link_bytes_per_s(G, inter_node=True, size=4, nodes=4)
    eight = F.link_bytes_per_s(G, inter_node=True, size=32, nodes=4)
    assert one == pytest.approx(50e9 * F.INTER_NODE_COLLECTIVE_EFFICIENCY)
    assert eight == pytest.approx(min(450e9 * F.INTRA_NODE_COLLECTIVE_EFFICIENCY, one * 31 / 3))


def test_no_torch_on_estimate_path():
    import subprocess
    import sys

    code = ("import sys, fmest_time_roofline.plugin, fmest_time_roofline.estimator, "
            "fmest_time_roofline.formulas;"
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- workload ------------------------------------------------------------------------------

def test_an_uncounted_dataset_is_a_note_not_a_read(tmp_path, engine):
    # the input door counts a dataset file (tests/test_datasets.py); this plugin reads no file,
    # so a job that skipped the door, even naming a missing file, gets a step time and a note
    job = _job(workload={"dataset_path": str(tmp_path / "missing.jsonl")})
    t = _time(engine, job).time
    assert t.step_seconds > 0 and t.total_steps is None and t.total_seconds is None
    assert any("not counted" in n and "input door" in n for n in t.notes)
    t = _time(engine, job.evolve(workload={"dataset_tokens": 4096.0})).time
    assert t.total_steps == 2 and not any("not counted" in n for n in t.notes)


def test_attention_is_its_own_op_class():
    # FA3 paper figures for FA2 on H100 at 16k: forward 335 (causal), backward 322 (non-causal)
    # TFLOP/s of 989.4 (core/fmest/data/attention_kernels.csv)
    assert F.attention_efficiency("H100-SXM-80GB", "fwd", seq_len=16384) == \
        pytest.approx(335 / 989.4, abs=0.002)
    assert F.attention_efficiency("H100-SXM-80GB", "bwd", seq_len=16384, causal=False) == \
        pytest.approx(322 / 989.4, abs=0.002)
    # attention runs below matmul efficiency where the table has figures
    for gpu in ("H100-SXM-80GB", "A100-SXM-80GB"):
        assert F.attention_efficiency(gpu, "fwd", seq_len=4096) < F.mamf_fraction(gpu, "bf16")


def test_ring_attention_costs():
    kw = dict(tokens=32768, q_heads=32, head_dim=128, act_bytes=2.0, recompute=True,
              gather_bytes_per_s=350e9, p2p_bytes_per_s=350e9)
    assert F.ring_attention_costs(cp=1, fwd_seconds=1.0, bwd_seconds=2.5, **kw) == \
        {"memory_bytes": 0.0, "exposed_seconds": 0.0, "comm_seconds": 0.0}
    c2 = F.ring_attention_costs(cp=2, fwd_seconds=0.06, bwd_seconds=0.15, **kw)
    c8 = F.ring_attention_costs(cp=8, fwd_seconds=0.24, bwd_seconds=0.6, **kw)
    # merge traffic grows with the number of ring steps (cp - 1)
    assert c8["memory_bytes"] == pytest.approx(7 * c2["memory_bytes"])
    # a slow link: the forward all-gather overlaps only the local causal block
    slow = F.ring_attention_costs(cp=8, fwd_seconds=0.24, bwd_seconds=0.6,
                                  **{**kw, "gather_bytes_per_s": 30e9, "p2p_bytes_per_s": 30e9})
    assert slow["exposed_seconds"] > c8["exposed_seconds"] > 0


def test_context_parallel_costs_more_than_its_flops(engine):
    # same local tokens (T = 32k) and attention FLOPs per GPU: 4 GPUs ring vs 1 GPU would need
    # 4x the attention; the CP job also pays the ring merges and exchanges
    job = _job(training={"seq_len": 131072, "micro_batch_size": 1,
                         "activation_checkpointing": "full", "attention": "sdpa"},
               parallelism={"cp": 4, "fsdp": "full_shard"}, hardware={"gpu": "H100-SXM-80GB",
                                                                       "nodes": 1})
    rep = _time(engine, job)
    assert rep.time.breakdown.get("communication_cp", 0.0) > 0.0


def test_backward_post_prefetch_exposes_backward_gathers(engine):
    job = _job(model="meta-llama/Llama-2-70b-hf",
               training={"seq_len": 2048, "micro_batch_size": 1,
                         "activation_checkpointing": "full"},
               parallelism={"fsdp": "full_shard", "dp": 64},
               hardware={"gpu": "A100-SXM-40GB", "gpus_per_node": 8, "nodes": 8})
    pre = _time(engine, job).time
    post = _time(engine, job.evolve(parallelism={"fsdp_backward_prefetch": "post"})).time
    assert post.breakdown["communication_dp"] > pre.breakdown["communication_dp"]
    assert post.step_seconds > pre.step_seconds


# -- phases against the figures they reproduce ---------------------------------------------------

def test_data_parallel_phase_prices_the_ddp_all_reduce_as_a_ring(engine):
    """DDP on 8 GPUs: the communication transform lists one gradient all-reduce; with no
    compute to hide behind, ``data_parallel_seconds`` is exactly the ring cost
    ``2 (n-1)/n x bytes / busbw`` + latency (nccl-tests busbw definition, Patarasuk & Yuan
    2009), bytes = 2 x parameters (pure bf16 gradients)."""
    job = _job(model="llama-3.2-1b", hardware={"gpu": "H100-SXM-80GB", "gpus_per_node": 8})
    ctx = engine.context(job)
    comm = ctx.transforms.communication
    (allreduce,) = comm.collectives
    shape = estimator.step_shape(job, ctx.model, ctx.layout)
    busbw = F.link_bytes_per_s(ctx.gpu, inter_node=False, size=8, nodes=1)
    params = ctx.model.param_counts().total
    ring = 2 * 7 / 8 * 2.0 * params / busbw + F.INTRA_NODE_LATENCY_S * 2 * 3
    assert allreduce.payload_bytes == 2.0 * params
    assert estimator.data_parallel_seconds(comm, shape, ctx.gpu, ctx.layout, 0.0, 0.5) == \
        pytest.approx(ring, rel=1e-12)


def test_matmul_phase_is_six_n_flops_at_full_efficiency(engine):
    """At a matmul efficiency of 1 with no GEMM-shape fall-off, a compute-bound full-training
    step's matmuls take ``2 N T`` forward and ``4 N T`` backward FLOPs at peak (Kaplan et al.
    2020; Narayanan et al. 2021), N the matmul parameters including the output head."""
    import attrs

    job = _job(training={"seq_len": 4096, "micro_batch_size": 4})
    ctx = engine.context(job)
    rates = attrs.evolve(estimator.device_rates(job, ctx.gpu), linear_fraction=1.0,
                         sm_count=None)
    shape = estimator.step_shape(job, ctx.model, ctx.layout)
    matmuls = estimator.matmul_times(job, ctx.model, shape, rates)
    flops = F.linear_forward_flops_per_token(ctx.model) * shape.tokens
    assert matmuls.forward == pytest.approx(flops / rates.linear_peak, rel=1e-9)
    assert matmuls.backward == pytest.approx(2 * flops / rates.linear_peak, rel=1e-9)
    assert matmuls.recompute == 0.0


# -- host dispatch: eager PyTorch cannot launch kernels faster than the host dispatches them --

def test_short_eager_steps_are_host_bound_and_compile_is_not(engine):
    """A 256-token LoRA micro-batch of a 7B model launches more eager ops than its kernels take
    (formulas.host_dispatch_seconds: 487 ops per checkpointed LoRA layer at 10 us); the step
    is then the host's time, then the optimizer step. Compiled code is left to the GPU
    roofline."""
    lora = {"technique": "lora", "seq_len": 256, "grad_accum_steps": 8,
            "activation_checkpointing": "full",
            "lora_target_modules": "q_proj,k_proj,v_proj,o_proj"}
    eager = _time(engine, _job(training=lora, hardware={"gpu": "A100-SXM-80GB"}))
    host = F.host_dispatch_seconds(layers=32, checkpointing="full", lora_modules_per_layer=4,
                                   micro_batches=8)
    opt = eager.time.breakdown["optimizer_step"]
    assert eager.time.step_seconds == pytest.approx(host + opt, rel=1e-6)
    assert any("host-bound" in n for n in eager.time.notes)
    compiled = _time(engine, _job(training={**lora, "compile": True},
                                  hardware={"gpu": "A100-SXM-80GB"}))
    assert compiled.time.step_seconds < host
    # long sequences keep the GPU busy: the host floor does not bind
    long = _time(engine, _job(training={**lora, "seq_len": 8192},
                              hardware={"gpu": "A100-SXM-80GB"}))
    assert not any("host-bound" in n for n in long.time.notes)


def test_expert_parallel_ranks_update_only_their_experts(engine):
    """Under expert parallelism each rank holds experts / ep of the expert weights, so its
    optimizer update and gradient accumulation stream that share (estimator.local_trainable_params),
    not the whole model's."""
    job = _job(model="mistralai/Mixtral-8x7B-v0.1",
               training={"seq_len": 4096, "grad_accum_steps": 4},
               parallelism={"dp": 8, "ep": 8}, hardware={"gpu": "H100-SXM-80GB", "nodes": 1,
                                                          "gpus_per_node": 8})
    spec = engine.estimate(job, quantities=("time",)).context.model
    counts = spec.param_counts()
    shape = estimator.step_shape(job, spec, engine.estimate(
        job, quantities=("time",)).context.layout)
    local = estimator.local_trainable_params(spec, job.training, shape)
    assert local == pytest.approx(counts.total - counts.experts * (1 - 1 / 8))
    no_ep = _job(model="mistralai/Mixtral-8x7B-v0.1",
                 training={"seq_len": 4096, "grad_accum_steps": 4},
                 parallelism={"dp": 8}, hardware={"gpu": "H100-SXM-80GB", "nodes": 1,
                                                   "gpus_per_node": 8})
    with_ep = _time(engine, job).time.breakdown["optimizer_step"]
    without = _time(engine, no_ep).time.breakdown["optimizer_step"]
    assert with_ep < 0.5 * without


def test_sliding_window_bounds_only_the_windowed_layers():
    """Gemma 3 windows 5 of every 6 layers (sliding_window_pattern 6): the attention FLOPs are
    the full-context layers at the whole sequence plus the windowed ones at the window, not
    every layer at the window."""
    spec = new_engine().resolve_model(job_from_dict({"model": "google/gemma-3-1b-pt"}))
    seq, window, layers = 32768, spec.sliding_window, spec.num_layers
    n_sw = layers - layers // 6
    per_layer = 2.0 * spec.num_attention_heads * 2 * spec.head_dim
    full = F.attention_context_tokens(seq)
    windowed = F.attention_context_tokens(seq, sliding_window=window)
    assert windowed < full
    expected = per_layer * (full * (layers - n_sw) + windowed * n_sw)
    assert F.attention_forward_flops_per_token(spec, seq) == pytest.approx(expected)
