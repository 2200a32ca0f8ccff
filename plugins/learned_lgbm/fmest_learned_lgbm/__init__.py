"""fmest-learned-lgbm: LightGBM models that correct fmest's analytic estimates.

The models learn ``log(measured / theory)`` from probe datasets, so a prediction is the
analytic estimate times a learned factor, with a P10/P90 interval and an in-domain flag.
See docs/learned.md.
"""

__version__ = "0.1.0"
