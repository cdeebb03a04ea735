"""Nsight Systems exports: the SQLite database that ``nsys export --type sqlite`` writes
from NVIDIA's ``.nsys-rep`` reports (CUDA runtime calls, kernels, copies, NVTX ranges, CPU
samples and their callchains). ``importer`` turns them into flame graphs, ``trace_data``
into the GPU trace columns of ``analyze``, ``timeline`` into slices in time.
"""
