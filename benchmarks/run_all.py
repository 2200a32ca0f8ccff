"""Every benchmark, one after the other: accuracy on the evidence set (memory, throughput;
in-sample and leave-one-source-out), inference accuracy, traced vs theory, learned vs theory
(CPU probes, and the GPU-evidence bundle leave-one-source-out), speed, and the bad-input fuzz
(crashes and silent acceptances). Run: python benchmarks/run_all.py"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

for name in ("accuracy.py", "inference_accuracy.py", "traced.py", "learned.py", "learned_gpu.py",
             "speed.py", "fuzz.py"):
    path = HERE / name
    if path.exists():
        print(f"\n########## {name} ##########", flush=True)
        subprocess.run([sys.executable, str(path)], check=False)
