"""pprof's ``profile.proto`` (generated ``profile_pb2``) and aiflame's conventions on top of it.

Imported by both the pprof importer (``aiflame.sources.pprof.importer``) and exporter
(``aiflame.render.pprof``); it imports only ``aiflame.model``. See README.md here for
the origin of the schema and how ``profile_pb2.py`` was generated.
"""
