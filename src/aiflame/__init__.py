"""aiflame: full-stack flame graphs for AI workloads (CPU, GPU time, GPU memory)."""

__version__ = "0.1.0"
