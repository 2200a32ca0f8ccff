"""fmest-time-roofline: an analytic roofline model of LLM training time (see docs/time_model.md).

Importing this package imports neither torch nor transformers.
"""

__all__ = ["formulas", "plugin", "dataset"]
