"""``aiflame server``: the fleet's store, ingest, analysis, query API and web UI.

One ASGI process (Starlette on uvicorn). Profiles arrive over Grafana Pyroscope's push API
(and its older ``/ingest``), telemetry and traces over aiflame's own endpoints
(docs/fleet-protocol.md); everything is stored in ClickHouse through ``clickhouse-connect``,
embedded (chDB, ``chdb://DIR``) or a server/cluster (``clickhouse://``), with one schema and
one set of statements. Queries answer Grafana's Pyroscope data source
(``querier.v1.QuerierService``) and the web UI. See docs/server.md.

This package imports the rest of aiflame and is imported by nothing but ``aiflame.cli``.
"""
