"""IBM fm-training-estimator's own test-suite (foundation-model-stack/fm-training-estimator @
1d04f05), ported onto the drop-in ``fmest.compat.fm_training_estimator``.

One test here per test there, named ``test_<original file>__<original test>`` (a file whose name
does not start with ``test_`` gets the prefix: ``memory/hybrid/hybrid_test.py::test_hybrid`` is
``test_hybrid_test__test_hybrid``; ``throughput/hybrid/test_hybrid.py::test_hybrid_lookup`` is
``test_hybrid__test_hybrid_lookup``). The original's ``regressor/lookup/test_lookup.py`` and
``utils/test_model.py`` are ported in ``test_learned_path.py``. Its example inputs are copied
under ``tests/compat/data/original/`` (``SOURCE.md``); its lookup CSVs are ``data/data*.csv``.

The original tests its internal classes (``FullParameterTuningEstimator``, ``FSDPEstimator``,
``LoraEstimator``, ``QLoraEstimator``, ``HybridEstimator``, ``HybridSpeedEstimator``,
``MinGpuRecommenderCaller`` ...), which are not part of the drop-in: each test's *claim* is
asserted on the public surface instead (``parse`` and the SDK's ``estimate_memory`` /
``estimate_tokens`` on the ``EstimateInput`` built from ``parse``'s dataclasses, and
``ui.core.run``, the flat answer of the CLI and REST route, whose ``*_og`` values are bytes).
The original's estimators size one GPU unless told otherwise; the drop-in's ``numGpusPerPod``
default 0 means "search the fewest GPUs" (the original's rule), so the ports of single-GPU claims
say ``numGpusPerPod: 1``.

Tally of the 31 original tests:

* 5 pass as they are (imports switched, the config file path pointed at the copy):
  ``test_parser`` x3, ``test_utils`` x2.
* 13 ported onto the public surface, the claim kept: ``test_fsdp``, ``test_full`` x4,
  ``hybrid_test::test_use_model_features`` (lookup half; its regression half has no
  equivalent: data3.csv's 2 rows train no model, theory answers and says so),
  ``test_lora``, ``test_qlora``, ``test_recommender::test_run_with_invalid_config`` and
  ``::test_run_with_infeasible_config``, ``throughput test_hybrid::test_hybrid_lookup``,
  ``::test_hybrid_reg`` and ``::test_hybrid_model_features`` (their ">" bounds hold from
  theory: data2/data3 are below the 8 rows a model is trained from).
* 7 skipped, no equivalent: ``test_reg`` x2 (xgboost), ``test_mock`` x2 (a seeded RNG),
  ``test_te0::test_te_raw_hf_dataset`` and ``test_te2::test_te_raw_hf_dataset`` (the Hub's
  super_glue, offline), ``test_te2::test_te2_contract`` (TE2's contract generator).
* 6 deliberate differences, fmest's number asserted with the arithmetic:
  ``hybrid_test::test_hybrid`` (gradient memory of the peak phase),
  ``test_recommender::test_run_with_valid_config`` (per-device batch 16 x 8192 tokens cannot
  fit at any count) and ``::test_run_with_valid_config_granite_3_3`` (8B full fine-tuning on one
  80 GB GPU), ``throughput test_hybrid::test_hybrid_empty`` (theory answers where the original
  raises), ``test_te0::test_te_raw_json`` and ``test_te2::test_te_raw_json`` (no padding model).

Beside them, regression tests hold the drop-in's bugs found while porting (a looked-up total
kept exactly through the parts; one warning per absent default).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fmest.compat.fm_training_estimator.config import is_fsdp, parse
from fmest.compat.fm_training_estimator.sdk import estimate_memory, estimate_tokens
from fmest.compat.fm_training_estimator.ui.core import run
from fmest.compat.fm_training_estimator.utils import fmt_size
from fmest.errors import FmestError

DATA = Path(__file__).parent / "data"
ORIGINAL = DATA / "original"
GiB = 1024**3
GB = 1_000_000_000
UNITS = ["B", "KiB", "MiB", "GiB", "TiB"]


def lookup_csv(name: str) -> str:
    """One of the original's lookup CSVs (regressor/test_data/), once the lookup port exists."""
    pytest.importorskip("fmest.compat.fm_training_estimator.lookup",
                        reason="the lookup port (lookup.py) is not there yet")
    path = DATA / name
    if not path.is_file():
        pytest.skip(f"{path} is not there yet (copied by the lookup port)")
    return str(path)


def estimate_input(config: dict, lookup: str | None = None):
    """``parse(config)``'s six dataclasses as the SDK's ``EstimateInput`` (``JobConfig`` takes
    them in its own positional order: hf_training, fm, data, infra, peft_lora, peft_qlora)."""
    from fmest.compat.fm_training_estimator.config.arguments import (
        EstimateInput,
        EstimatorMetadata,
        JobConfig,
    )

    fm, ta, ia, da, la, qla = parse(config)
    meta = None if lookup is None else EstimatorMetadata(base_data_path=lookup)
    return EstimateInput(job_configs=[JobConfig(ta, fm, da, ia, la, qla)],
                         estimator_metadata=meta)


def size_bytes(size: str) -> float:
    """The bytes of one of the original's readable sizes (``fmt_size``: ``"30.0 GiB"``)."""
    number, unit = size.split()
    return float(number) * 1024 ** UNITS.index(unit)


# -- config/test_parser.py ------------------------------------------------------------------
def test_parser__test_parse_empty_dict():
    config = {}
    _, _, _, _, _, _ = parse(config)


def test_parser__test_parse_dict():
    config = {
        "max_seq_length": 1023,
        "gpu_memory_in_gb": 40,
        "block_size": 1023,
        "per_device_train_batch_size": 2,
        "dataset": "my-dataset",
    }
    fm, ta, ia, da, _, _ = parse(config)

    assert fm.max_seq_length == 1023
    assert ia.gpu_memory_in_gb == 40
    assert fm.block_size == 1023
    assert ta.per_device_train_batch_size == 2
    assert da.dataset == "my-dataset"


def test_parser__test_parse_file():
    config_file_1 = (ORIGINAL / "config4.json").as_posix()
    fm, ta, ia, da, _, _ = parse(config_file_1)

    assert da.dataset_config_file == "abc.json"


# -- config/test_utils.py -------------------------------------------------------------------
def test_utils__test_fsdp_empty():
    config = {}
    _, ta, _, _, _, _ = parse(config)

    assert is_fsdp(ta) is False


def test_utils__test_fsdp_enabled():
    config = {"fsdp": "full_shard"}
    _, ta, _, _, _, _ = parse(config)

    assert is_fsdp(ta) is True

    config = {"fsdp": ["hybrid_shard", "offload"]}
    _, ta, _, _, _, _ = parse(config)

    assert is_fsdp(ta) is True


# -- memory/fsdp/test_fsdp.py ---------------------------------------------------------------
def test_fsdp__test_fsdp(engine):
    """FSDP full_shard divides the model memory by the GPU count: 1 -> 2 -> 4 GPUs halve and
    quarter it (granite-8b-code-base in fp32: 8.05e9 params x 4 bytes = 32.2e9 bytes)."""
    config = {"base_model_path": "ibm-granite/granite-8b-code-base", "gpu_memory_in_gb": 80,
              "fsdp": "full_shard"}
    mm = {}
    for n in (1, 2, 4):
        out = run({**config, "numGpusPerPod": n}, engine=engine)
        assert out["num_gpus"] == n
        mm[n] = out["model_memory_og"]

    assert mm[1] == mm[2] * 2
    assert mm[1] == mm[4] * 4
    assert 32 * GB < mm[1] < 32.5 * GB


# -- memory/full/test_full.py ---------------------------------------------------------------
def test_full__test_full(engine):
    """The default model (granite-3b-code-base, float32): model memory between 5 and 15 GB
    (3.48e9 params x 4 bytes = 13.9 GB)."""
    mem = estimate_memory(estimate_input({"numGpusPerPod": 1}), engine=engine)

    mm = size_bytes(mem.model_memory)
    assert mm > 5 * 1_000_000_000
    assert mm < 15 * 1_000_000_000


def test_full__test_custom_model(engine):
    mem = estimate_memory(estimate_input({"base_model_path": "ibm-granite/granite-8b-code-base",
                                          "numGpusPerPod": 1}), engine=engine)

    mm = size_bytes(mem.model_memory)
    assert mm > 25 * 1_000_000_000
    assert mm < 35 * 1_000_000_000


def test_full__test_half_precision(engine):
    mem = estimate_memory(estimate_input({"base_model_path": "ibm-granite/granite-8b-code-base",
                                          "torch_dtype": "float16", "numGpusPerPod": 1}),
                          engine=engine)

    mm = size_bytes(mem.model_memory)
    assert mm > 10 * 1_000_000_000
    assert mm < 20 * 1_000_000_000


def test_full__test_gradient_checkpointing(engine):
    """Checkpointing cuts activation memory more than tenfold. As in the original, the flag
    is set on the parsed ``TrainingArguments`` after the fact (the README code's way).
    fmest's ``activation_memory`` is everything of the peak phase that is not weights,
    gradients or optimizer state: 258 GiB at the backward peak without checkpointing, 15.6
    GiB (the optimizer step's working set) with it."""
    est_input = estimate_input({"base_model_path": "ibm-granite/granite-8b-code-base",
                                "numGpusPerPod": 1})
    mm1 = size_bytes(estimate_memory(est_input, engine=engine).activation_memory)

    est_input.job_configs[0].hf_training.gradient_checkpointing = True
    mm2 = size_bytes(estimate_memory(est_input, engine=engine).activation_memory)

    assert mm2 * 10 < mm1


def test_full__defaults_are_named_once(engine):
    mem = estimate_memory(estimate_input({"numGpusPerPod": 1}), engine=engine)
    assert len([w for w in mem.warnings if "fm.torch_dtype absent" in w]) == 1


# -- memory/hybrid/hybrid_test.py -----------------------------------------------------------
HYBRID = {"base_model_path": "ibm-granite/granite-7b-base", "gpu_memory_in_gb": 80,
          "fsdp": "full_shard", "per_device_train_batch_size": 4, "block_size": 512}


def test_hybrid_test__test_hybrid(engine):
    """Deliberate difference (the gradient part). The lookup half as the original: data2.csv's
    row (granite-7b-base, 2 GPUs, batch 4, 512) answers memory 20 (bytes, as the original's
    ``fmt_size`` prints it). With 3 GPUs no row matches: the original's xgboost model answers,
    fmest's theory (data2.csv has 7 rows, fewer than a model is trained from): total >= 10 GiB
    and model memory >= 7 GiB hold (6.74e9 params x 4 bytes / 3 GPUs = 8.98e9 bytes = 8.4 GiB).

    The original also asserts gradient memory == model memory: its four parts are independent
    formulas. fmest's parts are the breakdown of the peak phase (docs/compat.md). Here the peak
    is the backward pass (56.8 GiB), reached before any gradient is written, so
    ``gradient_memory`` is 0; with gradient checkpointing the peak moves to the optimizer step,
    where the gradient shard equals the weight shard, 8.98e9 bytes each, as the original says."""
    data2 = lookup_csv("data2.csv")
    mem = estimate_memory(estimate_input({**HYBRID, "numGpusPerPod": 2}, data2), engine=engine)
    # Direct lookup example
    assert mem.total_mem_estimate == "20.0 B"
    assert any(w.startswith("total_mem_estimate from lookup: ") for w in mem.warnings)

    out = run({**HYBRID, "numGpusPerPod": 3}, data2, engine=engine)
    # Lookup fails - the original's regression, fmest's theory
    assert out["total_mem_estimate_og"] >= 10 * 1024 * 1024 * 1024
    assert out["model_memory_og"] >= 7 * 1024 * 1024 * 1024
    assert any("has 7 rows" in w for w in out["warnings"])
    assert out["memory_phase"] == "backward" and out["gradient_memory_og"] == 0

    ckpt = run({**HYBRID, "numGpusPerPod": 3, "gradient_checkpointing": True}, data2,
               engine=engine)
    assert ckpt["memory_phase"] == "optimizer"
    assert ckpt["gradient_memory_og"] == ckpt["model_memory_og"] >= 7 * 1024 * 1024 * 1024


def test_hybrid_test__test_use_model_features(engine):
    """data3.csv is the original's format v2 (model features instead of the name): granite-7b-
    base's features (LlamaForCausalLM, 4096, 11008, 32, 32, 32) match its second row (4 GPUs,
    batch 16, 1024), whose memory is 20. granite-8b-code-base (intermediate 14336, 36 layers,
    8 KV heads) matches no row: the original's xgboost model trained on the two rows answers
    activation memory < 30 (the CSV's own unit); fmest trains no model from 2 rows and answers
    from theory, saying so (no equivalent for that half)."""
    data3 = lookup_csv("data3.csv")
    config = {**HYBRID, "per_device_train_batch_size": 16, "block_size": 1024,
              "numGpusPerPod": 4}
    mem = estimate_memory(estimate_input(config, data3), engine=engine)
    # Direct lookup example should work as before
    assert mem.total_mem_estimate == "20.0 B"

    config["base_model_path"] = "ibm-granite/granite-8b-code-base"
    mem = estimate_memory(estimate_input(config, data3), engine=engine)
    assert size_bytes(mem.total_mem_estimate) > GiB          # theory, not a looked-up 20
    assert any("has 2 rows" in w for w in mem.warnings)


def test_hybrid_test__test_use_model_features__flat_answer_keeps_the_looked_up_total(engine):
    data3 = lookup_csv("data3.csv")
    config = {**HYBRID, "per_device_train_batch_size": 16, "block_size": 1024,
              "numGpusPerPod": 4}
    mem = estimate_memory(estimate_input(config, data3), engine=engine)
    out = run(config, data3, engine=engine)
    assert out["total_mem_estimate_og"] == 20.0
    assert sum(mem.parts.values()) == pytest.approx(20)
    for key in ("total_mem_estimate", "activation_memory", "gradient_memory", "model_memory",
                "optimizer_memory"):
        assert out[key] == fmt_size(out[key + "_og"]) == getattr(mem, key), key


# -- memory/lora/test_lora.py and memory/qlora/test_qlora.py --------------------------------
LORA = {"base_model_path": "codellama/CodeLlama-13b-hf", "per_device_train_batch_size": 1,
        "torch_dtype": "bfloat16", "r": 8, "numGpusPerPod": 1}


def test_lora__test_lora(engine):
    """LoRA's optimizer memory is under 100 MB: r 8 on q_proj and v_proj of CodeLlama-13b's 40
    layers is 40 x 2 x 8 x (5120 + 5120) = 6,553,600 adapter parameters; fmest's optimizer
    memory is 26,214,400 bytes (4 bytes each). The original's test builds a LoraEstimator
    directly; on the public surface the technique is named (``technique: lora``), and the
    rank is honoured (r 16 doubles it)."""
    mem = estimate_memory(estimate_input({**LORA, "technique": "lora"}), engine=engine)

    assert size_bytes(mem.optimizer_memory) < 100 * 1_000_000
    r16 = run({**LORA, "technique": "lora", "r": 16}, engine=engine)
    r8 = run({**LORA, "technique": "lora"}, engine=engine)
    assert r16["optimizer_memory_og"] == pytest.approx(2 * r8["optimizer_memory_og"])


def test_qlora__test_qlora(engine):
    """QLoRA: the same adapters, optimizer memory under 100 MB; the base weights in nf4 hold
    far less than LoRA's bf16 weights (13e9 params x 0.5 byte against x 2 bytes)."""
    mem = estimate_memory(estimate_input({**LORA, "technique": "qlora",
                                          "use_double_quant": False}), engine=engine)

    assert size_bytes(mem.optimizer_memory) < 100 * 1_000_000
    lora = estimate_memory(estimate_input({**LORA, "technique": "lora"}), engine=engine)
    assert size_bytes(mem.model_memory) < size_bytes(lora.model_memory) / 2


# -- regressor/min_gpu/test_recommender.py --------------------------------------------------
# The original asks IBM's autoconf min-GPU recommender (an AutoGluon classifier trained on
# measured runs) with model_name, method, gpu_model (NVIDIA-A100-80GB-PCIe), tokens_per_sample
# and batch_size. The drop-in's equivalent is the original's own "numGpusPerPod: 0" (find the
# count): fmest's fewest-GPU search, whose answer is MemoryEstimate.num_gpus, and
# ValueError("Input configuration is infeasible! ...") when no count fits.
A100_80 = {"gpuModel": "A100", "gpu_memory_in_gb": 80, "numGpusPerPod": 0}


def test_recommender__test_run_with_valid_config(engine):
    """Deliberate difference. llama3-8b LoRA, 8192 tokens per sample, batch 16: the recommender
    says 1 worker x 4 GPUs. Read as the original's per-device batch, 16 x 8192 = 131,072
    tokens per GPU cannot fit at any count: FSDP shards weights, gradients and optimizer state,
    not a GPU's own activations, and at the start of backward the loss alone holds 131,072
    tokens x 128,256 vocabulary x 12 bytes (three fp32 copies: the saved log-softmax, its
    gradient, the logits' gradient) = 201.7e9 bytes > 80 GiB (85.9e9), even with gradient
    checkpointing. The recommender's 4 GPUs fit when the 16 are
    split over them, 4 per GPU: fmest's per-GPU peak is then 69.0 GiB <= 80 GiB."""
    config = {**A100_80, "base_model_path": "llama3-8b", "technique": "lora",
              "torch_dtype": "bfloat16", "block_size": 8192, "per_device_train_batch_size": 16,
              "gradient_checkpointing": True}
    with pytest.raises(ValueError, match="Input configuration is infeasible!"):
        estimate_memory(estimate_input(config), engine=engine)
    at4 = estimate_memory(estimate_input({**config, "numGpusPerPod": 4}), engine=engine)
    assert at4.parts["logits_and_loss"] == pytest.approx(131_072 * 128_256 * 12, rel=0.01)
    assert at4.parts["logits_and_loss"] > 80 * GiB

    split = estimate_memory(estimate_input({**config, "numGpusPerPod": 4,
                                            "per_device_train_batch_size": 4}), engine=engine)
    assert split.num_gpus == 4
    assert size_bytes(split.total_mem_estimate) <= 80 * GiB


def test_recommender__test_run_with_valid_config_granite_3_3(engine):
    """Deliberate difference. granite-3.2-8b-instruct full fine-tuning, 1024 tokens, batch 4:
    the recommender says 1 GPU. It cannot fit one 80 GB A100: in the original's default
    float32, weights (4 bytes) + gradients (4) + AdamW's two moments (8) are 16 bytes x 8.17e9
    params = 130.7e9 bytes > 80 GiB (85.9e9) before any activation. In bfloat16 with gradient
    checkpointing (2 + 2 + 2 x 2 bytes) one GPU holds 16.34e9 weights + 16.34e9 gradients +
    32.68e9 AdamW state + 16.34e9 optimizer-step temporaries (the optimizer phase's peak) +
    the allocator reserve (docs/allocator.md: ~1.5 GiB at this size, capped at the device) +
    0.6e9 CUDA context = 83.9e9 bytes = 78.2 GiB <= 80 GiB: there fmest agrees, 1 GPU."""
    config = {**A100_80, "base_model_path": "granite-3.2-8b-instruct", "technique": "full",
              "block_size": 1024, "per_device_train_batch_size": 4}
    one = estimate_memory(estimate_input({**config, "numGpusPerPod": 1}), engine=engine)
    params = one.parts["weights"] / 4
    assert 8.1e9 < params < 8.25e9
    states = one.parts["weights"] + one.parts["gradients"] + one.parts["optimizer_states"]
    assert states == pytest.approx(16 * params, rel=0.01) and states > 80 * GiB
    assert estimate_memory(estimate_input(config), engine=engine).num_gpus > 1

    bf16 = {**config, "torch_dtype": "bfloat16", "gradient_checkpointing": True}
    one = estimate_memory(estimate_input({**bf16, "numGpusPerPod": 1}), engine=engine)
    tensors = sum(v for k, v in one.parts.items() if k not in ("allocator_reserve",
                                                               "cuda_context"))
    assert tensors == pytest.approx(16.34e9 * 5, rel=0.01)
    assert size_bytes(one.total_mem_estimate) <= 80 * GiB
    assert estimate_memory(estimate_input(bf16), engine=engine).num_gpus == 1


def test_recommender__test_run_with_invalid_config(engine):
    """An unknown model gets no GPU count. The recommender answers workers/gpus -1; the
    drop-in raises an InputError naming the field and the close presets."""
    config = {**A100_80, "base_model_path": "granite-5.0-d453da", "technique": "lora",
              "block_size": 8192, "per_device_train_batch_size": 16}
    with pytest.raises(FmestError, match="granite-5.0-d453da"):
        estimate_memory(estimate_input(config), engine=engine)


def test_recommender__test_run_with_infeasible_config(engine):
    """llama3-8b LoRA, 32768 tokens x batch 128: no count fits (the recommender's -1/-1; the
    SDK's ValueError; the flat answer's error, as the original's ui/core.py)."""
    config = {**A100_80, "base_model_path": "llama3-8b", "technique": "lora",
              "torch_dtype": "bfloat16", "block_size": 32768,
              "per_device_train_batch_size": 128}
    with pytest.raises(ValueError, match="Input configuration is infeasible!"):
        estimate_memory(estimate_input(config), engine=engine)
    out = run(config, engine=engine)
    assert out["error"] == "Input configuration is infeasible!" and out["reason"]


# -- regressor/xgboost/test_reg.py ----------------------------------------------------------
def test_reg__test_reg_lifecycle():
    pytest.skip("no equivalent: the original's XGBoostRegressor (train on data1.csv, save, "
                "load, run) is its model format; fmest does not depend on xgboost and reads "
                "no xgboost zip (a model_path zip is named in the warnings). Its learned path "
                "trains LightGBM bundles: test_learned_path.py")


def test_reg__test_reg_multi():
    pytest.skip("no equivalent: XGBoostRegressor trained on data2.csv's three targets "
                "(tokens_per_second, memory, memory_act); fmest reads no xgboost model")


# -- throughput/hybrid/test_hybrid.py -------------------------------------------------------
SPEED = {"base_model_path": "ibm-granite/granite-7b-base", "per_device_train_batch_size": 4,
         "block_size": 512}


def test_hybrid__test_hybrid_empty(engine):
    """Deliberate difference. The original's HybridSpeedEstimator raises RuntimeError("Hybrid
    SpeedEstimator not properly initialized") without a lookup CSV and a model; its
    ui/core.py builds one for every answer (and its SDK for every time and tokens answer), so
    its CLI fails on any config given without -l/-m, though its ui/README.md calls both
    optional. fmest answers tokens/s from
    theory."""
    tokens = estimate_tokens(estimate_input({"numGpusPerPod": 1}), engine=engine)
    assert isinstance(tokens.tps, float) and tokens.tps > 0
    assert run({"numGpusPerPod": 1}, engine=engine)["tps"] == tokens.tps


def test_hybrid__test_hybrid_lookup(engine):
    data2 = lookup_csv("data2.csv")
    config = {**SPEED, "numGpusPerPod": 2}
    tokens = estimate_tokens(estimate_input(config, data2), engine=engine)

    assert tokens.tps == 500
    # test lookup approach (the original asks get_tps(1024): the sequence length 1024)
    tokens = estimate_tokens(estimate_input({**config, "block_size": 1024}, data2),
                             engine=engine)
    assert tokens.tps == 1000


def test_hybrid__test_hybrid_reg(engine):
    """4 GPUs: no row of data2.csv. The original's xgboost model answers > 300; fmest trains
    no model from its 7 rows and theory answers (1,285 tokens/s), saying so."""
    data2 = lookup_csv("data2.csv")
    tokens = estimate_tokens(estimate_input({**SPEED, "numGpusPerPod": 4}, data2),
                             engine=engine)

    assert tokens.tps > 300
    assert any("has 7 rows" in w for w in tokens.warnings)


def test_hybrid__test_hybrid_model_features(engine):
    """granite-8b-code-base's features match no row of data3.csv (v2): the original's model
    answers > 400; fmest's theory does (1,097 tokens/s)."""
    data3 = lookup_csv("data3.csv")
    config = {"base_model_path": "ibm-granite/granite-8b-code-base",
              "per_device_train_batch_size": 16, "block_size": 1024, "numGpusPerPod": 4}
    tokens = estimate_tokens(estimate_input(config, data3), engine=engine)

    assert tokens.tps > 400
    assert any("has 2 rows" in w for w in tokens.warnings)


# -- throughput/mock/test_mock.py -----------------------------------------------------------
def test_mock__test_mock_1():
    pytest.skip("no equivalent: MockSpeedEstimator draws tokens/s from numpy's RNG seeded "
                "with 10 (1355 at block_size 512): a placeholder, not an estimate")


def test_mock__test_mock_2():
    pytest.skip("no equivalent: MockSpeedEstimator's seeded draw (719 at block_size 1024)")


# -- tokens/te0/test_te0.py and tokens/te2/test_te2.py --------------------------------------
TE_TEST1 = ORIGINAL / "te_test1.jsonl"
TOKENS = {"base_model_path": "ibm-granite/granite-8b-code-base", "gpu_memory_in_gb": 80,
          "dataset": str(TE_TEST1), "dataset_text_field": "{text}", "numGpusPerPod": 1}


def test_te0__test_te_raw_hf_dataset():
    pytest.skip("no equivalent offline: super_glue/axb (1104 samples) is a Hugging Face Hub "
                "dataset; fmest counts local files only, and a Hub name answers time None "
                "with a warning (test_examples.py, config4.json and the README example)")


def test_te0__test_te_raw_json(engine):
    """The 9 records are counted. Deliberate difference: the original's TE0 counts
    int(len(text) / 3.6) tokens per record (533 in all, test1.contract.json's total) and
    estimates a padded batch width, the mean over 5 shuffles of each batch's longest record,
    which grows with the batch size (the contract: 59.22 at batch 1, 88.5 at batch 2); fmest
    does not model padding: without a local tokenizer it counts 1936 characters / 4 = 484
    tokens, and ``tokens_per_sample`` is round(484 / 9) = 54 at every batch size."""
    out = {bs: run({**TOKENS, "per_device_train_batch_size": bs}, engine=engine)
           for bs in (1, 2)}

    assert round(out[1]["total_tokens"] / out[1]["tokens_per_sample"]) == 9
    assert out[1]["total_tokens"] == 484
    assert out[1]["tokens_per_sample"] == out[2]["tokens_per_sample"] == 54
    assert out[1]["time"] > out[1]["time_train"] > 0
    assert any("dataset_text_field" in w for w in out[1]["warnings"])


def test_te2__test_te_raw_hf_dataset():
    pytest.skip("no equivalent offline: super_glue/axb from the Hugging Face Hub, with TE2's "
                "contract test_axb.contract.json")


def test_te2__test_te_raw_json(engine):
    """Deliberate difference: TE2 (``te_approach: 2`` with a contract file) pads more than TE0
    in the original (TE0 < TE2 at batch 2); fmest has neither, names both fields as unused
    and counts the same 484 tokens, 54 per record, as for TE0."""
    config = {**TOKENS, "te_approach": 2,
              "dataset_config_file": str(ORIGINAL / "test1.contract.json")}
    te2 = run({**config, "per_device_train_batch_size": 2}, engine=engine)
    te0 = run({**TOKENS, "per_device_train_batch_size": 2}, engine=engine)

    assert round(te2["total_tokens"] / te2["tokens_per_sample"]) == 9
    assert te2["tokens_per_sample"] == te0["tokens_per_sample"] == 54
    assert run({**config, "per_device_train_batch_size": 1},
               engine=engine)["tokens_per_sample"] == 54
    unused = "\n".join(te2["warnings"])
    assert "data.te_approach" in unused and "data.dataset_config_file" in unused


def test_te2__test_te2_contract():
    pytest.skip("no equivalent: GenerateTokenEstimator2Contract (tokens/te2/gen_contract.py) "
                "writes TE2's per-batch-size padding contract; fmest has no TE2 and no padding "
                "model")
