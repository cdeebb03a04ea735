"""PyTorch profiler (Kineto) traces and other Chrome Trace Event Format JSON.

``torch.profiler`` writes its traces (``export_chrome_trace``, ``tensorboard_trace_handler``)
through libkineto as Chrome-trace JSON: CPU operators, CUDA runtime calls, kernels, memcpys
and memory events, linked by correlation ids. ``importer`` reads them into full-stack GPU
flame graphs, ``timeline`` into slices in time, ``memory`` into memory timelines;
``json_stream`` and ``events`` stream and columnize the JSON that ``trace_events``, the
reader of generic Chrome traces (JAX/TensorFlow, Chrome, Perfetto JSON), shares.
"""
