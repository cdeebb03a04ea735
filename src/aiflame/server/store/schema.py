"""Every table of the store, declared once, and its DDL for one server or for a cluster.

On one server (and in chDB) a table is what it says. On a cluster (``?cluster=NAME`` in the
store URL) each table becomes ``NAME_local``, a Replicated* engine ``ON CLUSTER``, plus a
``Distributed`` table under the plain name that shards rows by ``shard_key``; materialized
views read and write the local tables. Queries name only the plain names, so the same
statements run on chDB, on one ClickHouse and on a cluster.

Retention groups (``--retention GROUP=DURATION``): ``profiles`` (samples, stacks, series),
``telemetry`` (per-period GPU and workload rows, minute roll-ups), ``rollups`` (hourly GPU-hour
roll-ups, kept longest), ``traces`` (uploaded traces, their analyses and findings).
"""

from __future__ import annotations

from dataclasses import dataclass, field

RETENTION_GROUPS = ("profiles", "telemetry", "rollups", "traces")
DEFAULT_RETENTION_S = {
    "profiles": 30 * 86400,
    "telemetry": 30 * 86400,
    "rollups": 400 * 86400,
    "traces": 90 * 86400,
}
# How long the ingest journal keeps a batch's id on its rows (crash recovery, writer.py).
JOURNAL_S = 2 * 86400
BATCH_STATE = "Enum8('open' = 1, 'done' = 2, 'aborted' = 3, 'rolled' = 4)"
# The roll-ups are written with deduplication tokens (an insert done again after a crash is
# dropped); a replicated table keeps such ids anyway, a plain one keeps this many.
_DEDUP = {"non_replicated_deduplication_window": "10000"}

# The GPU-second sums of a workload's roll-up rows (each with the seconds it is measured
# over, ``*_basis``), which the attribution queries add up.
WORKLOAD_SUMS = (
    "allocated",
    "busy",
    "busy_basis",
    "useful",
    "useful_basis",
    "flop",
    "flop_basis",
    "energy",
    "energy_basis",
    "input",
    "input_basis",
)
_LC = "LowCardinality(String)"
_T = "DateTime64(3, 'UTC')"
_F32N = "Nullable(Float32)"
_LABELS = "Map(LowCardinality(String), String)"


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[tuple[str, str], ...]  # (name, type with codec / column TTL)
    engine: str  # MergeTree, ReplacingMergeTree(version), SummingMergeTree, ...
    order_by: str
    shard_key: str
    partition_by: str | None = None
    ttl: str | None = None  # "EXPR + {group}" where group is a retention group
    settings: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class View:
    """A materialized view: rows inserted into ``source`` are also written, aggregated,
    into ``target``."""

    name: str
    source: str
    target: str
    select: str  # "SELECT ... FROM {source} ..." with {source} left as a placeholder


def _cols(*pairs: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(pairs)


_BATCH = ("batch_id", f"UInt64 CODEC(ZSTD(1)) TTL toDateTime(time) + INTERVAL {JOURNAL_S} SECOND")

TABLES: tuple[Table, ...] = (
    Table(
        "samples",
        _cols(
            ("tenant", _LC),
            ("profile_type", _LC),
            ("series_id", "UInt64"),
            ("time", f"{_T} CODEC(DoubleDelta, ZSTD(1))"),
            ("stack_id", "UInt64 CODEC(ZSTD(1))"),
            ("value", "Int64 CODEC(T64, ZSTD(1))"),
            _BATCH,
        ),
        "MergeTree",
        # A series' samples of one hour are together and sorted by stack: a stack repeats
        # every profile, so stack ids compress to runs and time to constant deltas.
        "(tenant, profile_type, series_id, toStartOfHour(time), stack_id, time)",
        "cityHash64(series_id)",
        partition_by="toYYYYMMDD(time)",
        ttl="toDateTime(time) + {profiles}",
    ),
    Table(
        "samples_1h",
        _cols(
            ("tenant", _LC),
            ("profile_type", _LC),
            ("series_id", "UInt64"),
            ("hour", "DateTime('UTC') CODEC(DoubleDelta, ZSTD(1))"),
            ("stack_id", "UInt64 CODEC(ZSTD(1))"),
            ("value", "Int64 CODEC(T64, ZSTD(1))"),
        ),
        "SummingMergeTree",
        "(tenant, profile_type, series_id, hour, stack_id)",
        "cityHash64(series_id)",
        partition_by="toYYYYMM(hour)",
        ttl="hour + {profiles}",
        settings=_DEDUP,
    ),
    Table(
        "samples_10m",
        _cols(
            ("tenant", _LC),
            ("profile_type", _LC),
            ("series_id", "UInt64"),
            ("bucket", "DateTime('UTC') CODEC(DoubleDelta, ZSTD(1))"),
            ("stack_id", "UInt64 CODEC(ZSTD(1))"),
            ("value", "Int64 CODEC(T64, ZSTD(1))"),
        ),
        "SummingMergeTree",
        "(tenant, profile_type, series_id, bucket, stack_id)",
        "cityHash64(series_id)",
        partition_by="toYYYYMMDD(bucket)",
        ttl="bucket + {profiles}",
        settings=_DEDUP,
    ),
    # schema version 5: the samples that name a span (Pyroscope SDKs' OpenTelemetry
    # integrations), for span profiles and span heatmaps; their values are in samples too.
    Table(
        "span_samples",
        _cols(
            ("tenant", _LC),
            ("profile_type", _LC),
            ("series_id", "UInt64"),
            ("time", f"{_T} CODEC(DoubleDelta, ZSTD(1))"),
            ("span_id", "UInt64 CODEC(ZSTD(1))"),
            ("stack_id", "UInt64 CODEC(ZSTD(1))"),
            ("value", "Int64 CODEC(T64, ZSTD(1))"),
            _BATCH,
        ),
        "MergeTree",
        "(tenant, profile_type, series_id, toStartOfHour(time), span_id, stack_id)",
        "cityHash64(series_id)",
        partition_by="toYYYYMMDD(time)",
        ttl="toDateTime(time) + {profiles}",
    ),
    Table(
        "profiles",
        _cols(
            ("tenant", _LC),
            ("profile_id", "String"),
            ("series_id", "UInt64"),
            ("series_ids", "Array(UInt64)"),  # with the series its sample labels made
            ("name", _LC),
            ("time", _T),
            ("duration_ns", "Int64"),
            ("period", "Int64"),
            ("profile_types", f"Array({_LC})"),
            ("totals", "Array(Int64)"),
            ("samples", "UInt32"),
            ("stacks", "UInt32"),
            ("pprof_bytes", "UInt32"),
            ("received", _T),
            ("batch_id", "UInt64"),
        ),
        "ReplacingMergeTree",
        "(tenant, profile_id)",
        "cityHash64(profile_id)",
        ttl="toDateTime(time) + {profiles}",
    ),
    Table(
        "series",
        _cols(
            ("tenant", _LC),
            ("profile_type", _LC),
            ("hour", "DateTime('UTC')"),
            ("series_id", "UInt64"),
            ("labels", _LABELS),
        ),
        "ReplacingMergeTree",
        "(tenant, profile_type, hour, series_id)",
        "cityHash64(series_id)",
        ttl="hour + {profiles}",
    ),
    Table(
        "stacks",
        _cols(
            ("stack_id", "UInt64"),
            ("frames", "Array(UInt64) CODEC(ZSTD(3))"),  # root first
            ("last_seen", "DateTime('UTC')"),
        ),
        "ReplacingMergeTree(last_seen)",
        "stack_id",
        "stack_id",
        ttl="last_seen + {profiles} + INTERVAL 1 DAY",
    ),
    Table(
        "frames",
        _cols(
            ("frame_id", "UInt64"),
            ("name", "String CODEC(ZSTD(3))"),
            ("kind", "UInt8"),
            ("file", "String CODEC(ZSTD(3))"),
            ("line", "UInt32"),
            ("module", "String CODEC(ZSTD(3))"),
            ("last_seen", "DateTime('UTC')"),
        ),
        "ReplacingMergeTree(last_seen)",
        "frame_id",
        "frame_id",
        ttl="last_seen + {profiles} + INTERVAL 1 DAY",
    ),
    Table(
        "gpu_telemetry",
        _cols(
            ("tenant", _LC),
            ("host", _LC),
            ("start", _T),
            ("end", _T),
            ("gpu_index", "UInt16"),
            ("uuid", _LC),
            ("name", _LC),
            ("pci_bus_id", _LC),
            ("util", _F32N),
            ("memory_used_bytes", "Nullable(UInt64)"),
            ("memory_total_bytes", "Nullable(UInt64)"),
            ("power_watts", _F32N),
            ("sm_clock_mhz", _F32N),
            ("temperature_c", _F32N),
            ("sm_active", _F32N),
            ("sm_occupancy", _F32N),
            ("tensor_active", _F32N),
            ("fp16_active", _F32N),
            ("fp32_active", _F32N),
            ("fp64_active", _F32N),
            ("dram_active", _F32N),
            # schema version 2
            ("gr_engine_active", _F32N),
            ("tensor_hmma_active", _F32N),
            ("tensor_dmma_active", _F32N),
            ("tensor_imma_active", _F32N),
            ("est_flops", "Nullable(Float64)"),
            ("est_flops_basis", _LC),
            ("batch_id", f"UInt64 TTL toDateTime(start) + INTERVAL {JOURNAL_S} SECOND"),
        ),
        "MergeTree",
        "(tenant, host, uuid, start)",
        "cityHash64(host)",
        partition_by="toYYYYMMDD(start)",
        ttl="toDateTime(start) + {telemetry}",
    ),
    Table(
        "workload_telemetry",
        _cols(
            ("tenant", _LC),
            ("host", _LC),
            ("start", _T),
            ("end", _T),
            ("workload_id", "UInt64"),
            ("labels", _LABELS),
            ("pids", "Array(UInt32)"),
            ("gpu_uuids", f"Array({_LC})"),
            ("allocated_gpu_seconds", "Float64"),
            ("busy_gpu_seconds", "Nullable(Float64)"),
            ("useful_gpu_seconds", "Nullable(Float64)"),
            ("est_flop", "Nullable(Float64)"),
            ("energy_joules", "Nullable(Float64)"),
            ("gpu_memory_bytes", "Nullable(UInt64)"),
            ("input_bytes", "Nullable(UInt64)"),
            ("batch_id", f"UInt64 TTL toDateTime(start) + INTERVAL {JOURNAL_S} SECOND"),
        ),
        "MergeTree",
        "(tenant, start, workload_id)",
        "workload_id",
        partition_by="toYYYYMMDD(start)",
        ttl="toDateTime(start) + {telemetry}",
    ),
    *(
        Table(
            name,
            _cols(
                ("tenant", _LC),
                ("bucket", "DateTime('UTC')"),
                ("workload_id", "UInt64"),
                ("labels", "SimpleAggregateFunction(any, Map(String, String))"),
                *(
                    (c, "SimpleAggregateFunction(sum, Float64)")
                    for c in (*WORKLOAD_SUMS, "periods")
                ),
            ),
            "AggregatingMergeTree",
            "(tenant, bucket, workload_id)",
            "workload_id",
            partition_by="toYYYYMM(bucket)",
            ttl=f"bucket + {{{group}}}",
        )
        for name, group in (("workload_1m", "telemetry"), ("workload_1h", "rollups"))
    ),
    # schema version 5: every GPU's seconds per host and minute / hour, whoever holds it (the
    # capacity beside the workloads' allocated seconds; materialized views of gpu_telemetry)
    *(
        Table(
            name,
            _cols(
                ("tenant", _LC),
                ("bucket", "DateTime('UTC')"),
                ("host", "String"),
                ("gpu_model", "String"),
                ("gpu_seconds", "SimpleAggregateFunction(sum, Float64)"),
                ("busy_seconds", "SimpleAggregateFunction(sum, Float64)"),
                ("busy_basis", "SimpleAggregateFunction(sum, Float64)"),
                ("gpus", "SimpleAggregateFunction(max, UInt32)"),  # GPU indexes 0..gpus-1
            ),
            "AggregatingMergeTree",
            "(tenant, bucket, host, gpu_model)",
            "cityHash64(host)",
            partition_by="toYYYYMM(bucket)",
            ttl=f"bucket + {{{group}}}",
        )
        for name, group in (("gpu_capacity_1m", "telemetry"), ("gpu_capacity_1h", "rollups"))
    ),
    Table(
        "telemetry_batches",
        _cols(
            ("tenant", _LC),
            ("id", "String"),
            ("host", _LC),
            ("start", _T),
            ("received", _T),
            ("batch_id", "UInt64"),
        ),
        "ReplacingMergeTree",
        "(tenant, id)",
        "cityHash64(id)",
        ttl="toDateTime(received) + {telemetry}",
    ),
    Table(
        "traces",
        _cols(
            ("tenant", _LC),
            ("trace_id", "String"),
            ("received", _T),
            ("labels", _LABELS),
            ("request_id", "String"),
            ("format", _LC),
            ("bytes", "UInt64"),
            ("status", _LC),  # queued, done, failed
            ("error", "String"),
            ("version", "UInt64"),
            ("trace_start", f"Nullable({_T})"),
            ("duration_us", "Float64"),
            ("ranks", "UInt16"),
            ("gpu_time_us", "Float64"),
            ("busy_share", "Nullable(Float64)"),
            ("achieved_tflops", "Nullable(Float64)"),
            ("mfu", "Nullable(Float64)"),
            ("pct_of_roofline", "Nullable(Float64)"),
            ("device", _LC),
            ("report", "String CODEC(ZSTD(3))"),
            ("batch_id", "UInt64"),
        ),
        "ReplacingMergeTree(version)",
        "(tenant, trace_id)",
        "cityHash64(trace_id)",
        ttl="toDateTime(received) + {traces}",
    ),
    Table(
        "trace_blobs",
        _cols(
            ("tenant", _LC),
            ("trace_id", "String"),
            ("received", _T),
            ("blob", "String CODEC(NONE)"),  # as uploaded (gzip); compressing again is waste
            ("batch_id", "UInt64"),
        ),
        "ReplacingMergeTree",
        "(tenant, trace_id)",
        "cityHash64(trace_id)",
        ttl="toDateTime(received) + {traces}",
    ),
    Table(
        "findings",
        _cols(
            ("tenant", _LC),
            ("trace_id", "String"),
            ("received", _T),
            ("labels", _LABELS),
            ("rank", "String"),
            ("rule", _LC),
            ("severity", _LC),
            ("title", "String"),
            ("cost_us", "Float64"),
            ("share", "Float64"),  # of the trace's GPU timeline
            ("timeline_us", "Float64"),
            ("fix", "String"),
            ("evidence", "String CODEC(ZSTD(3))"),  # JSON, with the costliest stacks
            ("version", "UInt64"),
        ),
        "ReplacingMergeTree(version)",
        "(tenant, trace_id, rank, rule)",
        "cityHash64(trace_id)",
        ttl="toDateTime(received) + {traces}",
    ),
    Table(
        "agents",
        _cols(
            ("tenant", _LC),
            ("host", "String"),
            ("agent_version", _LC),
            ("started", _T),
            ("last_seen", _T),
            ("gpus", "String"),
            ("spool_bytes", "UInt64"),
            ("sampling_rate_hz", "Float32"),
        ),
        "ReplacingMergeTree(last_seen)",
        "(tenant, host)",
        "cityHash64(host)",
        ttl="toDateTime(last_seen) + INTERVAL 30 DAY",
    ),
    Table(
        "trace_requests",
        _cols(
            ("tenant", _LC),
            ("request_id", "String"),
            ("created", _T),
            ("expires", _T),
            ("selector", "Map(String, String)"),
            ("duration_ms", "Nullable(UInt32)"),
            ("iterations", "Nullable(UInt32)"),
            ("start_time", "Nullable(Float64)"),
            # what is asked of the selected processes: a Kineto trace or a GPU memory snapshot
            ("kind", "LowCardinality(String) DEFAULT 'trace'"),
        ),
        "ReplacingMergeTree",
        "(tenant, request_id)",
        "cityHash64(request_id)",
        ttl="toDateTime(created) + INTERVAL 7 DAY",
    ),
    Table(
        "trace_deliveries",
        _cols(
            ("tenant", _LC),
            ("request_id", "String"),
            ("host", "String"),
            ("delivered", _T),
        ),
        "ReplacingMergeTree",
        "(tenant, request_id, host)",
        "cityHash64(request_id)",
        ttl="toDateTime(delivered) + INTERVAL 7 DAY",
    ),
    Table(
        "ingest_batches",
        _cols(
            ("batch_id", "UInt64"),
            ("state", BATCH_STATE),
            ("at", _T),
            ("replica", "String"),
            # schema version 4: on "done", the time span of the batch's samples (none: NULL)
            ("min_time", f"Nullable({_T})"),
            ("max_time", f"Nullable({_T})"),
        ),
        "MergeTree",
        "(batch_id, state)",
        "batch_id",
        ttl=f"toDateTime(at) + INTERVAL {JOURNAL_S} SECOND",
    ),
    Table(  # the roll-ups of committed batches into samples_10m and samples_1h (rollups.py)
        "rollup_flushes",
        _cols(
            ("flush_id", "UInt64"),
            ("batch_ids", "Array(UInt64)"),
            ("min_time", _T),
            ("max_time", _T),
            ("state", "Enum8('open' = 1, 'done' = 2)"),
            ("at", _T),
            ("replica", "String"),
        ),
        "MergeTree",
        "(flush_id, state)",
        "flush_id",
        ttl=f"toDateTime(at) + INTERVAL {JOURNAL_S} SECOND",
    ),
    Table(
        "settings",
        _cols(("key", "String"), ("value", "String"), ("version", "UInt64")),
        "ReplacingMergeTree(version)",
        "key",
        "cityHash64(key)",
    ),
)

_WORKLOAD_ROLLUP = """SELECT tenant, {bucket}(start) AS bucket, workload_id, any(labels) AS labels,
    sum(allocated_gpu_seconds) AS allocated,
    sum(ifNull(busy_gpu_seconds, 0)) AS busy,
    sumIf(allocated_gpu_seconds, busy_gpu_seconds IS NOT NULL) AS busy_basis,
    sum(ifNull(useful_gpu_seconds, 0)) AS useful,
    sumIf(allocated_gpu_seconds, useful_gpu_seconds IS NOT NULL) AS useful_basis,
    sum(ifNull(est_flop, 0)) AS flop,
    sumIf(allocated_gpu_seconds, est_flop IS NOT NULL) AS flop_basis,
    sum(ifNull(energy_joules, 0)) AS energy,
    sumIf(allocated_gpu_seconds, energy_joules IS NOT NULL) AS energy_basis,
    sum(toFloat64(ifNull(input_bytes, 0))) AS input,
    sumIf(allocated_gpu_seconds, input_bytes IS NOT NULL) AS input_basis,
    toFloat64(count()) AS periods
FROM {source} GROUP BY tenant, bucket, workload_id"""

# A GPU's seconds in a period are the period's length; busy is that x utilization (NVML).
CAPACITY_ROLLUP = """SELECT tenant, {bucket}(start) AS bucket, host, name AS gpu_model,
    sum(dateDiff('millisecond', start, end) / 1000) AS gpu_seconds,
    sum(if(util IS NULL, 0, util * dateDiff('millisecond', start, end) / 1000)) AS busy_seconds,
    sumIf(dateDiff('millisecond', start, end) / 1000, util IS NOT NULL) AS busy_basis,
    toUInt32(max(gpu_index) + 1) AS gpus
FROM {source} GROUP BY tenant, bucket, host, gpu_model"""

# The samples are rolled up by the writer, not by views: store/rollups.py says why.
VIEWS: tuple[View, ...] = (
    View(
        "workload_1m_mv",
        "workload_telemetry",
        "workload_1m",
        _WORKLOAD_ROLLUP.replace("{bucket}", "toStartOfMinute"),
    ),
    View(
        "workload_1h_mv",
        "workload_telemetry",
        "workload_1h",
        _WORKLOAD_ROLLUP.replace("{bucket}", "toStartOfHour"),
    ),
    View(
        "gpu_capacity_1m_mv",
        "gpu_telemetry",
        "gpu_capacity_1m",
        CAPACITY_ROLLUP.replace("{bucket}", "toStartOfMinute"),
    ),
    View(
        "gpu_capacity_1h_mv",
        "gpu_telemetry",
        "gpu_capacity_1h",
        CAPACITY_ROLLUP.replace("{bucket}", "toStartOfHour"),
    ),
)

TABLE_BY_NAME = {t.name: t for t in TABLES}


def ttl_sql(table: Table, retention_s: dict[str, int]) -> str | None:
    if table.ttl is None:
        return None
    out = table.ttl
    for group in RETENTION_GROUPS:
        out = out.replace("{" + group + "}", f"INTERVAL {int(retention_s[group])} SECOND")
    return out


def _engine(table: Table, cluster: str | None) -> str:
    if cluster is None:
        return table.engine if "(" in table.engine else table.engine + "()"
    name, _, args = table.engine.partition("(")
    args = args.rstrip(")")
    path = "'/clickhouse/tables/{shard}/{database}/{table}', '{replica}'"
    return f"Replicated{name}({path}{', ' + args if args else ''})"


def create_table(table: Table, db: str, retention_s: dict[str, int], cluster: str | None) -> str:
    local = f"{table.name}_local" if cluster else table.name
    on = f" ON CLUSTER '{cluster}'" if cluster else ""
    cols = ",\n    ".join(f"`{name}` {typ}" for name, typ in table.columns)
    sql = f"CREATE TABLE IF NOT EXISTS {db}.{local}{on} (\n    {cols}\n) ENGINE = "
    sql += _engine(table, cluster)
    if table.partition_by:
        sql += f"\nPARTITION BY {table.partition_by}"
    sql += f"\nORDER BY {table.order_by}"
    ttl = ttl_sql(table, retention_s)
    if ttl:
        sql += f"\nTTL {ttl}"
    # Parts whose every row expired are dropped whole rather than rewritten.
    settings = {"ttl_only_drop_parts": "1", **table.settings} if ttl else table.settings
    if settings:
        sql += "\nSETTINGS " + ", ".join(f"{k} = {v}" for k, v in settings.items())
    return sql


def create_distributed(table: Table, db: str, cluster: str) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {db}.{table.name} ON CLUSTER '{cluster}' "
        f"AS {db}.{table.name}_local ENGINE = Distributed('{cluster}', '{db}', "
        f"'{table.name}_local', {table.shard_key})"
    )


def create_view(view: View, db: str, cluster: str | None) -> str:
    suffix = "_local" if cluster else ""
    on = f" ON CLUSTER '{cluster}'" if cluster else ""
    select = view.select.replace("{source}", f"{db}.{view.source}{suffix}")
    return (
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.{view.name}{on} "
        f"TO {db}.{view.target}{suffix} AS {select}"
    )


def modify_ttl(table: Table, db: str, retention_s: dict[str, int], cluster: str | None) -> str:
    local = f"{table.name}_local" if cluster else table.name
    on = f" ON CLUSTER '{cluster}'" if cluster else ""
    return f"ALTER TABLE {db}.{local}{on} MODIFY TTL {ttl_sql(table, retention_s)}"


def add_columns(
    table_name: str, after: str, columns: list[str], db: str, cluster: str | None
) -> list[str]:
    """``ADD COLUMN IF NOT EXISTS`` of columns declared in :data:`TABLES` (a store created
    at this version has them already); on a cluster the local and the distributed table."""
    table = next(t for t in TABLES if t.name == table_name)
    types = dict(table.columns)
    names = [f"{table_name}_local", table_name] if cluster else [table_name]
    on = f" ON CLUSTER '{cluster}'" if cluster else ""
    out = []
    for name in names:
        clauses, prev = [], after
        for col in columns:
            clauses.append(f"ADD COLUMN IF NOT EXISTS `{col}` {types[col]} AFTER `{prev}`")
            prev = col
        out.append(f"ALTER TABLE {db}.{name}{on} " + ", ".join(clauses))
    return out


def schema_statements(db: str, retention_s: dict[str, int], cluster: str | None) -> list[str]:
    """Every statement that creates the schema, in order."""
    on = f" ON CLUSTER '{cluster}'" if cluster else ""
    out = [f"CREATE DATABASE IF NOT EXISTS {db}{on}"]
    for table in TABLES:
        out.append(create_table(table, db, retention_s, cluster))
        if cluster:
            out.append(create_distributed(table, db, cluster))
    out.extend(create_view(v, db, cluster) for v in VIEWS)
    return out
