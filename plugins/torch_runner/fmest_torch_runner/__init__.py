"""fmest-torch-runner: run real training steps of a job's model -- on fake tensors (a
``traced`` memory estimate), on CPU (ground truth for small models) or on a GPU -- and the
``fmest probe`` command that records such runs as dataset rows.

Importing this package, or :mod:`fmest_torch_runner.runner`, does not import torch; a run
(and :mod:`fmest_torch_runner.tracker`) does.
"""

__version__ = "0.1.0"
