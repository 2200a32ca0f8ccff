"""The shipped bundles (entry points of the group ``fmest.learned_models``).

* ``default``: trained on published GPU measurements (the evidence set of
  ``benchmarks/data/measured.csv``; retrain with ``python benchmarks/learned_gpu.py
  --retrain``);
* ``cpu-probes``: trained on CPU probes of tiny models (the torch runner's and this plugin's
  own), in domain only for tiny models; kept for comparison and as a worked example.

A bundle package only needs a ``BUNDLE_DIR`` attribute naming the directory that holds
``metadata.json`` and the model files (or an entry point naming a callable returning it);
see docs/learned.md.
"""

from pathlib import Path

BUNDLE_DIR = Path(__file__).parent / "default"
CPU_PROBES_DIR = Path(__file__).parent / "cpu_probes"


def cpu_probes() -> Path:
    """The directory of the ``cpu-probes`` bundle (its entry point's object)."""
    return CPU_PROBES_DIR
