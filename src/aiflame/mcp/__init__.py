"""``aiflame mcp``: a Model Context Protocol server over profiles, traces and findings.

Coding and operations agents ask it what an engineer asks aiflame: the analysis of a trace
(or of a directory of ranks), the costliest functions, kernels or GPU stall reasons of a
profile, a diff of two inputs, GPU memory at the peak by allocation stack, and, of an
``aiflame server``, GPU hours by label, fleet findings and a workload's profile over a time
range. Each tool computes what the matching command does (``aiflame analyze``, ``top``,
``diff``, ``memory``, the server's API), so an answer can be checked against it; each
answer says where it comes from (the input files, or the server, query and time range), in
which metric and unit, over how many samples, and is bounded in size for a model's context.

``local.py`` and ``fleet.py`` compute the answers (plain functions, testable alone);
``paths.py`` confines file inputs to the directories the server was given; ``bounds.py``
keeps answers small; ``app.py`` registers the tools with the MCP SDK and serves them over
stdio or streamable HTTP (with a token). Only ``aiflame.cli`` imports this package.
"""
