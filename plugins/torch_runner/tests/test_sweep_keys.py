"""Sweep keys of ``fmest probe --sweep``: job field paths, or flag names through the flag
table (fmest.flags), expanded into job dicts."""

from __future__ import annotations

from fmest_torch_runner.probe import expand, load_sweep


def test_flag_names_and_paths_name_the_same_fields(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text("seq_len: [128, 256]\nmicro_batch+zero: [[1, 2], [2, 3]]\n"
                    "training.optimizer: [adamw]\n")
    axes = load_sweep(str(grid))
    assert [paths for paths, _ in axes] == [
        ["training.seq_len"], ["training.micro_batch_size", "parallelism.zero_stage"],
        ["training.optimizer"]]
    jobs = expand({"model": "gpt2"}, axes)
    assert len(jobs) == 4
    assert {(j["training"]["seq_len"], j["training"]["micro_batch_size"],
             j["parallelism"]["zero_stage"]) for j in jobs} == \
        {(128, 1, 2), (128, 2, 3), (256, 1, 2), (256, 2, 3)}
