"""fmest-memory-theory: analytic per-GPU peak memory of a training step (see docs/memory_model.md)."""
