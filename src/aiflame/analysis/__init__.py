"""Topline analysis of GPU traces: time breakdown, kernel/op breakdown, GEMM efficiency.

Functions over :class:`~aiflame.analysis.trace.TraceData` (plain numpy columns); reading a
trace file into one is the CLI's job (``aiflame analyze``), so this layer stays independent
of any trace format.
"""
