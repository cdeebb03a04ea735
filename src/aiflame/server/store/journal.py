"""The ingest journal (``ingest_batches``): one row per batch and state it reaches.

``open`` before a batch's rows are inserted, ``done`` after them (with the time span of its
samples), ``rolled`` once its samples are in the roll-ups, ``aborted`` once a batch left open
was rolled back (writer.py, rollups.py).
"""

from __future__ import annotations

import time

import pyarrow as pa

from aiflame.server.store.connection import Store

_MS = pa.timestamp("ms", tz="UTC")


def write(
    store: Store,
    batch_ids: list[int],
    state: str,
    replica: str,
    span: tuple[int, int] | None = None,
) -> None:
    """Journal ``state`` for each batch; ``span``: first and last sample time (ms)."""
    n = len(batch_ids)
    store.insert(
        "ingest_batches",
        pa.table(
            {
                "batch_id": pa.array(batch_ids, pa.uint64()),
                "state": pa.array([state] * n),
                "at": pa.array([time.time_ns() // 1_000_000] * n, _MS),
                "replica": pa.array([replica] * n),
                "min_time": pa.array([span[0] if span else None] * n, _MS),
                "max_time": pa.array([span[1] if span else None] * n, _MS),
            }
        ),
    )
