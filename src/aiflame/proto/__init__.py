"""Protobuf schemas and aiflame's conventions on top of them.

pprof's messages have one definition, ``pyroscope/google/v1/profile_pb2`` (pprof's
``profile.proto`` under the package name Pyroscope's API imports it by), used by the pprof
importer (``aiflame.sources.pprof.importer``), the exporter (``aiflame.render.pprof``), the
OTLP exporter and the server alike; ``conventions.py`` says how aiflame keeps what pprof has
no field for. It imports only ``aiflame.model``. See README.md here for the origin of the
schemas and how the modules were generated.
"""
