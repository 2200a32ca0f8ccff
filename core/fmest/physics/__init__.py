"""Physical constants shared by more than one part of fmest.

A constant lives here when two places would otherwise each hold a copy: the ``time_roofline``
plugin's formulas and the planner's array formulas (:mod:`fmest.plan.vector`) both import
:mod:`fmest.physics.time_constants`, so a calibration or a new measurement moves both at once.
Plugins may import this package (it is the core); it imports no plugin and nothing else of
fmest, so any module can depend on it without an import circle.
"""
