"""Folded ("collapsed") stacks, ``root;child;leaf COUNT`` per line: FlameGraph's
stackcollapse-*.pl, inferno, py-spy ``--format raw`` and many others write them.
``importer`` reads one file; ``diff`` turns two of them straight into a differential
profile, as ``difffolded.pl`` does.
"""
