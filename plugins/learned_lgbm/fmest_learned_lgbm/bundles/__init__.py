"""The shipped default bundle (entry point ``default`` of the group ``fmest.learned_models``).

A bundle package only needs a ``BUNDLE_DIR`` attribute naming the directory that holds
``metadata.json`` and the model files; see docs/learned.md.
"""

from pathlib import Path

BUNDLE_DIR = Path(__file__).parent / "default"
