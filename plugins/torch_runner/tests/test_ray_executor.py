"""``fmest probe --executor ray`` on a local Ray instance (2 CPUs, no dashboard, small object store).

Tiny llama configurations through the cpu and fake runners; one worker is killed on purpose (it
comes back on the retry) and one on every attempt (recorded as failed with the error), and every
configuration of the sweep must end as exactly one row.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
ray = pytest.importorskip("ray")

from fmest.api import job_dict  # noqa: E402
from fmest.cli import build_parser, main  # noqa: E402
from fmest.convert import job_from_dict, job_to_dict  # noqa: E402
from fmest.testing import (
    TINY_LLAMA_CONFIG,  # noqa: E402
    new_engine,  # noqa: E402
)
from fmest_torch_runner import ray_executor  # noqa: E402
from fmest_torch_runner.probe import config_hash, expand, load_sweep  # noqa: E402
from fmest_torch_runner.ray_executor import task_resources  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
TINY = TINY_LLAMA_CONFIG


@pytest.fixture(scope="module")
def local_ray():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # CI has no business phoning home
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False,
             object_store_memory=80 * 1024 * 1024, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def sweep_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FMEST_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "tiny.json").write_text(json.dumps(TINY))
    return tmp_path


def _argv(device: str, grid: str, output: str) -> list[str]:
    return ["probe", "--model", "x", "--dtype", "fp32", "--per-device-batch", "1",
            "--device", device, "--sweep", grid, "-o", output, "--executor", "ray",
            "--no-theory"]


def _hashes(argv: list[str]) -> list[str]:
    """The configurations ``argv`` runs, hashed as ``fmest probe`` hashes them."""
    args = build_parser(new_engine(entrypoints=True).commands()).parse_args(argv)
    jobs = expand(job_dict(args), load_sweep(args.sweep))
    return [config_hash(job_to_dict(job_from_dict(d)), args.device) for d in jobs]


def _rows(path) -> dict[str, dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    by_hash = {r["config_hash"]: r for r in rows}
    assert len(by_hash) == len(rows), "a configuration was written twice"
    return by_hash


def test_sweep_survives_killed_workers_and_resumes(local_ray, sweep_dir, monkeypatch, capsys):
    (sweep_dir / "grid.yaml").write_text(
        "model+model_config: [[tiny-llama, tiny.json]]\n"
        "training.seq_len: [32, 48, 64]\n"
        "training.activation_checkpointing: [none, full]\n")
    argv = _argv("cpu", "grid.yaml", "rows.csv")
    hashes = _hashes(argv)
    assert len(set(hashes)) == 6
    comes_back, always_dies = hashes[1], hashes[4]
    # the worker of `comes_back` dies on its first attempt, that of `always_dies` on both
    dies_until = {comes_back: 1, always_dies: 2}
    real_task = ray_executor.probe_task

    def dying_task(job_dict, device, threads, timeout, theory, attempt=1):
        from fmest_torch_runner.worker_process import config_hash as hash_of

        if dies_until.get(hash_of(job_dict, device), 0) >= attempt:
            os._exit(17)   # as a lost node's worker would
        return real_task(job_dict, device, threads, timeout, theory, attempt)

    monkeypatch.setattr(ray_executor, "probe_task", dying_task)

    assert main(argv) == 0
    rows = _rows(sweep_dir / "rows.csv")
    assert set(rows) == set(hashes)
    dead = rows.pop(always_dies)
    assert dead["status"] == "failed"
    assert "worker died on all 2 attempts: WorkerCrashedError" in dead["error"]
    assert json.loads(dead["job_json"])["model"] == "tiny-llama"
    for r in rows.values():
        assert r["status"] == "ok", r["error"]
        assert r["device"] == "cpu"
        assert int(r["measured_peak_bytes"]) > int(r["start_bytes"]) > 0
    assert f"{comes_back}: worker died" in capsys.readouterr().err

    # Resume: a full file runs nothing; with the failed row removed, only it runs again (and
    # dies again: the fault is still injected).
    assert main(argv) == 0
    assert "nothing to do" in capsys.readouterr().err
    with open("rows.csv", newline="", encoding="utf-8") as fh:
        kept = [r for r in csv.DictReader(fh) if r["config_hash"] != always_dies]
    with open("rows.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(kept[0]))
        w.writeheader()
        w.writerows(kept)
    assert main(argv) == 0
    assert "wrote 1 rows" in capsys.readouterr().err
    rows = _rows(sweep_dir / "rows.csv")
    assert set(rows) == set(hashes)
    assert rows[always_dies]["status"] == "failed"


def test_fake_runner_streams_parquet(local_ray, sweep_dir):
    pq = pytest.importorskip("pyarrow.parquet")
    (sweep_dir / "grid.yaml").write_text("model+model_config: [[tiny-llama, tiny.json]]\n")
    argv = _argv("fake", "grid.yaml", "rows.parquet") + ["--seq-len", "32"]
    assert main(argv) == 0
    table = pq.read_table(sweep_dir / "rows.parquet").to_pylist()
    assert len(table) == 1 and table[0]["config_hash"] == _hashes(argv)[0]
    for r in table:
        assert r["status"] == "ok", r["error"]
        assert r["device"] == "fake" and int(r["measured_peak_bytes"]) > 0


def test_cuda_needs_a_gpu_in_the_cluster(local_ray, sweep_dir, capsys):
    assert task_resources("cuda", 4) == {"num_gpus": 1, "num_cpus": 1}
    assert task_resources("cpu", 0) == {"num_cpus": 1}
    (sweep_dir / "grid.yaml").write_text("model+model_config: [[tiny-llama, tiny.json]]\n")
    assert main(_argv("cuda", "grid.yaml", "rows.csv")) == 2
    err = capsys.readouterr().err
    assert "--device" in err and "GPU" in err
    assert not (sweep_dir / "rows.csv").exists()
    assert main(_argv("cpu", "grid.yaml", "rows.csv") + ["--threads", "3"]) == 2
    assert "--threads" in capsys.readouterr().err
    assert main(["probe", "--model", "llama-2-7b", "--device", "fake", "-o", "rows.csv",
                 "--address", "auto"]) == 2
    assert "needs --executor ray" in capsys.readouterr().err


def test_unreachable_address_and_missing_ray_are_input_errors(monkeypatch):
    from fmest.errors import InputError
    from fmest_torch_runner import ray_executor

    with pytest.raises(InputError, match="no Ray cluster answers at 127.0.0.1:1"):
        ray_executor._check_reachable("127.0.0.1:1")
    with pytest.raises(InputError, match="expected auto, HOST:PORT"):
        ray_executor._check_reachable("nonsense")
    ray_executor._check_reachable("auto")
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(InputError, match=r"pip install 'fmest-torch-runner\[ray\]'"):
        ray_executor.import_ray()


def test_probing_doc_cites_real_flags_and_paths():
    """docs/probing.md walks a team through probe -> learn -> bundle: its flags and paths exist."""
    text = (ROOT / "docs" / "probing.md").read_text()
    parser = build_parser(new_engine(entrypoints=True).commands())
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    flags = {opt for cmd in sub.choices.values() for a in cmd._actions for opt in a.option_strings}
    cited = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", text))
    assert {"--executor", "--address", "--sweep", "--learned-model", "--out"} <= cited
    assert cited <= flags, cited - flags
    paths = re.findall(r"`((?:docs|plugins)/[^`*]+)`", text)
    assert "plugins/torch_runner/tests/test_ray_executor.py" in paths
    for path in paths:
        assert (ROOT / path).exists(), path
