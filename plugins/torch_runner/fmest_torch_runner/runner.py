"""The step runner: build the real transformers model of a job and run two training steps.

One runner, three modes:

* ``fake`` -- under ``FakeTensorMode`` on CPU (no memory, no compute); the live-storage tracker
  (:mod:`fmest_torch_runner.tracker`) gives per-phase peaks and a breakdown. Llama-2-7B in
  seconds with ~0.4 GiB RSS.
* ``cpu`` -- real steps on CPU under ``torch.profiler`` with ``profile_memory=True``; truth =
  bytes of tensors alive at the start + max of the allocator's ``total_allocated`` per phase
  (the CPU analogue of ``torch.cuda.max_memory_allocated``). The tracker runs alongside for
  the breakdown.
* ``cuda`` -- real steps on a GPU: ``max_memory_allocated``/``max_memory_reserved`` per phase,
  step time. Written and unit-tested without a GPU; NOT yet run on hardware.

Two optimizer steps are run because the steady state (step 2) holds optimizer state during
forward and backward; step 1 does not (Llama-2-7B s4096 b2: 86.4 vs 62.8 GiB). With gradient
accumulation up to two micro-batches per step are run (the second one holds gradients).
Phases are named ``s{step}_{forward|backward|optimizer}``.

This module is the runner's door: :func:`run` and the names callers use. The pieces:

* :mod:`~fmest_torch_runner.records` -- :class:`RunSpec`, :class:`RunResult`, modes, categories;
* :mod:`~fmest_torch_runner.from_job` -- a job becomes a :class:`RunSpec` (precision, dtypes,
  what cannot run, whether FSDP2 can be traced);
* :mod:`~fmest_torch_runner.model_builder` -- the transformers model on meta/fake tensors or
  the device; :mod:`~fmest_torch_runner.lora` -- LoRA/QLoRA wrapping;
* :mod:`~fmest_torch_runner.steps` -- the training steps and their phase windows;
  :mod:`~fmest_torch_runner.optimizer` -- the optimizer, master copies and its state;
* :mod:`~fmest_torch_runner.fake_trace` (``fake``, FSDP2 included) and
  :mod:`~fmest_torch_runner.measured` (``cpu``, ``cuda``) -- each mode's measurement.
"""

from __future__ import annotations

import os
import time
import traceback

from fmest_torch_runner.fake_trace import FSDP_IGNORED_WINDOW, run_fake
from fmest_torch_runner.from_job import fsdp_traceable, resolve_precision, run_spec_from_job
from fmest_torch_runner.measured import run_cpu, run_cuda
from fmest_torch_runner.optimizer import SUPPORTED_OPTIMIZERS
from fmest_torch_runner.records import (
    CATEGORIES,
    MODES,
    RUNNER_VERSION,
    RunResult,
    RunSpec,
    Unsupported,
)

__all__ = ["CATEGORIES", "FSDP_IGNORED_WINDOW", "MODES", "RUNNER_VERSION",
           "SUPPORTED_OPTIMIZERS", "RunResult", "RunSpec", "Unsupported", "fsdp_traceable",
           "resolve_precision", "run", "run_spec_from_job"]


def run(run: RunSpec, mode: str, *, round_bytes: int = 1) -> RunResult:
    """Run ``run`` in ``mode``; never raises for the run itself -- failures are a status."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    res = RunResult(mode=mode)
    t0 = time.perf_counter()
    try:
        if run.technique == "qlora" and mode != "cuda":
            raise Unsupported(f"QLoRA (bitsandbytes 4-bit) is not supported on this device "
                              f"({mode}); it needs CUDA")
        if mode == "fake":
            run_fake(run, res, round_bytes)
        elif mode == "cpu":
            run_cpu(run, res)
        else:
            run_cuda(run, res)
    except Unsupported as exc:
        res.status, res.error = "unsupported", str(exc)
    except MemoryError as exc:
        res.status, res.error = "oom", f"MemoryError: {exc}"
    except Exception as exc:  # an OOM on CUDA is a result, anything else an error
        name = type(exc).__name__
        if name == "OutOfMemoryError" or "out of memory" in str(exc).lower():
            res.status = "oom"
        else:
            res.status = "error"
        res.error = f"{name}: {exc}"
        if os.environ.get("FMEST_TRACEBACK"):
            traceback.print_exc()
    res.wall_seconds = time.perf_counter() - t0
    return res
