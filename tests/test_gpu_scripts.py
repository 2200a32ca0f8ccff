"""The GPU ground-truth scripts (benchmarks/gpu/, issues 20 and 21) in their CPU smoke modes:
CSV layouts, budget skipping with the reason recorded, OOM rows, failure isolation of run.sh."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / "benchmarks" / "gpu"
TIMEOUT = 240


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


BUILD = _load("fmest_evidence_build", ROOT / "benchmarks" / "data" / "build.py")
RUNS = {
    "mb": ["microbench.py", "--device", "cpu", "--tiny"],
    "mb0": ["microbench.py", "--device", "cpu", "--tiny", "--budget-s", "0"],
    # the default implementation (transformers when installed) with a simulated OOM
    "mp": ["memory_probe.py", "--device", "cpu", "--tiny", "--simulate-oom", ":b2:"],
    "mpn": ["memory_probe.py", "--device", "cpu", "--tiny", "--impl", "native",
            "--max-cases", "2"],
    "mp0": ["memory_probe.py", "--device", "cpu", "--tiny", "--budget-s", "0"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every run at once (subprocesses, in parallel): name -> (returncode, output, out dir)."""
    procs = {}
    env = dict(os.environ, PYTHONUNBUFFERED="1", TRANSFORMERS_VERBOSITY="error")
    env.pop("OUT", None)
    for name, cmd in RUNS.items():
        out = tmp_path_factory.mktemp(name)
        procs[name] = (subprocess.Popen([sys.executable, str(GPU / cmd[0]), *cmd[1:],
                                         "--out", str(out)], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, env=env), out)
    done = {}
    for name, (proc, out) in procs.items():
        text, _ = proc.communicate(timeout=TIMEOUT)
        done[name] = (proc.returncode, text, out)
    return done


def _rows(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def _ok(runs, name):
    rc, text, out = runs[name]
    assert rc == 0, text[-3000:]
    return out


def test_microbench_tiny_rows(runs):
    out = _ok(runs, "mb")
    mb = _load("fmest_gpu_microbench", GPU / "microbench.py")
    header, rows = _rows(out / "microbench_cpu.csv")
    assert header == list(mb.CSV_FIELDS)
    assert {r["kind"] for r in rows} == {"launch", "hbm", "mamf", "sustained", "tf32", "gemm",
                                         "align", "attention", "adamw", "cpu_adamw"}
    tf32 = {r["dtype"] for r in rows if r["kind"] == "tf32" and r["status"] == "ok"}
    assert tf32 == {"tf32", "fp32"}
    cpu = [r for r in rows if r["kind"] == "cpu_adamw"]
    assert len(cpu) == 2 and all(float(r["ns_per_param"]) > 0 for r in cpu)
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) >= 30
    for r in ok:
        assert float(r["median_ms"]) > 0 and r["torch"] and r["date"], r
        rate = {"gemm": "tflops", "mamf": "tflops", "align": "tflops", "attention": "tflops",
                "sustained": "tflops", "tf32": "tflops", "cpu_adamw": "ns_per_param",
                "hbm": "gb_per_s", "adamw": "ns_per_param", "launch": "us_per_launch"}[r["kind"]]
        assert float(r[rate]) > 0, r
    # FLOP counts: 2*m*n*k for GEMMs; FlashAttention's causal count for attention
    g = next(r for r in ok if r["kind"] == "gemm")
    assert int(g["flops"]) == 2 * int(g["m"]) * int(g["n"]) * int(g["k"])
    a = next(r for r in ok if r["kind"] == "attention" and r["pass"] == "fwd")
    dims = dict(part.split("=") for part in a["shape"].split())
    b, s, h, d = (int(dims[k]) for k in ("b", "s", "heads", "d"))
    assert int(a["flops"]) == 4 * b * s * s * h * d // 2
    fp8 = [r for r in rows if r["dtype"] == "fp8"]
    assert fp8 and all(r["status"] == "skipped" and "fp8" in r["reason"] for r in fp8)
    # the sustained case: the last half's median beside the first 50 ms in ``reason``
    sus = next(r for r in ok if r["kind"] == "sustained")
    assert int(sus["n_iter"]) >= 3 and "first 50 ms" in sus["reason"]
    assert float(sus["min_ms"]) <= float(sus["median_ms"])
    summary = json.loads((out / "microbench_cpu.json").read_text())
    assert summary["mamf_bf16_tflops"] > 0 and summary["env"]["torch"]
    assert summary["sustained_bf16_tflops"] > 0


def test_microbench_budget_zero_skips_with_reason(runs):
    out = _ok(runs, "mb0")
    _, rows = _rows(out / "microbench_cpu.csv")
    assert rows and all(r["status"] == "skipped" for r in rows)
    assert all("budget" in r["reason"] or "fp8" in r["reason"] or "CUDA" in r["reason"]
               for r in rows)
    assert sum("--budget-s 0" in r["reason"] for r in rows) >= 20


def test_memory_probe_rows_fit_the_evidence_layout(runs):
    for name in ("mp", "mpn"):
        out = _ok(runs, name)
        header, rows = _rows(out / "memory_probe_cpu.csv")
        assert header == BUILD.COLUMNS
        report = json.loads((out / "memory_probe_cpu.json").read_text())
        ok = [c for c in report["cases"] if c["status"] == "ok"]
        assert ok, report
        assert len(rows) >= 4 * len(ok)
        tps = [r for r in rows if r["kind"] == "throughput"]
        assert len(tps) == len(ok)
        sources = " ".join({r["source"] for r in rows})
        for r in tps:   # a GPU run's rows pass the evidence-set validation as they are
            assert BUILD.row_errors(r, sources) == [], r
            assert float(r["measured_value"]) > 0
        mem = [r for r in rows if r["kind"] == "memory" and r["oom"] != "true"]
        assert {r["measure_type"] for r in mem} == {"max_memory_allocated",
                                                    "max_memory_reserved", "nvidia-smi"}
        # CPU has no CUDA memory counters: marked, never a made-up number
        assert all(r["measured_value"] == "" and r["suspect"] for r in mem)
        assert len({r["id"] for r in rows}) == len(rows)
    lora = [r for r in _rows(runs["mpn"][2] / "memory_probe_cpu.csv")[1]
            if r["technique"] == "lora"]
    assert lora and all("targets=q_proj+k_proj" in r["other"] for r in lora)


def test_memory_probe_records_oom_and_missing_packages(runs):
    out = _ok(runs, "mp")
    _, rows = _rows(out / "memory_probe_cpu.csv")
    oom = [r for r in rows if r["oom"] == "true"]
    assert len(oom) == 1 and oom[0]["micro_batch"] == "2" and oom[0]["measured_value"] == ""
    assert "simulated OOM" in oom[0]["other"]
    assert BUILD.row_errors(oom[0], oom[0]["source"]) == []
    report = json.loads((out / "memory_probe_cpu.json").read_text())
    statuses = {c["id"]: c["status"] for c in report["cases"]}
    assert "oom" in statuses.values()
    after = list(statuses)[list(statuses.values()).index("oom") + 1:]
    assert after, "the grid goes on after an OOM"
    if report["env"]["packages"]["bitsandbytes"].startswith("absent"):
        q = [c for c in report["cases"] if c["technique"] == "qlora"]
        assert q and all(c["status"] == "skipped" and "bitsandbytes" in c["reason"] for c in q)
    assert report["snapshot"].startswith("skipped")


def test_memory_probe_budget_zero_skips_with_reason(runs):
    out = _ok(runs, "mp0")
    header, rows = _rows(out / "memory_probe_cpu.csv")
    assert header == BUILD.COLUMNS and rows == []
    report = json.loads((out / "memory_probe_cpu.json").read_text())
    assert report["cases"] and all(c["status"] == "skipped" for c in report["cases"])
    assert any("--budget-s 0" in c["reason"] for c in report["cases"])


def test_run_sh_goes_on_when_a_script_fails(tmp_path):
    res = subprocess.run(["bash", str(GPU / "run.sh")], capture_output=True, text=True,
                         timeout=60, env=dict(os.environ, OUT=str(tmp_path), PYTHON="false",
                                              MB_BUDGET="1", MP_BUDGET="1"))
    assert res.returncode == 1
    assert "== microbench: exit 1" in res.stdout and "== memory_probe: exit 1" in res.stdout
    assert "== host_overhead: exit 1" in res.stdout
    assert "== done" in res.stdout


def test_host_overhead_cpu_smoke(tmp_path):
    """benchmarks/gpu/host_overhead.py on CPU: every mode gives forward and backward op counts
    per layer that match the count script's (formulas.EAGER_FORWARD/BACKWARD_OPS_*), and a
    positive time per op."""
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    res = subprocess.run([sys.executable, str(GPU / "host_overhead.py"), "--device", "cpu",
                          "--tiny", "--out", str(tmp_path)], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads((tmp_path / "host_overhead_cpu.json").read_text())["summary"]
    by_mode = {(s["lora"], s["checkpointing"]): s for s in summary}
    assert set(by_mode) == {(False, False), (False, True), (True, False), (True, True)}
    from fmest_time_roofline import formulas as F
    plain, ckpt = by_mode[(False, False)], by_mode[(False, True)]
    assert plain["forward_ops_per_layer"] == F.EAGER_FORWARD_OPS_PER_LAYER["none"]
    assert plain["backward_ops_per_layer"] == F.EAGER_BACKWARD_OPS_PER_LAYER["none"]
    assert ckpt["forward_ops_per_layer"] == F.EAGER_FORWARD_OPS_PER_LAYER["full"]
    assert ckpt["backward_ops_per_layer"] == F.EAGER_BACKWARD_OPS_PER_LAYER["full"]
    assert all(s["forward_ops_per_layer"] > 0 for s in summary)
    # timing: 3 steps of a tiny CPU model, so one mode's layer difference can drown in a busy
    # machine's noise (seen once in a dozen runs under load); the modes' total stays positive
    assert sum(s["forward_s_per_layer"] + s["backward_s_per_layer"] for s in summary) > 0


def test_to_evidence_applies_its_three_rules(tmp_path):
    """benchmarks/gpu/to_evidence.py: LoRA rows get precision=pure, the history-recording case's
    tokens/s row is suspect, a carried package's version replaces 'version unknown', and a later
    file's row replaces an earlier one with the same id."""
    import csv as _csv
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "to_evidence", ROOT / "benchmarks" / "gpu" / "to_evidence.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cols = list(mod.COLUMNS)

    def write(name, rows):
        with open(tmp_path / name, "w", newline="") as fh:
            w = _csv.DictWriter(fh, fieldnames=cols)
            w.writeheader()
            for r in rows:
                w.writerow({c: r.get(c, "") for c in cols})

    base = {"source": "s", "stack": "pytorch", "stack_version": "bitsandbytes present (version unknown)"}
    write("memory_probe_run1_X.csv", [
        dict(base, id="a", kind="memory", technique="lora", other="x", measured_value="1"),
        dict(base, id="b", kind="throughput", technique="full",
             other="precision=pure; memory history recorded in this case", measured_value="2"),
    ])
    write("memory_probe_run2_X.csv", [
        dict(base, id="a", kind="memory", technique="qlora", other="y", measured_value="3"),
        # a case that began with another case's 0.979 GiB still allocated, and one with 10 MiB
        dict(base, id="c", kind="memory", technique="full",
             other="foreign_allocated_at_start_gib=0.979", measured_value="4"),
        dict(base, id="d", kind="memory", technique="full",
             other="foreign_allocated_at_start_gib=0.010", measured_value="5")])
    rows = {r["id"]: r for r in mod.convert(tmp_path, {"bitsandbytes": "0.50.2"})}
    assert set(rows) == {"a", "b", "c", "d"}
    assert "0.979 GiB" in rows["c"]["suspect"] and not rows["d"]["suspect"]
    assert rows["a"]["measured_value"] == "3" and "precision=pure" in rows["a"]["other"]
    assert rows["b"]["suspect"] and "precision=pure (" not in rows["b"]["other"]
    assert rows["a"]["stack_version"] == "bitsandbytes 0.50.2"


def test_memory_probe_release_model_frees_storage_a_stray_reference_keeps():
    """memory_probe.release_model: a reference that outlives the model (the 2026-11-27 runs
    kept an 8B model's lm_head weight alive into the next case) keeps only an empty tensor;
    model_state_bytes counts tied weights once."""
    import torch

    mp = _load("fmest_memory_probe", GPU / "memory_probe.py")
    model = torch.nn.Sequential(torch.nn.Embedding(64, 8), torch.nn.Linear(8, 64, bias=False))
    model[1].weight = model[0].weight          # tied, as Llama-3.2-1B's head
    assert mp.model_state_bytes(model) == 64 * 8 * 4
    stray = model[1].weight
    stray.grad = torch.ones_like(stray)
    mp.release_model(model)
    assert stray.numel() == 0 and stray.grad is None
    mp.release_model(None)
