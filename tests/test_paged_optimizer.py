"""Paged optimizers (issue 12): when the GPU is full, a bitsandbytes paged optimizer's states
spill to host memory (CUDA unified memory, bitsandbytes "Paged optimizers"; Dettmers et al.
2023, QLoRA section 3), so the memory answer is capped at the usable GPU memory with a note and
more host RAM instead of an out-of-memory verdict; what the states cannot cover is still over."""

from __future__ import annotations

import pytest

from fmest.convert import job_from_dict
from fmest.testing import new_engine

theory = pytest.importorskip("fmest_memory_theory.plugin")
GIB = 2**30


def _report(optimizer: str, micro_batch: int, seq_len: int = 7168):
    engine = new_engine((theory, "memory_theory"))
    job = job_from_dict({"model": "meta-llama/Llama-3.1-8B",
                         "training": {"optimizer": optimizer, "seq_len": seq_len,
                                      "micro_batch_size": micro_batch},
                         "hardware": {"gpu": "H100-SXM", "gpus_per_node": 1}})
    return engine.estimate(job, quantities=("memory",))


def test_states_page_to_host_and_the_peak_is_capped():
    plain, paged = _report("adamw_8bit", 1), _report("paged_adamw_8bit", 1)
    capacity = paged.context.gpu.capacity_bytes   # what CUDA reports, not the label
    over = plain.memory.total_bytes - capacity
    states = plain.memory.components["optimizer_states"]
    assert 0 < over < states   # paging can absorb it
    assert plain.fits is False
    assert paged.fits is True and paged.memory.total_bytes == capacity
    assert paged.memory.components["optimizer_states"] == states - over
    assert paged.memory.host_bytes == plain.memory.host_bytes + over
    assert any("page to host memory" in n and "capped" in n for n in paged.memory.notes)


def test_pages_only_when_full_and_only_the_states():
    # under capacity the paged optimizer costs what the unpaged one does
    small_plain, small_paged = _report("adamw_8bit", 1, 4096), _report("paged_adamw_8bit", 1,
                                                                        4096)
    assert small_plain.fits and small_paged.fits
    assert small_paged.memory.total_bytes == small_plain.memory.total_bytes
    assert small_paged.memory.host_bytes == small_plain.memory.host_bytes
    assert not any("page to host" in n for n in small_paged.memory.notes)
    # far over: every state byte moves and the rest still does not fit
    big_plain, big_paged = _report("adamw_8bit", 2, 4096), _report("paged_adamw_8bit", 2, 4096)
    states = big_plain.memory.components["optimizer_states"]
    assert big_plain.memory.total_bytes - states > big_paged.context.gpu.memory_bytes
    assert big_paged.memory.components["optimizer_states"] == 0
    assert big_paged.memory.total_bytes == big_plain.memory.total_bytes - states
    assert big_paged.fits is False
    assert any("all of them" in n for n in big_paged.memory.notes)
