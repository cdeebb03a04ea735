"""Naming and classifying frames: kinds from names, demangling, perf maps, ELF symbols."""
