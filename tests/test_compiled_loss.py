"""A compiled cross-entropy (``training.compile_loss``, stacks.toml ``compiles_loss``).

torchtitan compiles its loss function under ``--compile`` (torchtitan/components/loss.py,
``CompileConfig.components`` ``["model", "loss"]``): Inductor fuses the fp32 upcast, the
log-softmax and its gradient, so the step holds the compute-dtype logits and one compute-dtype
gradient instead of three fp32 [tokens, vocab] tensors. Checked here: the memory plugin's
logits term, the explicit override, the oddity warning, the planner's mirror of the reserve's
transient block, and the evidence mapper's torchtitan commit windows.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from fmest import to_job

GIB = 2 ** 30
ROOT = Path(__file__).resolve().parents[1]


def _job(**training):
    tr = {"stack": "torchtitan", "technique": "full", "seq_len": 8192, "dtype": "bf16",
          "micro_batch_size": 1, "activation_checkpointing": "selective", "compile": True}
    tr.update(training)
    return to_job({"model": "meta-llama/Llama-3.1-8B", "training": tr,
                   "parallelism": {"dp": 8, "fsdp": "full_shard"},
                   "hardware": {"gpu": "H100-SXM", "gpus_per_node": 8}})


@pytest.fixture(scope="module")
def engine():
    from fmest.testing import new_engine

    return new_engine(entrypoints=True)


def _logits(engine, job) -> float:
    return engine.estimate(job, quantities=("memory",)).memory.components["logits_and_loss"]


def test_torchtitan_compiled_loss_holds_two_compute_dtype_copies(engine):
    tokens, vocab = 8192, 128256
    compiled = _logits(engine, _job())
    # the compute-dtype logits (the compiled graph's saved input) and their gradient
    assert compiled == pytest.approx(2 * tokens * vocab * 2, rel=1e-6)
    eager = _logits(engine, _job(compile_loss=False))
    # three fp32 copies at the start of backward (LOGITS_FP32_COPIES_BACKWARD)
    assert eager == pytest.approx(3 * tokens * vocab * 4, rel=1e-6)
    # no compile: the loss is eager whatever compile_loss says
    assert _logits(engine, _job(compile=False)) == pytest.approx(eager)


def test_other_stacks_keep_the_eager_loss_unless_told(engine):
    hf = _job(stack="hf-trainer")
    told = _job(stack="hf-trainer", compile_loss=True)
    assert _logits(engine, told) < 0.5 * _logits(engine, hf)


def test_compile_loss_without_compile_is_warned_as_ignored(engine):
    from fmest import bounds

    model = engine.resolve_model(_job())
    warnings = bounds.check_oddities(_job(compile=False, compile_loss=True), model)
    assert len(warnings) == 1 and warnings[0].startswith("training.compile_loss: ignored")
    assert bounds.check_oddities(_job(compile_loss=False), model) == ()


def test_planner_mirrors_the_compiled_transient_block(engine):
    from fmest.plan.planner import Constraints
    from fmest.testing import fsdp_full_shard_rows, planner_engine_errors

    job = to_job({"model": "meta-llama/Llama-3.1-8B",
                  "training": {"stack": "torchtitan", "seq_len": 8192, "compile": True},
                  "workload": {"dataset_tokens": 1e8},
                  "options": {"fit_confidence": 0.5}})
    drawn = planner_engine_errors(engine, job, Constraints(gpus="H100-SXM", max_gpus=8,
                                                           objective="time"),
                                  select=fsdp_full_shard_rows, n=12)
    assert drawn
    assert float(np.median([abs(mem) for _, mem, _ in drawn])) <= 0.01


def test_mapper_reads_torchtitan_commit_windows():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import measured

    # 9dec370 (2024-12-26): between "turning off compile on loss function" (2024-12-18) and
    # build_cross_entropy_loss (2025-04-02)
    assert measured._torchtitan_eager_loss("pretraining with torchtitan @9dec370 (torch x)")
    # 6a6f755d (2024-12-03): the loss was compiled (2024-10-22 .. 2024-12-18)
    assert not measured._torchtitan_eager_loss("torchtitan @6a6f755d")
    assert not measured._torchtitan_eager_loss("torchtitan 0.0.2")
