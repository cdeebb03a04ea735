"""GPU PC samples (instruction pointers with their stall reasons) from each vendor's
sampler: AMD's rocprofv3 (``rocprof_pc``), NVIDIA's CUPTI PC Sampling dumps (``cupti_pc``,
``cupti_pc_file``) and Nsight Compute (``ncu``), Intel's iaprof (``iaprof``). ``stacks``
builds the ``kernel ; lines ; instruction ; stall`` stacks they all share (HPCToolkit's
measurements too).
"""
