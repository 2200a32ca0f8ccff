"""Accuracy against published measurements of real runs (../shared/data/measured_dev.csv):
memory rows (benchmarks/accuracy_memory.py) then throughput rows (benchmarks/accuracy_time.py).

Run: python benchmarks/accuracy.py
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    sys.path.insert(0, str(HERE))
    rc = 0
    for part in ("accuracy_memory.py", "accuracy_time.py"):
        print(f"\n===== {part} =====")
        try:
            runpy.run_path(str(HERE / part), run_name="__main__")
        except SystemExit as exc:
            rc = rc or int(exc.code or 0)
    return rc


if __name__ == "__main__":
    sys.exit(main())
