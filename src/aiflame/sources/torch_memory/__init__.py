"""PyTorch CUDA memory snapshots: the pickles of ``torch.cuda.memory._snapshot()`` and
``_dump_snapshot()`` (segments, blocks and the allocator's event trace with their stacks).
They are read without executing code (``bounds`` checks the opcodes, ``stream`` decodes
them); ``replay`` replays the trace into memory timelines.
"""
