"""Linux ``perf script`` text (``perf record -g`` then ``perf script``): collapsed as
FlameGraph's ``stackcollapse-perf.pl`` does (``collapse``, its per-line ``rules``, large
files in ``parallel``), then turned into a profile by ``importer``.
"""
