"""Model shapes: presets shipped with fmest, local configs, and the Hub when reachable."""

from fmest.models.spec import LinearModule, ModelSpec, ParamCounts, ParamGroup

__all__ = ["LinearModule", "ModelSpec", "ParamCounts", "ParamGroup"]
