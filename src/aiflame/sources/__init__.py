"""Importers: one module per input format, a package per family of formats (``kineto``,
``nsys``, ``torch_memory``, ``hpctoolkit``, ``perf``, ``gpu_samples``, ``pprof``, ``folded``),
plus detection in :mod:`registry` and the input handling they share (``inputs``, ``limits``).

The registry (and with it every importer, numpy and the model) is imported on first use
only, so that a light path such as collapsing ``perf script`` text starts fast.
"""

from __future__ import annotations

from typing import Any

__all__ = ["detect", "formats", "load", "load_many", "load_timeline", "load_timelines"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from aiflame.sources import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'aiflame.sources' has no attribute '{name}'")
