"""Copy the config corpus of issue 23 verbatim out of local git mirrors of 13 public projects.

The corpus is every training, fine-tuning, launch and recipe file under each project's example
folders (the selection rules below, one per project), copied byte for byte into
``tests/data/configs/corpus/<project>/<path in the repository>`` with ``MANIFEST.tsv`` naming the
repository, commit, path and sha256 of every file. Nobody in fmest wrote these files; they are
the test of ``fmest estimate --config`` (``benchmarks/configs_corpus.py``,
``tests/test_config_corpus.py``) and are never edited.

    python scripts/build_config_corpus.py --mirrors /work/.mirror

``--mirrors`` holds one ``<owner>+<name>/repo`` bare git directory per project (a ``git clone
--mirror`` of each works too when laid out that way). The commits are pinned below so a rebuild
gives the same files.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "configs", "corpus")
MAX_BYTES = 64 * 1024   # larger files under these folders are datasets or model cards

# project, repository, commit, include regex (on the path), exclude regex
PROJECTS = (
    ("axolotl", "axolotl-ai-cloud/axolotl", "067b021c8b87a9e5e380b9173c704cf7340e30f5",
     r"^(examples/.*\.ya?ml|deepspeed_configs/.*\.json)$", None),
    ("llama-factory", "hiyouga/LLaMA-Factory", "ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30",
     r"^examples/.*\.(ya?ml|json)$", None),
    ("torchtune", "pytorch/torchtune", "bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1",
     r"^recipes/configs/.*\.yaml$", None),
    # torchtitan moved its configs to Python on 2026-02-23 (9810191); the parent is the last
    # commit with TOML train configs.
    ("torchtitan", "pytorch/torchtitan", "9810191bbb0385d8ac91cd31abbc7f4156a0d462^",
     r"^torchtitan/.*\.toml$", None),
    ("nemo", "NVIDIA/NeMo", "8cfedd7203462cb251a914e700e5605444277561",
     r"^examples/nlp/language_modeling/.*\.(ya?ml|sh)$", None),
    ("megatron-bridge", "NVIDIA-NeMo/Megatron-Bridge", "067f987df03b8355b03192d88d70f1709fedf51a",
     r"^(examples|tutorials)/.*\.(ya?ml|sh)$", r"model_verification_cards/"),
    ("megatron-lm", "NVIDIA/Megatron-LM", "d98e8a64ddf34856e74b24714e3bedb2f5a39553",
     r"^examples/.*\.(ya?ml|sh)$", None),
    ("alignment-handbook", "huggingface/alignment-handbook",
     "925acdfe4b2b4e38c3dabd1851bc418f0b656351", r"^recipes/.*\.ya?ml$", None),
    ("trl", "huggingface/trl", "f2cd57710ae345ea6428ae95363267fcf38a3dc8",
     r"^(examples|trl)/.*(accelerate_configs|cli_configs).*\.ya?ml$", None),
    ("deepspeed-examples", "deepspeedai/DeepSpeedExamples",
     "45b4b7156c8794a3452a5a7d03dbd8d797068569", r"^(training|applications)/.*\.(json|sh)$",
     None),
    ("ms-swift", "modelscope/ms-swift", "3602360a562313afbf2ef6065fdf61f271a2c5b9",
     r"^examples/.*\.(sh|ya?ml|json)$", None),
    ("openrlhf", "OpenRLHF/OpenRLHF", "3c3be6234e0cb353e76bb8019947db9dfe99fca7",
     r"^examples/.*\.sh$", None),
    ("litgpt", "Lightning-AI/litgpt", "26857050fe3ff627cd714fe92f5838f51a3d5efa",
     r"^config_hub/.*\.ya?ml$", None),
)


def git(repo: str, *args: str) -> bytes:
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True).stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirrors", required=True, help="folder of <owner>+<name>/repo git dirs")
    args = ap.parse_args(argv)
    rows = []
    for project, repo, commit, include, exclude in PROJECTS:
        gitdir = os.path.join(args.mirrors, repo.replace("/", "+"), "repo")
        sha = git(gitdir, "rev-parse", commit).decode().strip()
        listing = git(gitdir, "ls-tree", "-r", "-l", sha).decode().splitlines()
        n = 0
        for line in listing:
            meta, path = line.split("\t", 1)
            size = meta.split()[3]
            if not re.search(include, path) or (exclude and re.search(exclude, path)):
                continue
            if not size.isdigit() or int(size) > MAX_BYTES:   # "-": submodule; absent blob
                continue
            blob = git(gitdir, "show", f"{sha}:{path}")
            dest = os.path.join(OUT, project, path)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "wb") as fh:
                fh.write(blob)
            rows.append((project, repo, sha, path, hashlib.sha256(blob).hexdigest()))
            n += 1
        print(f"{project:<20} {repo:<32} {sha[:12]} {n:>4} files", file=sys.stderr)
    with open(os.path.join(OUT, "MANIFEST.tsv"), "w", encoding="utf-8") as fh:
        fh.write("project\trepository\tcommit\tpath\tsha256\n")
        for r in rows:
            fh.write("\t".join(r) + "\n")
    print(f"{len(rows)} files -> {os.path.relpath(OUT, ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
