"""The store: ClickHouse SQL through clickhouse-connect, embedded (chDB) or a server/cluster.

``schema`` declares the tables once; ``migrations`` creates and upgrades them; ``connection``
opens either engine behind the same :class:`Store`; ``writer`` commits batches of rows.
"""
