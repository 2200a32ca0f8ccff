"""The GPU-evidence path (issue 13): training on rows that carry their source (weighed equally,
held out one at a time), the shipped default bundle, intervals and ``fits_probability``, the
out-of-domain fallback, and hybrid's rank for scaled traces."""

from __future__ import annotations

import csv
import json
import math
import random

import pytest

pytest.importorskip("lightgbm")
memory_theory = pytest.importorskip("fmest_memory_theory.plugin")
time_roofline = pytest.importorskip("fmest_time_roofline.plugin")

from fmest.cli import main  # noqa: E402
from fmest.convert import job_from_dict  # noqa: E402
from fmest.estimates import MemoryEstimate, Provenance, fits_probability  # noqa: E402
from fmest.output.report import report_to_dict  # noqa: E402
from fmest.policies import builtin_policies  # noqa: E402
from fmest.testing import new_engine  # noqa: E402
from fmest_learned_lgbm import plugin as learned_plugin  # noqa: E402
from fmest_learned_lgbm.baseline import comparable_bytes, theory_answers  # noqa: E402
from fmest_learned_lgbm.bundle import gated_point, load_bundle  # noqa: E402
from fmest_learned_lgbm.bundles import BUNDLE_DIR, CPU_PROBES_DIR  # noqa: E402
from fmest_learned_lgbm.data import read_dataset  # noqa: E402
from fmest_learned_lgbm.features import EVIDENCE_FEATURES, domain_reasons  # noqa: E402
from fmest_learned_lgbm.train import build_tables, train_target  # noqa: E402

PLUGINS = ((memory_theory, "memory_theory"), (time_roofline, "time_roofline"),
           (learned_plugin, "learned_lgbm"))
MODELS = ("llama-2-7b-hf", "mistral-7b", "facebook/opt-6.7b", "qwen2-7b")
SOURCES = tuple(f"paper-{k}" for k in range(10))  # a leaf needs 4 sources' weight


def engine():
    return new_engine(*PLUGINS)


def _synthetic_rows(eng) -> list[dict]:
    """Rows as benchmarks/learned_gpu.py writes them: the measurement is the analytic answer
    times a factor that depends on a job feature (activation checkpointing: 1.15 memory,
    0.9 time) and on the source (+-3 %, the per-source noise a held-out source brings)."""
    rnd = random.Random(13)
    rows = []
    for n, source in enumerate(SOURCES):
        bias = 1.0 + 0.03 * (n - 4.5) / 4.5
        for k in range(6 + 2 * n):  # unequal sources: weighting matters
            ac = ("full", "none")[k % 2]
            job = {"model": MODELS[(n + k) % len(MODELS)],
                   "hardware": {"gpu": "A100-80GB", "gpus_per_node": 1},
                   "training": {"seq_len": 512 * (1 + k % 4), "micro_batch_size": 1 + k % 3,
                                "technique": "lora", "activation_checkpointing": ac}}
            j = job_from_dict(job)
            memory, time = theory_answers(j, eng.context(j), eng)
            noise = math.exp(rnd.gauss(0, 0.02))
            counter = ("allocated", "reserved", "whole")[k % 3]
            mem = comparable_bytes(memory, counter) * (1.15 if ac == "full" else 1.0) \
                * bias * noise
            step = time.step_seconds * (0.9 if ac == "full" else 1.0) * bias * noise
            rows.append({"id": f"{source}-{k}", "source": source, "job_json": json.dumps(job),
                         "status": "ok", "device": "cuda", "measured_peak_bytes": repr(mem),
                         "memory_counter": counter, "measured_step_seconds": repr(step)})
    return rows


@pytest.fixture(scope="module")
def evidence(tmp_path_factory):
    eng = engine()
    path = tmp_path_factory.mktemp("evidence") / "evidence.csv"
    rows = _synthetic_rows(eng)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


@pytest.fixture(scope="module")
def evidence_bundle(evidence, tmp_path_factory):
    out = tmp_path_factory.mktemp("bundles") / "evidence"
    assert main(["learn", str(evidence), "--out", str(out), "--name", "synthetic"],
                engine=engine()) == 0
    return out


def test_rows_with_sources_are_weighed_equally_and_held_out_one_source_at_a_time(evidence):
    _f, samples = read_dataset(str(evidence))
    assert {s.group for s in samples} == set(SOURCES)
    assert {s.memory_counter for s in samples} == {"allocated", "reserved", "whole"}
    table = build_tables(samples, engine(), ["memory"], EVIDENCE_FEATURES)["memory"]
    assert table.by_source
    rows = list(range(len(table)))
    weights = table.weights(rows)
    per_source: dict[str, float] = {}
    for i, w in zip(rows, weights, strict=True):
        per_source[table.groups[i]] = per_source.get(table.groups[i], 0.0) + w
    assert all(abs(v - 1.0) < 1e-9 for v in per_source.values())  # 6 rows weigh as 24
    assert not any(f in table.names for f in ("source", "id", "source_url"))
    trained = train_target(table)
    assert trained["cv"]["group_by"] == "source" and trained["cv"]["folds"] == len(SOURCES)


def test_evidence_bundle_metadata_learns_the_correction_and_states_loso(evidence_bundle):
    meta = json.loads((evidence_bundle / "metadata.json").read_text())
    assert meta["feature_set"] == "evidence"
    data = meta["training_data"]
    assert data["sources"] == len(SOURCES) and data["gpu_rows"] == data["trained_rows"]
    ev = meta["evaluation"]
    for q in ("memory", "throughput"):
        e = ev[q]
        assert e["sources"] == len(SOURCES)
        # the checkpointing factor (15 % / 10 %) is learnable from the other sources: the
        # rows it applies to (the upper tail of theory's errors) come closer
        assert e["p90_abs_error_hybrid"] < e["p90_abs_error_theory"] - 0.03, e
        assert e["median_abs_error_hybrid"] <= e["median_abs_error_theory"], e
        assert 0.5 <= e["interval_coverage"] <= 1.0
    assert meta["targets"]["memory"]["loso"]["method"].startswith("leave-one-source-out")
    assert meta["targets"]["memory"]["predict_counter"] == "reserved"


def test_evidence_bundle_answers_with_intervals_and_fits_probability(evidence_bundle):
    job = job_from_dict({"model": "llama-2-7b-hf", "hardware": {"gpu": "A100-80GB"},
                         "training": {"seq_len": 1024, "micro_batch_size": 2,
                                      "technique": "lora", "activation_checkpointing": "full"},
                         "options": {"method": "hybrid",
                                     "learned_model": str(evidence_bundle)}})
    report = engine().estimate(job, quantities=("memory", "time"))
    for est, value in ((report.memory, report.memory.total_bytes),
                       (report.time, report.time.step_seconds)):
        assert est.provenance.basis == "learned" and est.provenance.in_domain
        lo, hi = est.provenance.interval
        assert lo <= value <= hi and lo < hi
        assert "P10-P90" in est.provenance.detail
    out = report_to_dict(report)["memory"]
    assert 0.0 <= out["fits_probability"] <= 1.0
    assert out["headroom_p90_bytes"] == (out["headroom_bytes"] + out["total_bytes"]
                                         - int(out["provenance"]["interval"][1]))
    theory = engine().estimate(job_from_dict({"model": "llama-2-7b-hf"}),
                               quantities=("memory",))
    # an analytic answer carries the shipped residual table's interval (fmest.uncertainty),
    # not the bundle's conformal one
    assert "leave-one-source-out residuals" in theory.memory.provenance.detail
    assert 0.0 <= report_to_dict(theory)["memory"]["fits_probability"] <= 1.0


def test_out_of_domain_falls_back_to_theory_under_learned_and_hybrid(evidence_bundle):
    for method in ("learned", "hybrid"):
        # the time correction splits on checkpointing; 'selective' was never seen
        job = job_from_dict({"model": "llama-2-7b-hf", "hardware": {"gpu": "A100-80GB"},
                             "training": {"seq_len": 1024, "technique": "lora",
                                          "activation_checkpointing": "selective"},
                             "options": {"method": method,
                                         "learned_model": str(evidence_bundle)}})
        report = engine().estimate(job, quantities=("memory", "time"))
        assert report.time.provenance.basis == "analytic", method
        rule = report.decisions["time"].rule
        assert "outside its training domain" in rule, rule
        learned = [c for c in report.decisions["time"].candidates
                   if c.provenance.basis == "learned"]
        assert any("activation_checkpointing='selective' not seen" in n
                   for n in learned[0].notes)


def test_shipped_default_bundle_is_trained_on_gpu_evidence(capsys):
    b = load_bundle(BUNDLE_DIR)
    data = b.meta["training_data"]
    assert data["gpu_rows"] >= 400 and data["sources"] >= 25
    assert set(b.targets) == {"memory", "time"}
    for q in ("memory", "throughput"):
        e = b.meta["evaluation"][q]
        assert e["median_abs_error_theory"] > 0 and e["median_abs_error_hybrid"] > 0
        # calibrated on held-out sources: 80 % +- 5 % of measurements inside
        assert 0.75 <= e["interval_coverage"] <= 0.85, (q, e["interval_coverage"])
    for target in b.targets.values():
        names = [f["name"] for f in target.features]
        assert not any("source" in n or n in ("id", "url") for n in names)
    assert load_bundle(CPU_PROBES_DIR).meta["training_data"]["device"] == ["cpu"]
    assert main(["learned-models", "--format", "json"], engine=engine()) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert {"default", "cpu-probes"} <= set(rows)
    d = rows["default"]
    assert d["trained_rows"] == data["trained_rows"] and d["sources"] == data["sources"]
    assert d["gpu_rows"] == data["gpu_rows"]
    assert {"median_abs_error_theory", "median_abs_error_hybrid"} <= set(d["loso"]["memory"])


def test_shipped_default_bundle_answers_an_8b_job_with_intervals():
    base = {"model": "meta-llama/Llama-3.1-8B", "hardware": {"gpu": "H100-SXM"},
            "parallelism": {"dp": 8, "fsdp": "full_shard"}, "training": {"seq_len": 8192}}
    job = job_from_dict({**base, "options": {"method": "hybrid"}})
    report = engine().estimate(job, quantities=("memory", "time"))
    for est in (report.memory, report.time):
        assert est.provenance.basis == "learned", report.decisions
        assert est.provenance.interval is not None and "P10-P90" in est.provenance.detail
    # a sane step: within 3x of the analytic roofline (the CPU-probe bundle said 7.4 hours)
    theory = engine().estimate(job_from_dict(base), quantities=("time",))
    ratio = report.time.step_seconds / theory.time.step_seconds
    assert 1 / 3 < ratio < 3, ratio


def test_gated_point_keeps_theory_unless_the_interval_excludes_it():
    assert gated_point(1.0, True, -0.1, 0.05, 0.2) == 0.0
    assert gated_point(1.0, True, 0.02, 0.1, 0.2) == pytest.approx(0.1)
    assert gated_point(0.5, False, -0.1, 0.1, 0.2) == pytest.approx(0.05)


def test_domain_checks_only_features_a_tree_splits_on():
    spec = [{"name": "gpu", "kind": "categorical", "levels": ["A100"], "used": False},
            {"name": "tp", "kind": "numeric", "min": 1, "max": 8, "used": True}]
    assert domain_reasons(spec, {"gpu": "H100", "tp": 4}) == []
    assert domain_reasons(spec, {"gpu": "H100", "tp": 16}) == [
        "tp=16 outside training range [1, 8]"]
    spec[0]["used"] = True
    assert "not seen in training" in domain_reasons(spec, {"gpu": "H100", "tp": 4})[0]


def test_fits_probability_reads_the_p10_p90_interval():
    gib = 2**30
    interval = (60 * gib, 80 * gib)
    assert fits_probability(70 * gib, interval, 80 * gib) == pytest.approx(0.9)
    assert fits_probability(70 * gib, interval, 70 * gib) == pytest.approx(0.5)
    assert fits_probability(70 * gib, interval, 60 * gib) == pytest.approx(0.1)
    assert fits_probability(70 * gib, None, 80 * gib) is None
    probs = [fits_probability(70 * gib, interval, u * gib) for u in range(50, 100, 5)]
    assert probs == sorted(probs)  # more usable memory never lowers the probability


def _memory(basis, plugin, total, scaled=None):
    return MemoryEstimate(total_bytes=total, components={"weights": total},
                          provenance=Provenance(basis=basis, plugin=plugin, scaled=scaled))


def test_hybrid_ranks_a_scaled_trace_below_analytic_and_an_executed_one_above():
    hybrid = {p.name: p for p in builtin_policies()}["hybrid"]
    analytic = _memory("analytic", "memory_theory", 10)
    scaled = _memory("traced", "torch_runner", 5, scaled=True)
    executed = _memory("traced", "torch_runner", 9, scaled=False)
    d = hybrid.choose("memory", [scaled, analytic])
    assert d.chosen is analytic and "scaled, not executed" in d.rule
    assert hybrid.choose("memory", [executed, analytic]).chosen is executed
    assert hybrid.choose("memory", [scaled]).chosen is scaled  # still better than nothing
    traced = {p.name: p for p in builtin_policies()}["traced"]
    assert traced.choose("memory", [scaled, analytic]).chosen is scaled  # asked for it
