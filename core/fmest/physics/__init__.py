"""The physics data of fmest: facts and rules more than one part of fmest reads.

* :mod:`~fmest.physics.counting` -- parameter arithmetic (what a technique trains, PEFT's
  default LoRA targets);
* :mod:`~fmest.physics.precision` -- the one precision-policy rule (the stack decides first);
* :mod:`~fmest.physics.device_terms` -- CUDA context, cuBLAS workspaces, NCCL buffers, the
  caching allocator's reserve;
* :mod:`~fmest.physics.calibration` -- the job's calibration knobs and usable memory;
* :mod:`~fmest.physics.time_constants` -- the time constants the ``time_roofline`` plugin's
  formulas and the planner's array formulas (:mod:`fmest.plan.vector`) share, so a new
  measurement moves both at once; :mod:`~fmest.physics.gpu_prefix` -- GPU-name prefix tables.

Plugins may import this package (it is the core); it imports no plugin, and its modules
import only the contract records (errors, job, models, estimates), so any module can depend on
them without an import circle (``tests/test_import_cycles.py``).
"""
