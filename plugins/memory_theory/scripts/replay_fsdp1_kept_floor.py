"""Replay the allocator floor of a LoRA step whose block inputs and their gradients stay alive to
the end of backward, as FSDP1 keeps them for frozen units under reentrant checkpointing.

FSDP1 ``_register_post_backward_reshard_only_hook`` (torch/distributed/fsdp/_runtime_utils.py,
pytorch/pytorch PR 101982) holds each frozen unit's recompute input and its ``.grad`` until
``_finalize_params`` at the end of backward (``scripts/trace_fsdp1_frozen_ckpt.py``, real FSDP1
on CPU: 2 x layers layer-input storages live there; memory_theory
``fsdp1_keeps_checkpoint_inputs``). The fake-tensor tracer of ``scripts/
derive_allocator_reserve.py`` runs one device without FSDP, so this script reproduces the same
lifetimes on its trace: a forward pre-hook on every decoder layer keeps the layer's input and the
gradient that reaches it (a tensor hook) until the optimizer step. Both traces (with and without
the kept tensors) are replayed through :mod:`fmest.allocator` and
:func:`fmest.allocator.measure_floor`::

    python plugins/memory_theory/scripts/replay_fsdp1_kept_floor.py llama-2-70b lora 2 4096
    python plugins/memory_theory/scripts/replay_fsdp1_kept_floor.py llama-2-7b lora 4 4096

Results (torch 2.13.0 CPU, transformers 5.24.0, allocator rules of c10/cuda/
CUDACachingAllocator.cpp @ eb42ad6e, default settings; GiB; floor = smallest no-OOM capacity
of the capped replay - tensor peak; 2026-11-27):

    setting                       kept  tensors  reserve  floor  floor/reserve
    llama-2-70b lora b2 s4096      no    142.63    3.46    2.71     0.78
    llama-2-70b lora b2 s4096      yes   152.50    4.52    4.39     0.97
    llama-2-70b lora b4 s4096      no    156.42    6.65    5.42     0.82
    llama-2-70b lora b4 s4096      yes   176.04    8.91    8.79     0.99
    llama-2-7b  lora b4 s4096      no     22.76    3.22    1.44     0.45
    llama-2-7b  lora b4 s4096      yes    23.82    2.49    2.46     0.99
    (--conf expandable_segments:True)
    llama-2-7b  lora b4 s4096      no     22.76    1.68    0.04     0.03
    llama-2-7b  lora b4 s4096      yes    23.82    0.61    0.23     0.38

With the kept tensors nearly the whole reserve is irreducible: each kept gradient is placed in
a segment the layer's backward working set had just freed, so at the end of backward every
segment holds a live block and ``release_cached_blocks`` frees none (default settings; under
expandable segments whole free pages still unmap, so the floor stays a part of the reserve).
Needs torch and transformers (CPU).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]


def trace(job_dict: dict[str, Any], keep: bool) -> tuple[list, int, int]:
    """(allocation events, tensor peak, hooked layers) of one fake trace of ``job_dict``."""
    import derive_allocator_reserve as D  # type: ignore[import-not-found]
    from torch._subclasses.fake_tensor import FakeTensorMode

    from fmest_torch_runner import steps as S  # type: ignore[import-not-found]
    from fmest_torch_runner.fake_trace import patched_mask_helper  # type: ignore[import-not-found]
    from fmest_torch_runner.model_builder import build_model  # type: ignore[import-not-found]
    from fmest_torch_runner.tracker import StorageTracker  # type: ignore[import-not-found]

    spec = D._run_spec(job_dict)
    kept: list = []
    hooked: set = set()
    original = S.optimizer_step

    def optimizer_step(*args: Any, **kwargs: Any) -> Any:
        kept.clear()          # FSDP1 _finalize_params: the hooks go at the end of backward
        hooked.clear()
        return original(*args, **kwargs)

    def pre_hook(module: Any, args: tuple, kwargs: dict) -> None:
        x = args[0] if args else kwargs.get("hidden_states")
        if id(module) in hooked or x is None or not x.requires_grad:
            return          # the forward pass only, not the recompute
        hooked.add(id(module))
        kept.append(x)      # the block's input (the recompute leaf shares its storage)
        x.register_hook(kept.append)     # and the gradient that reaches it

    S.optimizer_step = optimizer_step
    try:
        with patched_mask_helper():
            fake_mode = FakeTensorMode()
            model = build_model(spec, "fake", fake_mode)
            layers = [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]
            if keep:
                for m in layers:
                    m.register_forward_pre_hook(pre_hook, with_kwargs=True)
            with fake_mode:
                tracker = StorageTracker(round_bytes=512)
                with tracker:
                    S.train_steps(model, spec, "fake", tracker)
    finally:
        S.optimizer_step = original
    return list(tracker.events), tracker.overall.total, len(layers) if keep else 0


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT / "scripts"))
    sys.path.insert(0, str(ROOT / "plugins" / "torch_runner"))
    import derive_allocator_reserve as D  # type: ignore[import-not-found]

    from fmest.allocator import AllocatorConfig, measure_floor

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("preset")
    ap.add_argument("technique", choices=("lora", "full"))
    ap.add_argument("batch", type=int)
    ap.add_argument("seq", type=int)
    ap.add_argument("--conf", default="", help="PYTORCH_CUDA_ALLOC_CONF of the replay")
    args = ap.parse_args(argv)
    g = 2 ** 30
    for keep in (False, True):
        t0 = time.perf_counter()
        events, peak, hooked = trace(D._setting_job(args.preset, args.technique, args.batch,
                                                    args.seq, "full"), keep)
        fl = measure_floor(events, AllocatorConfig.parse(args.conf))
        reserve = fl.max_memory_reserved - peak
        floor = fl.min_capacity - peak
        print(f"{args.preset} {args.technique} b{args.batch} s{args.seq} kept={keep} "
              f"(hooked layers {hooked}): tensors {peak / g:.2f} reserve {reserve / g:.2f} "
              f"floor {floor / g:.2f} GiB, floor/reserve {floor / max(1, reserve):.2f} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
