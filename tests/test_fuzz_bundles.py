"""Corrupted learned-model bundles (issue 16): model files truncated, with lines dropped,
duplicated or bytes altered, *with the checksum in metadata.json recomputed* (so only the
structure check stands between the file and LightGBM), and corrupted metadata.

LightGBM aborts the whole process on some malformed model strings (``[LightGBM] [Fatal]``,
``terminate called``, exit -6), so every case runs in one child process: if the child dies, the
test fails naming the case it was on. Each case must give exit 0 (the learned plugin's failure
named in a warning, theory answering) or a one-line refusal (exit 2).
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import fmest_learned_lgbm.bundles as shipped

SEED = 16          # derandomized: the same corruptions on every run
CASES = 40

CHILD = textwrap.dedent("""
    import contextlib, io, json, sys
    from fmest.cli import main
    from fmest.testing import new_engine
    import fmest_learned_lgbm.plugin as learned, fmest_memory_theory.plugin as theory
    import fmest_time_roofline.plugin as roofline
    engine = new_engine((learned, "learned_lgbm"), (theory, "memory_theory"),
                        (roofline, "time_roofline"))
    for case in sys.argv[1:]:
        print("CASE", case, flush=True)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["estimate", "--model", "llama-2-7b-hf", "--seq-len", "1024",
                       "--method", "learned", "--learned-model", case, "--format", "json"],
                      engine=engine)
        warnings = json.loads(out.getvalue())["warnings"] if rc == 0 else []
        print("RESULT", json.dumps({"rc": rc, "err": err.getvalue(),
                                    "learned_named": any("learned_lgbm" in w
                                                         for w in warnings)}), flush=True)
""")


def _corrupt(data: bytes, rnd: random.Random) -> tuple[str, bytes]:
    lines = data.split(b"\n")
    kind = rnd.choice(("truncate", "drop_line", "dup_line", "byte", "swap_digits", "empty"))
    if kind == "truncate":
        return kind, data[: int(len(data) * rnd.uniform(0.01, 0.999))]
    if kind == "drop_line":
        del lines[rnd.randrange(len(lines))]
    elif kind == "dup_line":
        i = rnd.randrange(len(lines))
        lines.insert(i, lines[i])
    elif kind == "byte":
        pos = rnd.randrange(len(data))
        return kind, data[:pos] + bytes([rnd.randrange(256)]) + data[pos + 1:]
    elif kind == "swap_digits":
        i = rnd.randrange(len(lines))
        lines[i] = lines[i].replace(b"1", b"9").replace(b"-", b"")
    else:
        return kind, b""
    return kind, b"\n".join(lines)


def _make_cases(root: Path) -> list[Path]:
    rnd = random.Random(SEED)
    source = root / "shipped"  # one snapshot: every case starts from the same files
    shutil.copytree(Path(shipped.BUNDLE_DIR), source)
    meta = json.loads((source / "metadata.json").read_text())
    files = sorted(info["file"] for t in meta["targets"].values()
                   for info in t["models"].values())
    cases = []
    for n in range(CASES):
        case = root / f"case{n:02d}"
        shutil.copytree(source, case)
        if n % 8 == 7:  # metadata itself corrupted
            (case / "metadata.json").write_text(rnd.choice((
                "{", "[]", json.dumps({**meta, "targets": {"memory": {"features": 3}}}),
                json.dumps({**meta, "targets": []}))))
        else:
            name = rnd.choice(files)
            _kind, data = _corrupt((case / name).read_bytes(), rnd)
            (case / name).write_bytes(data)
            digest = hashlib.sha256(data).hexdigest()
            for target in meta["targets"].values():
                for info in target["models"].values():
                    if info["file"] == name:
                        info["sha256"] = digest
            (case / "metadata.json").write_text(json.dumps(meta))
            meta = json.loads((source / "metadata.json").read_text())
        cases.append(case)
    return cases


def test_corrupted_bundles_never_kill_the_process(tmp_path):
    cases = _make_cases(tmp_path)
    proc = subprocess.run([sys.executable, "-c", CHILD, *map(str, cases)],
                          capture_output=True, text=True, timeout=300)
    results, current = {}, None
    for line in proc.stdout.splitlines():
        if line.startswith("CASE "):
            current = line[5:]
        elif line.startswith("RESULT "):
            results[current] = json.loads(line[7:])
    assert proc.returncode == 0, (f"child died with {proc.returncode} on {current}: "
                                  f"{proc.stderr[-2000:]}")
    assert len(results) == len(cases)
    for case, res in results.items():
        assert res["rc"] in (0, 2), (case, res)
        if res["rc"] == 2:
            lines = res["err"].strip().splitlines()
            assert len(lines) == 1 and "learned" in lines[0], (case, res)
