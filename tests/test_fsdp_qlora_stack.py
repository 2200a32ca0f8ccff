"""Answer.AI's fsdp_qlora train.py as its own stack profile (``[fsdp-qlora]`` in
core/fmest/data/stacks.toml; AnswerDotAI/fsdp_qlora e877dda5026dfd964cccdb92a4532da587cbdae0
train.py, the commit the benchmarks_03_2024.md rows cite), each term against a hand count from
the code it cites:

1. ``output_logits_held``: the loop keeps ``output`` (and transformers' fp32-upcast logits,
   ``logits = logits.float()`` in transformers 4.38.2 LlamaForCausalLM.forward) through backward
   and the optimizer step: four fp32 [tokens, vocab] tensors at the loss-gradient peak, not three.
   Trace (torch CPU): :func:`test_trace_held_output_adds_one_fp32_logits_copy`.
2. ``quant_state_replicated``: bitsandbytes' NF4 constants (absmax + nested absmax with double
   quantization: 1/64 + 4/(64 x 256) B per weight) stay whole on every GPU (load_and_quantize
   quantizes on each rank's GPU and moves only the packed data), and on the GPU under CPU offload.
3. FSDP1 CPU offload stream (time_roofline ``fsdp_offload_h2d_bytes``): each unit's shard goes
   host-to-device before its forward and its backward (the root too), packed 4-bit weights at
   0.5 B per parameter; it runs on FSDP's pre-unshard stream beside compute.
4. No per-layer checkpoint-input retention (the hf-trainer ``fsdp1_frozen_units_keep_ckpt_inputs``
   case): train.py applies ``checkpoint_wrapper`` after FSDP wrapping, inside each decoder-layer
   unit, so FSDP's hooks see the real layer inputs, not the recompute's detached leaves. Trace:
   :func:`test_trace_checkpoint_inside_fsdp_units_keeps_no_layer_inputs`.
"""

from __future__ import annotations

import functools
import os
import socket
import sys
from pathlib import Path

import pytest

import fmest_memory_theory.plugin as memory_plugin
from fmest.convert import job_from_dict
from fmest.stacks import load_profiles
from fmest.testing import new_engine
from fmest_memory_theory import estimator as ME
from fmest_time_roofline import estimator as TE
from fmest_time_roofline import formulas as TF

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import measured  # type: ignore[import-not-found]  # noqa: E402  (benchmarks/measured.py)

PLUGINS = ((memory_plugin, "memory_theory"),)
COMMIT = "e877dda5026dfd964cccdb92a4532da587cbdae0"
#: Llama-2-7B (meta-llama/Llama-2-7b-hf config.json): hidden, FFN, layers, vocab
H, FFN, L, V = 4096, 11008, 32, 32000
#: the quantized linears: 32 x (4 x 4096^2 + 3 x 4096 x 11008)
Q = L * (4 * H * H + 3 * H * FFN)
#: LoRA r=64 on q, k, v, up, down, gate (train.py 'all'): 32 x (3 x 64 x 8192 + 3 x 64 x 15104)
ADAPTERS = L * (3 * 64 * (H + H) + 3 * 64 * (H + FFN))
#: NF4 constants with double quantization: uint8 absmax per 64 weights + fp32 per 64 x 256
CONSTS_PER_PARAM = 1 / 64 + 4 / (64 * 256)
TARGETS = ["q_proj", "k_proj", "v_proj", "up_proj", "down_proj", "gate_proj"]


def _job(stack="fsdp-qlora", technique="qlora", mb=10, seq=2048, fsdp="full_shard",
         offload="none", gpu="RTX3090-24GB"):
    return job_from_dict({
        "model": "meta-llama/Llama-2-7b-hf",
        "training": {"technique": technique, "stack": stack, "dtype": "bf16", "precision": "pure",
                     "seq_len": seq, "micro_batch_size": mb, "lora_rank": 64,
                     "lora_target_modules": TARGETS, "lora_dropout": 0.1, "optimizer": "adamw",
                     "activation_checkpointing": "full", "attention": "flash"},
        "parallelism": {"dp": 2, "fsdp": fsdp, "cpu_offload": offload},
        "hardware": {"gpu": gpu, "gpus_per_node": 2}})


def _peak(job) -> ME.StagePeak:
    setup = ME.job_setup(job, new_engine(*PLUGINS).context(job))
    stage = ME.Stage(name="all", layers=L, has_embedding=True, has_head=True, inflight=1)
    return ME.stage_peak(setup, stage)


def test_profile_states_what_train_py_does_with_sources():
    prof = {p.name: p for p in load_profiles()}["fsdp-qlora"]
    assert prof.output_logits_held and prof.quant_state_replicated
    assert prof.lora_dropout == 0.1                     # train.py main(lora_dropout=0.1)
    assert not prof.fsdp1_frozen_units_keep_ckpt_inputs  # checkpoint inside the units (4.)
    assert not prof.fsdp_flat_param_grads                # use_orig_params=False
    for key in ("fused", "overlap", "output_logits_held", "quant_state_replicated",
                "lora_dropout", "host_model_copy"):
        assert COMMIT[:7] in prof.sources[key], key
    # the pytorch profile (plain eager PyTorch) does not take these behaviours
    plain = {p.name: p for p in load_profiles()}["pytorch"]
    assert not plain.output_logits_held and not plain.quant_state_replicated


def test_held_output_adds_one_fp32_logits_copy_to_every_backward_moment():
    tokens = 10 * 2048
    fp32_logits = tokens * V * 4
    fq, pt = _peak(_job()), _peak(_job(stack="pytorch"))
    assert fq.phase == "backward"
    # the loss-gradient moment: log-softmax output + its gradient + the logits' gradient + the
    # held output logits (pytorch: the first three)
    assert fq.components["logits_and_loss"] == pytest.approx(4 * fp32_logits)
    assert pt.components["logits_and_loss"] == pytest.approx(3 * fp32_logits)
    # the optimizer step runs before ``output = None``: the logits are still there. The
    # pytorch profile's LoRA is PEFT (stacks.toml lora_impl = "peft"), whose adapters stay fp32
    # under pure precision: its adapters, their gradients, both AdamW states and the foreach
    # update's temporary copy take 2 bytes more per adapter parameter than fsdp-qlora's (bf16
    # under pure)
    adapter_params = fq.components["lora_adapters"] / 2
    assert pt.components["lora_adapters"] == pytest.approx(2 * fq.components["lora_adapters"])
    assert fq.phase_allocated["optimizer"] - pt.phase_allocated["optimizer"] == pytest.approx(
        fp32_logits + Q * CONSTS_PER_PARAM / 2 - 5 * 2 * adapter_params, rel=1e-9)


def test_quant_constants_stay_whole_on_every_gpu():
    fq, pt = _peak(_job()), _peak(_job(stack="pytorch"))
    # sharded over 2 GPUs the packed weights halve; the constants do not: + Q x c x (1 - 1/2)
    assert fq.components["weights"] - pt.components["weights"] == pytest.approx(
        Q * CONSTS_PER_PARAM / 2)
    # CPU offload: the packed data lives on the host, the constants stay on the GPU
    off = _peak(_job(offload="params"))
    assert off.components["weights"] == pytest.approx(Q * CONSTS_PER_PARAM)
    assert _peak(_job(stack="pytorch", offload="params")).components["weights"] == 0
    # NO_SHARD (train.py "ddp"): every GPU holds everything already, nothing on top
    ns, ns_pt = _peak(_job(fsdp="no_shard")), _peak(_job(stack="pytorch", fsdp="no_shard"))
    assert ns.components["weights"] == pytest.approx(ns_pt.components["weights"])
    # LoRA over bf16 weights has no constants
    lo, lo_pt = _peak(_job(technique="lora")), _peak(_job(technique="lora", stack="pytorch"))
    assert lo.components["weights"] == pytest.approx(lo_pt.components["weights"])


def _ctx(job):
    return new_engine(*PLUGINS).context(job)


def test_offload_stream_bytes_hand_count():
    job = _job(offload="params")
    ctx = _ctx(job)
    shape = TE.step_shape(job, ctx.model, ctx.layout)
    sizing = ctx.transforms.optimizer
    assert (sizing.weight_bytes, sizing.trainable_bytes) == (2, 2)    # pure bf16
    got = TE.fsdp_offload_h2d_bytes(ctx.model, job.training, sizing, shape, 2)
    norms = 2 * H * L + H
    # every unit before its forward and again before its backward (the root too: its reshard
    # points it back at the host shard): packed 4-bit linears at 0.5 B + bf16 norms + bf16
    # adapters + bf16 embedding and head; over 2 shards
    blocks = Q * 0.5 + norms * 2 + ADAPTERS * 2
    root = 2 * V * H * 2
    assert got == pytest.approx(2 * (blocks + root) / 2)
    # the same model as bf16 LoRA moves 2 B per linear weight: 4x the linears' bytes
    lora = TE.fsdp_offload_h2d_bytes(ctx.model, _job(technique="lora").training, sizing, shape, 2)
    assert lora - got == pytest.approx(2 * Q * (2 - 0.5) / 2)
    # full training under amp keeps fp32 shards on the host: FSDP copies them up before the
    # cast (``_use_low_precision_shard``), 4 B per parameter, twice
    full = job_from_dict({"model": "meta-llama/Llama-2-7b-hf",
                          "training": {"technique": "full", "precision": "amp", "seq_len": 2048,
                                       "micro_batch_size": 1, "activation_checkpointing": "full"},
                          "parallelism": {"dp": 2, "fsdp": "full_shard", "cpu_offload": "params"},
                          "hardware": {"gpu": "A100-SXM-80GB", "gpus_per_node": 2}})
    fctx = _ctx(full)
    assert fctx.transforms.optimizer.weight_bytes == 4
    assert TE.fsdp_offload_h2d_bytes(
        fctx.model, full.training, fctx.transforms.optimizer,
        TE.step_shape(full, fctx.model, fctx.layout), 2) == pytest.approx(
            2 * 6_738_415_616 * 4 / 2)


def test_offload_stream_runs_beside_compute():
    job = _job(offload="params")
    ctx = _ctx(job)
    parts = TE.step_breakdown(job, ctx)["breakdown"]
    shape = TE.step_shape(job, ctx.model, ctx.layout)
    h2d = TF.pcie_seconds(TE.fsdp_offload_h2d_bytes(ctx.model, job.training,
                                                    ctx.transforms.optimizer, shape, 2), ctx.gpu)
    grads = TF.pcie_seconds(ADAPTERS / 2 * 2, ctx.gpu)   # bf16 LoRA gradient shards go down
    # a 7B micro-batch of 20480 tokens computes for seconds; the copies (~2 GB) hide under it
    # (``compute`` is the micro-batch's GEMMs + attention, one micro-batch here) but for the
    # interference share (formulas.exposed_comm_seconds)
    assert job.training.grad_accum_steps == 1 and parts["compute"] > h2d
    assert parts["offload"] == pytest.approx(
        grads + TF.exposed_comm_seconds(h2d, parts["compute"]))
    # and far below the old fully exposed stream of 2 B per parameter, twice per micro-batch
    assert parts["offload"] < TF.pcie_seconds(2 * 2 * 6.74e9 / 2, ctx.gpu) / 4


def test_rows_of_the_source_run_on_the_profile():
    rows = {r["id"]: r for r in measured.load_rows()
            if r["source"] == "answerai-fsdp-qlora-benchmarks-2024-03"}
    job, _ = measured.row_to_job(rows["r1-aai-3090-llama-2-7b-qlora-c2048-b10-g2-fsdp-nooff-mem"])
    assert job["training"]["stack"] == "fsdp-qlora"
    assert measured.map_row(rows["r1-aai-3090-llama-2-7b-qlora-c2048-b10-g2-fsdp-nooff-mem"]) \
        .stack == "pytorch"                      # the breakdown keeps the row's stack column
    ddp, _ = measured.row_to_job(rows["r1-aai-3090-llama-2-7b-qlora-c2048-b8-g2-ddp-nooff-mem"])
    assert ddp["parallelism"]["fsdp"] == "no_shard"
    cloud, _ = measured.row_to_job(rows["r1-aai-cloud-llama-2-70b-none-c2048-b2-g2-fsdp-off-tps"])
    assert cloud["training"]["activation_offload"] and cloud["parallelism"]["cpu_offload"] \
        == "params"
    plain, _ = measured.row_to_job(rows["r1-aai-cloud-llama-2-70b-none-c2048-b1-g4-fsdp-nooff-tps"])
    assert "activation_offload" not in plain["training"]


# ---------------------------------------------------------------------------------------------
# traces of the code (torch on the CPU)
# ---------------------------------------------------------------------------------------------

def _tracker():
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "plugins" / "torch_runner"))
    from fmest_torch_runner.tracker import StorageTracker  # type: ignore[import-not-found]
    return StorageTracker


def test_trace_held_output_adds_one_fp32_logits_copy():
    """transformers 4.38.2 LlamaForCausalLM.forward's loss, with and without train.py's
    ``output`` held through backward: the peak is 4 (3) fp32 logits-sized tensors."""
    tracker_cls = _tracker()
    import torch
    from torch.nn import CrossEntropyLoss

    t, h, v = 512, 32, 2048
    head = torch.nn.Linear(h, v, bias=False).to(torch.bfloat16)
    head.weight.requires_grad_(False)

    def forward(x, labels):
        logits = head(x).float()                 # logits = logits.float()
        shift_logits = logits[..., :-1, :].contiguous()
        shift_labels = labels[..., 1:].contiguous()
        loss = CrossEntropyLoss()(shift_logits.view(-1, v), shift_labels.view(-1))
        return loss, logits                      # CausalLMOutputWithPast(loss, logits)

    peaks = {}
    for hold in (False, True):
        x = torch.randn(2, t, h, dtype=torch.bfloat16, requires_grad=True) * 1
        labels = torch.randint(0, v, (2, t))
        tracker = tracker_cls(track_resize=True)
        with tracker:
            base = tracker.total
            loss, logits = forward(x, labels)
            if not hold:
                del logits
            loss.backward()
            peaks[hold] = (tracker.overall.total - base) / (2 * t * v * 4)
    assert peaks[False] == pytest.approx(3, abs=0.05)
    assert peaks[True] == pytest.approx(4, abs=0.05)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_trace_checkpoint_inside_fsdp_units_keeps_no_layer_inputs():
    """train.py's order: FSDP with the LoRA-leaf + decoder-layer policy, then
    apply_activation_checkpointing(REENTRANT) on the decoder layers: the live storages at the
    end of backward do not grow with the layer count (the hf-trainer order, checkpoint outside
    FSDP, keeps 2 per layer: scripts/trace_fsdp1_frozen_ckpt.py)."""
    tracker_cls = _tracker()
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import (
        _or_policy,
        lambda_auto_wrap_policy,
        transformer_auto_wrap_policy,
    )

    hidden, tokens = 32, 4096

    class Lora(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.base = torch.nn.Linear(hidden, hidden, bias=False)
            self.base.weight.requires_grad_(False)
            self.lora_A = torch.nn.Linear(hidden, 4, bias=False)
            self.lora_B = torch.nn.Linear(4, hidden, bias=False)

        def forward(self, x):
            return self.base(x) + self.lora_B(self.lora_A(x))

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = Lora()

        def forward(self, x):
            return x + torch.tanh(self.proj(x))

    class Model(torch.nn.Module):
        def __init__(self, layers: int) -> None:
            super().__init__()
            self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))
            self.head = torch.nn.Linear(hidden, 1, bias=False)
            self.head.weight.requires_grad_(False)

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return self.head(x).sum()

    def lambda_fn(module):      # train.py get_wrapping_policy's lambda_policy_fn
        return (len(list(module.named_children())) == 0
                and getattr(module, "weight", None) is not None and module.weight.requires_grad)

    policy = functools.partial(_or_policy, policies=[
        functools.partial(lambda_auto_wrap_policy, lambda_fn=lambda_fn),
        functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})])
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(_free_port())
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        live = {}
        for layers in (4, 8):
            model = FSDP(Model(layers), auto_wrap_policy=policy, device_id=torch.device("cpu"),
                         use_orig_params=False, limit_all_gathers=True)
            apply_activation_checkpointing(
                model, checkpoint_wrapper_fn=functools.partial(
                    checkpoint_wrapper, checkpoint_impl=CheckpointImpl.REENTRANT),
                check_fn=lambda m: isinstance(m, Block))
            for _step in range(2):              # step 0 runs FSDP's lazy init
                x = torch.randn(tokens, hidden, requires_grad=True)
                tracker = tracker_cls(track_resize=True)
                seen: list[int] = []
                x.register_hook(lambda g, tracker=tracker, seen=seen: seen.append(tracker.total))
                with tracker:
                    base = tracker.total
                    model(x).backward()
                live[layers] = (seen[0] - base) / (tokens * hidden * 4)
    finally:
        dist.destroy_process_group()
    assert live[8] == pytest.approx(live[4], abs=0.1)
    assert live[4] < 3
