"""Source families (benchmarks/source_families.py): documents of one publisher and harness are
held out together when the intervals' residuals are taken out of source (benchmarks/
uncertainty.py), and each family weighs the same in the quantiles."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def mods():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import source_families
    import uncertainty

    return source_families, uncertainty


def test_families_join_releases_of_one_harness(mods):
    fam, _ = mods
    assert fam.family("megatron-bridge-perf-25.09") == fam.family("megatron-bridge-perf-26.08")
    assert fam.family("ibm-fms-acceleration-refs-liger-2024-12") == \
        fam.family("ibm-fms-acceleration-refs-a100-2025-02")
    assert fam.family("bloom-tr11-chronicles") == fam.family("bloom-tr11-chronicles-prequel")
    # a third party running the same software is its own family
    assert fam.family("torchtitan-h200-trainy-whitefiber-2025-06") != \
        fam.family("torchtitan-llama3-h100-202412")
    assert fam.family("qwen-readme-finetune-profiling-2023") == \
        "qwen-readme-finetune-profiling-2023"


def test_every_rule_matches_a_source_of_the_evidence_set(mods):
    """No dead rule: each joins at least two sources of measured.csv."""
    fam, _ = mods
    import measured

    sources = {r["source"] for r in measured.load_rows()}
    for pattern, name, _ in fam.RULES:
        members = {s for s in sources if fam.family(s) == name}
        assert len(members) >= 2 or name == "litgpt", (pattern, members)


def test_table_holds_out_the_whole_family_and_weighs_families_equally(mods):
    fam, bench = mods
    # two sibling sources agree with each other (ratio 2.0) and not with the rest (1.0)
    entries = [{"ratio": 2.0, "source": s, "group": "x", "keys": ["all"]}
               for s in ("megatron-bridge-perf-25.09", "megatron-bridge-perf-25.11")
               for _ in range(30)]
    entries += [{"ratio": 1.0, "source": f"other-{i}", "group": "x", "keys": ["all"]}
                for i in range(4) for _ in range(5)]
    without = bench.table(entries, exclude=fam.family("megatron-bridge-perf-25.09"))
    assert without["all"]["p90"] == 1.0 and without["all"]["rows"] == 20
    # with the family in: it is one family of five (20 %), not 60 of 80 rows (75 %)
    whole = bench.table(entries)
    assert whole["all"]["families"] == 5 and whole["all"]["sources"] == 6
    assert whole["all"]["p50"] == 1.0 and whole["all"]["p90"] == 2.0
    # the siblings' coverage is judged against a table without either of them
    cov = bench.coverage(entries, lambda f: bench.table(entries, exclude=f))
    assert cov["source:megatron-bridge-perf-25.09"]["coverage"] == 0.0
