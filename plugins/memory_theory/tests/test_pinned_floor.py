"""The reserve at a peak where FSDP1 keeps every checkpointed block's input and gradient alive
(memory_theory ``fsdp1_keeps_checkpoint_inputs``) is not released before an OOM: each kept
gradient sits in a segment the block's backward working set had used, so no segment is empty
(replays: plugins/memory_theory/scripts/replay_fsdp1_kept_floor.py, floor / reserve 0.97-0.99).
Elsewhere the reserve still shrinks to the room left, down to the floor rule."""

from __future__ import annotations

import fmest_memory_theory.plugin as memory_plugin
from fmest.convert import job_from_dict
from fmest.testing import new_engine
from fmest_memory_theory import estimator as E
from fmest_memory_theory import formulas as F

PLUGINS = ((memory_plugin, "memory_theory"),)


def _job(seq: int, gpus: int = 2, technique: str = "qlora") -> dict:
    par: dict = {"dp": gpus}
    if gpus > 1:
        par["fsdp"] = "full_shard"
    return {"model": "meta-llama/Llama-2-70b-hf",
            "training": {"technique": technique, "stack": "hf-trainer", "dtype": "bf16",
                         "seq_len": seq, "micro_batch_size": 4, "lora_rank": 16,
                         "lora_target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
                         "activation_checkpointing": "full", "attention": "flash",
                         "optimizer": "adamw"},
            "parallelism": par,
            "hardware": {"gpu": "A100-SXM-80GB", "gpus_per_node": gpus}}


def _peak(job):
    engine = new_engine(*PLUGINS)
    ctx = engine.context(job)
    setup = E.job_setup(job, ctx)
    stages = E.pipeline_stages(setup.model.num_layers, 1, "1f1b", 1, 1)
    peak = max((E.stage_peak(setup, st) for st in stages), key=lambda p: p.allocated)
    return setup, peak, engine.estimate(job, quantities=("memory",)).memory


def test_kept_inputs_pin_the_whole_reserve_past_the_room_left():
    # 70B QLoRA, FSDP1 over 2 A100-80GB, 4 x 4608 tokens: tensors fit the device, tensors +
    # the reserve do not
    job = job_from_dict(_job(4608))
    setup, peak, mem = _peak(job)
    assert E.fsdp1_keeps_checkpoint_inputs(setup) and peak.pinned
    held = F.allocator_reserve_bytes(peak.allocated, False, peak.transient_block,
                                     peak.layer_block) + peak.stream_pools
    ctx = F.cuda_context_bytes(2)
    assert peak.allocated + ctx < setup.capacity_bytes < peak.allocated + ctx + held
    assert mem.components["allocator_reserve"] == round(held)
    assert mem.total_bytes > setup.capacity_bytes


def test_without_kept_inputs_the_reserve_still_shrinks_to_the_room():
    # the same QLoRA on one A100-80GB (no FSDP, nothing kept), 4 x 5376 tokens: tensors +
    # the reserve exceed the device, tensors + the floor do not: the reserve is the room left
    job = job_from_dict(_job(5376, gpus=1))
    setup, peak, mem = _peak(job)
    assert not E.fsdp1_keeps_checkpoint_inputs(setup) and not peak.pinned
    room = setup.capacity_bytes - F.cuda_context_bytes(1) - peak.allocated
    held = F.allocator_reserve_bytes(peak.allocated, False, peak.transient_block,
                                     peak.layer_block) + peak.stream_pools
    assert F.irreducible_reserve_bytes(peak.allocated, False) < room < held
    assert mem.components["allocator_reserve"] == round(room)
    assert mem.total_bytes == setup.capacity_bytes
