"""Throughput accuracy: a thin wrapper kept for old references; the benchmark is
``benchmarks/accuracy.py`` (memory and throughput, in-sample and leave-one-source-out).

Run: ``python benchmarks/accuracy_time.py`` (same as ``python benchmarks/accuracy.py``).
"""

import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.argv[0] = str(Path(__file__).with_name("accuracy.py"))
    runpy.run_path(sys.argv[0], run_name="__main__")
