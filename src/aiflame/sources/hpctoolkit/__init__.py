"""HPCToolkit (Rice University) measurements and databases: the v4 database that
``hpcprof`` writes (``db``), and ``hpcrun``'s measurement directories (``.hpcrun`` files,
``hpcrun_fmt``) with the program structure of ``hpcstruct`` (``hpcstruct``): CPU calling
contexts down to GPU kernels and GPU PC samples with their stall reasons.
"""
