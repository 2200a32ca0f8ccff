"""The training steps a run executes: one batch of inputs, then per step the forward and
backward of each micro-batch and the optimizer update, each phase its own tracker window
(``s{step}_{forward|backward|optimizer}``).

Two optimizer steps are run because the steady state (step 2) holds optimizer state during
forward and backward; step 1 does not. With gradient accumulation up to two micro-batches per
step are run (the second one holds gradients).
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any, Callable, Optional

from attrs import frozen

from fmest_torch_runner.optimizer import make_optimizer, master_copies, optimizer_step
from fmest_torch_runner.records import CATEGORIES, RunResult, RunSpec, torch_dtype

if TYPE_CHECKING:
    import torch

    from fmest_torch_runner.tracker import StorageTracker

#: ``on_phase(window, kind)`` as a phase opens, ``on_phase(None, None)`` as it closes
PhaseHook = Callable[[Optional[str], Optional[str]], None]


@frozen(kw_only=True)
class StepState:
    """What the steps run on: trainable parameters, the batch, the optimizer, the fp32 master
    copies (``master`` precision) and the autocast context."""

    params: list[torch.nn.Parameter]
    inputs: dict[str, torch.Tensor]
    optimizer: torch.optim.Optimizer
    masters: Optional[list[torch.Tensor]]
    amp: contextlib.AbstractContextManager[Any]


def prepare_steps(model: torch.nn.Module, run: RunSpec, mode: str,
                  tracker: StorageTracker) -> StepState:
    """Register the start-of-run tensors (weights, buffers, the batch) before anything else
    runs (a ``.detach()`` of a weight would otherwise claim its storage as a temporary), then
    build the optimizer (over fp32 master copies under ``master`` precision)."""
    import torch

    device = "cuda" if mode == "cuda" else "cpu"
    params = [param for param in model.parameters() if param.requires_grad]
    inputs = make_batch(model, run, device)
    tracker.register(list(model.parameters()), "params")
    tracker.register(list(model.buffers()), "params")
    tracker.register(list(inputs.values()), "activations")
    tracker.start_bytes = tracker.total
    masters = master_copies(params, tracker) if run.precision == "master" else None
    opt = make_optimizer(masters if masters is not None else params, run)
    # under FSDP2 the MixedPrecisionPolicy casts the gathered weights (no autocast)
    amp: contextlib.AbstractContextManager[Any] = (
        torch.autocast(device, dtype=torch_dtype(run.autocast_dtype))
        if run.autocast_dtype and run.fsdp_world_size <= 1 else contextlib.nullcontext())
    return StepState(params=params, inputs=inputs, optimizer=opt, masters=masters, amp=amp)


def make_batch(model: torch.nn.Module, run: RunSpec, device: str) -> dict[str, torch.Tensor]:
    """One micro-batch of model inputs: token ids (labels = ids) for causal LMs; encoder ids of
    ``source_len`` and labels of ``target_len`` for encoder-decoders; for LLaVA, pixel_values at
    the tower's image size and that many image tokens in front of the text."""
    import torch

    cfg: Any = model.config  # a transformers PretrainedConfig (of the peft base under LoRA)
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    vocab = getattr(text, "vocab_size", None) or run.hf_config["vocab_size"]
    batch = run.micro_batch_size
    if getattr(cfg, "is_encoder_decoder", False):
        src = torch.randint(0, vocab, (batch, run.source_len or run.seq_len), device=device)
        tgt = torch.randint(0, vocab, (batch, run.target_len or run.seq_len), device=device)
        # decoder inputs given (not shifted from labels): no decoder_start_token_id needed
        return {"input_ids": src, "decoder_input_ids": tgt, "labels": tgt}
    vision = getattr(cfg, "vision_config", None)
    if vision is None:
        ids = torch.randint(0, vocab, (batch, run.seq_len), device=device)
        return {"input_ids": ids, "labels": ids}
    image_token = getattr(cfg, "image_token_id", None) or cfg.image_token_index
    side = vision.image_size
    per_image = (side // vision.patch_size) ** 2  # CLS dropped ("default" feature select)
    image_ids = run.images_per_sample * per_image
    ids = torch.randint(0, min(vocab, image_token), (batch, run.seq_len + image_ids),
                        device=device)
    ids[:, :image_ids] = image_token
    pixels = torch.randn(batch * run.images_per_sample, vision.num_channels, side, side,
                         device=device, dtype=torch_dtype(run.param_dtype))
    return {"input_ids": ids, "labels": ids, "pixel_values": pixels}


def micro_batch(model: torch.nn.Module, run: RunSpec, state: StepState,
                tracker: StorageTracker, phase: Callable[[str, str], None],
                end: Callable[[], None], step: int) -> None:
    """Forward and backward of one micro-batch, each its own phase window."""
    phase(f"s{step}_forward", "forward")
    with state.amp:
        loss = model(**state.inputs, use_cache=False).loss
    if run.micro_batches > 1:
        loss = loss / run.micro_batches
    end()
    phase(f"s{step}_backward", "backward")
    loss.backward()
    del loss
    tracker.relabel([param.grad for param in state.params if param.grad is not None], "grads")
    end()


def train_steps(model: torch.nn.Module, run: RunSpec, mode: str, tracker: StorageTracker, *,
                on_phase: Optional[PhaseHook] = None,
                sync: Optional[Callable[[], None]] = None) -> list[float]:
    """Run ``run.steps`` optimizer steps; ``on_phase(window, kind)`` / ``on_phase(None, None)``
    bracket each phase. Returns the wall seconds of each step."""
    state = prepare_steps(model, run, mode, tracker)

    def phase(window: str, kind: str) -> None:
        if on_phase:
            on_phase(window, kind)
        tracker.phase(window, kind)

    def end() -> None:
        tracker.end_phase()
        if on_phase:
            on_phase(None, None)

    times = []
    for step in range(1, run.steps + 1):
        if sync:
            sync()
        started = time.perf_counter()
        for _ in range(run.micro_batches):
            micro_batch(model, run, state, tracker, phase, end, step)
        phase(f"s{step}_optimizer", "optimizer")
        optimizer_step(state.params, state.masters, state.optimizer, tracker)
        end()
        if sync:
            sync()
        times.append(time.perf_counter() - started)
    return times


# -- what a run leaves in its result ---------------------------------------------------------

def fill_from_tracker(res: RunResult, tracker: StorageTracker) -> None:
    """Copy the tracker's peaks and per-category breakdowns into ``res``."""
    res.tracker_peak_bytes = tracker.overall.total
    res.phase_peaks_bytes = {w: p.total for w, p in tracker.windows.items()}
    res.phase_breakdowns = {w: {c: p.by_category.get(c, 0) for c in CATEGORIES}
                            for w, p in tracker.windows.items()}
    res.peak_window = tracker.overall_window
    res.window_end_bytes = {w: {c: v.get(c, 0) for c in CATEGORIES}
                            for w, v in tracker.window_end.items()}
    res.breakdown_bytes = {c: tracker.overall.by_category.get(c, 0) for c in CATEGORIES}


def count_params(model: torch.nn.Module, res: RunResult) -> None:
    """Total and trainable parameters of ``model`` into ``res`` (tied weights once)."""
    seen: dict[int, torch.nn.Parameter] = {}
    for p in model.parameters():
        seen.setdefault(id(p), p)
    res.params = sum(p.numel() for p in seen.values())
    res.trainable_params = sum(p.numel() for p in seen.values() if p.requires_grad)
