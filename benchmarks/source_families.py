"""Families of evidence sources: sources whose errors are not independent draws.

A "source" of ``benchmarks/data/measured.csv`` is one document. Several documents come from
one team running one harness: the Megatron-Bridge performance tables of successive releases,
the NeMo performance summaries, the three fms-acceleration reference tables, the two
fms-fsdp README tables, BigScience's tr11 chronicles and its prequel, Unsloth's blog posts and
README, torchtitan's own benchmark pages, ... Their rows share the harness's settings, counters
and habits, so a model error on one is largely an error on the others. Holding one of them out
while its siblings stay in makes "leave-one-source-out" an in-family check: the residual
quantiles then look tighter than a truly new source will find them (the sealed part and the
held-out files, which hold new families, saw 43-55 % P10-P90 coverage where the open LOSO
figure read 83 %).

:func:`family` names the family of a source: the first rule of :data:`RULES` whose pattern
matches, else the source itself (a family of one). A rule joins documents of the same
publisher and harness; documents that only share software but not the team that ran it
(a third party's torchtitan runs, a blog by other authors) stay apart.

Used by ``benchmarks/uncertainty.py`` (intervals: leave-one-family-out, every family weighing
the same).
"""

from __future__ import annotations

import functools
import re

#: (pattern, family, why): first match wins.
RULES: tuple[tuple[str, str, str], ...] = (
    (r"^megatron-bridge-perf-", "megatron-bridge-perf",
     "NVIDIA Megatron-Bridge performance-summary tables, one per release"),
    (r"^nemo-(perf-summary-|long-sequence-perf)", "nemo-perf",
     "NVIDIA NeMo performance pages (summary per release, long-sequence table)"),
    (r"^ibm-fms-acceleration-", "ibm-fms-acceleration",
     "IBM fms-acceleration benchmark reference tables (one harness, scripts/benchmarks)"),
    (r"^ibm-fms-fsdp-", "ibm-fms-fsdp", "IBM fms-fsdp README tables (eager and compiled)"),
    (r"^bloom-tr11-", "bloom-tr11", "BigScience tr11 chronicles and their prequel"),
    (r"^unsloth-", "unsloth", "Unsloth's README and blog posts (its own benchmark harness)"),
    (r"^torchtitan-(llama3-h100|performance-md)", "torchtitan",
     "torchtitan's own benchmark pages"),
    (r"^torchtune-", "torchtune", "torchtune README and tutorials"),
    (r"^kempnerforge-", "kempnerforge", "KempnerForge scaling reports"),
    (r"^google-vertex-openllama", "google-vertex-openllama",
     "Google Vertex AI OpenLLaMA reports (one notebook family)"),
    (r"^(intel-gaudi2-training-perf-|h15-(habana-dev|intel-gaudi)-model-perf-)",
     "intel-gaudi2-training-perf",
     "Intel Gaudi (Habana) model-performance pages, one per release"),
    (r"^(h1[34]-)?xtuner-", "xtuner", "XTuner's speed benchmark, long-sequence, Megatron MoE "
     "and model-config README documents"),
    (r"^(ms-swift-benchmark-doc|h1[34]-ms-swift-)", "ms-swift-docs",
     "ModelScope ms-swift's benchmark, best-practice and Megatron-SWIFT documents"),
    (r"^(h9-colossalai-|h13-colossalchat-)", "colossalai",
     "hpcaitech ColossalAI's README benchmark and ColossalChat examples"),
    (r"^litgpt-", "litgpt", "LitGPT's resource tables and config-hub tables"),
    (r"^h10-flash-?attn|^h1[01]-flashattention", "flash-attention",
     "FlashAttention-1 and -2's papers and the flash-attention repository's training README "
     "(one training harness)"),
    (r"^h1[12]-dgxc-(llama31|llama4|nemotron4|ft-llama3|deepseek)", "nvidia-dgxc-nemo",
     "NVIDIA DGX Cloud benchmarking recipes run on NeMo (pre-training and fine-tuning READMEs "
     "of two releases)"),
    (r"^h12-(smol-training-playbook|hf-blog-smollm3)", "hf-smollm3",
     "Hugging Face's SmolLM3 blog post and its training playbook (one team, one run)"),
    (r"^h12-falcon-", "tii-falcon", "TII's Falcon model cards"),
    (r"^lambda-dtg-", "lambda-distributed-training-guide",
     "Lambda's distributed-training-guide chapters (one author, one set of scripts)"),
    (r"^llamafactory-", "llamafactory", "LLaMA-Factory's wiki comparison and its paper"),
    (r"^fmest-gpu-probe-", "fmest-gpu-probe",
     "fmest's own benchmarks/gpu/memory_probe.py runs (same harness and cases, one per lent GPU)"),
    (r"^h15-prime-rl-", "prime-rl",
     "PrimeIntellect prime-rl's nightly trainer benchmarks (one script, main and a PR head)"),
    (r"^h14-(starcoder|santacoder)-model-card", "bigcode-model-cards",
     "BigCode's StarCoder and SantaCoder model cards (one team, one Megatron-LM fork)"),
)


@functools.lru_cache(maxsize=None)
def family(source: str) -> str:
    """The family of ``source`` (module doc); the source itself when no rule matches."""
    for pattern, name, _ in RULES:
        if re.search(pattern, source):
            return name
    return source


__all__ = ["RULES", "family"]
