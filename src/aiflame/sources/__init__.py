"""Importers: one module per input format, plus detection in :mod:`registry`."""

from aiflame.sources.registry import detect, formats, load, load_many

__all__ = ["detect", "formats", "load", "load_many"]
