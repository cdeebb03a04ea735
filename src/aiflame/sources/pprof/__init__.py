"""pprof profiles (``profile.proto``, gzipped or not), written by Go's runtime, ``go tool
pprof``, Pyroscope, Parca, py-spy and aiflame itself. ``wire`` recognizes the message from
its first bytes; ``importer`` reads it.
"""
