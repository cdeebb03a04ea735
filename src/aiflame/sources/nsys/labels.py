"""Who ran what in an nsys export: thread and process names, MPI ranks, sample labels."""

from __future__ import annotations

import re

from aiflame.model import ProfileBuilder
from aiflame.sources.nsys.db import NsysDB, pid_of, process_key, tid_of

THREAD_NAME_TYPE = 39  # NVTX_EVENTS eventType NvtxThread: names a thread
# Possessive blanks: two runs of \s* around an optional sign backtrack quadratically.
_RANK = re.compile(r"\brank\s*+[:=#]?\s*+(\d+)", re.IGNORECASE)
_RANK_ENV = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID")


class Labels:
    """Interned label sets (pid, tid, thread, process, rank, device, stream) of samples."""

    def __init__(self, db: NsysDB, builder: ProfileBuilder, gpu_tables: tuple[str, ...]) -> None:
        self._builder = builder
        self._cache: dict[tuple, int] = {}
        self.thread_names = _thread_names(db)
        self.process_names = {
            process_key(g): n for g, n in db.select("PROCESSES", ["globalPid", "name"]) if n
        }
        self.ranks = _ranks(db, self.thread_names, gpu_tables)

    def id(
        self,
        global_id: int | None,
        gtid: int | None,
        device: int | None = None,
        stream: int | None = None,
    ) -> int:
        """Label set of a sample of process ``global_id`` (a globalPid or globalTid)."""
        pkey = process_key(global_id)
        key = (pkey, gtid, device, stream)
        i = self._cache.get(key)
        if i is None:
            labels: dict[str, object] = {"pid": pid_of(global_id)}
            if gtid:
                labels["tid"] = tid_of(gtid)
                if gtid in self.thread_names:
                    labels["thread"] = self.thread_names[gtid]
            if pkey in self.process_names:
                labels["process"] = self.process_names[pkey]
            if pkey in self.ranks:
                labels["rank"] = self.ranks[pkey]
            if device is not None:
                labels["device"] = device
            if stream is not None:
                labels["stream"] = stream
            i = self._cache[key] = self._builder.labels(labels)
        return i


def _thread_names(db: NsysDB) -> dict[int, str]:
    strings = db.strings
    names = {
        g: strings.get(n, "") for n, g in db.select("ThreadNames", ["nameId", "globalTid"]) if g
    }
    rows = db.select("NVTX_EVENTS", ["text", "globalTid"], f"eventType = {THREAD_NAME_TYPE}")
    for text, g in rows:
        if text and g is not None:
            names.setdefault(g, text)
    return {g: n for g, n in names.items() if n}


def _ranks(db: NsysDB, thread_names: dict[int, str], gpu_tables: tuple[str, ...]) -> dict[int, str]:
    """Process key -> MPI rank, from thread names (nsys' MPI tracing names the main thread
    "MPI Rank N"), else from the launcher's environment when one process was profiled."""
    ranks: dict[int, str] = {}
    for g, name in thread_names.items():
        m = _RANK.search(name)
        if m:
            ranks.setdefault(process_key(g), m.group(1))
    if ranks:
        return ranks
    processes: set[int] = set()
    for table in gpu_tables:
        if "globalPid" in db.columns(table):
            sql = f'SELECT DISTINCT "globalPid" / 16777216 FROM "{table}"'
            processes.update(p for (p,) in db.conn.execute(sql))
    env = _environment(db)
    rank = next((env[k] for k in _RANK_ENV if env.get(k, "").isdigit()), None)
    if rank is not None and len(processes) == 1:
        return {processes.pop(): rank}
    return {}


def _environment(db: NsysDB) -> dict[str, str]:
    for name, value in db.select("TARGET_INFO_SYSTEM_ENV", ["name", "value"]):
        if name == "DeviceEnvironment" and value:
            return dict(kv.partition("=")[::2] for kv in value.split("\x00") if "=" in kv)
    return {}
