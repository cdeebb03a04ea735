"""Reading hpcrun's measurement files (``*.hpcrun``, format 4.0), as HPCToolkit's
``src/lib/prof-lean/hpcrun-fmt.{h,c}`` write them.

One file holds the calling-context tree (CCT) and metric values of one CPU thread or GPU
stream. Every integer is big-endian; a string is a u32 length and that many bytes. Format
4.0 (HPCToolkit 2022.10 and later) ends with a footer of 14 u64: the start and end of each
section, the footer's own start, and the magic ``HPCRUNsm``. The sections:

* header: ``HPCRUN-profile____`` ``04.00`` ``b``, then name/value pairs (``program-name``,
  ``thread-id``, ``process-id``...);
* load map: the load modules, each ``id u16, path, flags u64``;
* CCT: a u64 count, then 19-byte nodes ``id u32, parent u32, load module u16, ip u64,
  flags u8`` (bit 0: the node comes from a stack unwind; GPU PC samples do not), parents
  before children; load module 0 marks a placeholder whose ip packs eight ASCII letters;
* metric table: a u32 count, then per metric its name, description, 16 flag bytes (type,
  value type, value format (1 int, 2 real), "move to caller", partner, show...), period,
  formula, format, and four fields of perf-event bookkeeping;
* id-tuple dictionary: the names of the id kinds (``THREAD``, ``GPUSTREAM``...);
* sparse metrics: the file's id tuple (``kind u16, physical u64, logical u64`` each), the
  number of values and of nodes with values, ``(value u64, metric u16)`` pairs grouped by
  node, then ``(node id u32, first pair u64)`` per node plus an end entry.

Formats 2.0 and 3.0 (earlier releases: epochs with a value per metric on every node) are
refused with one clear error.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

MAGIC = b"HPCRUN-profile____"
FOOTER_MAGIC = 0x48504352554E736D  # "HPCRUNsm"
FOOTER_SIZE = 14 * 8
SUPPORTED_MAJOR = "04"

VALFMT_INT, VALFMT_REAL = 1, 2
PLACEHOLDER_MODULE = 0

_NODE = np.dtype(
    [("id", ">u4"), ("parent", ">u4"), ("module", ">u2"), ("ip", ">u8"), ("flags", "u1")]
)  # 19 bytes, packed
_VALUE = np.dtype([("bits", ">u8"), ("metric", ">u2")])  # 10 bytes
_INDEX = np.dtype([("node", ">u4"), ("start", ">u8")])  # 12 bytes
_ID = struct.Struct(">HQQ")
# HpcrunFile.nodes, in native byte order
NODES = np.dtype(
    [("id", "i8"), ("parent", "i8"), ("module", "i4"), ("ip", "u8"), ("unwound", "?")]
)  # one id-tuple entry: kind, physical id, logical id


class FormatError(ValueError):
    """The bytes are not an hpcrun 4.x file (truncated, wrong magic, bad offsets)."""


@dataclass(frozen=True, slots=True)
class MetricDesc:
    name: str
    description: str
    value_format: int  # VALFMT_INT or VALFMT_REAL
    move_to_caller: bool  # hpcprof attributes it to the call, not the callee's body
    show: int
    period: int  # hpcprof multiplies each value by it
    formula: str  # non-empty: a derived metric, computed from others (no values)

    @property
    def is_real(self) -> bool:
        return self.value_format == VALFMT_REAL


@dataclass
class HpcrunFile:
    """One thread's or stream's measurements. ``nodes`` is a structured array (``id``,
    ``parent``, ``module``, ``ip``, ``unwound``) in file order; the values are parallel
    arrays: ``value_node`` (the CCT node id), ``value_metric`` (index into ``metrics``),
    ``value`` (float64, not yet multiplied by the metric's period)."""

    version: str
    header: dict[str, str]
    load_modules: dict[int, str]
    metrics: list[MetricDesc]
    id_tuple: list[tuple[str, int, int]]  # (kind name, physical id, logical id)
    nodes: np.ndarray
    value_node: np.ndarray
    value_metric: np.ndarray
    value: np.ndarray


def placeholder_name(ip: int) -> str:
    """The eight letters a placeholder's ip packs (``GPUKernl``, ``| Main  ``...)."""
    return ip.to_bytes(8, "big").decode("latin-1")


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.what = f"{what}: " if what else ""  # the prefix of error messages

    def unpack(self, fmt: str, at: int) -> tuple:
        try:
            return struct.unpack_from(">" + fmt, self.data, at)
        except struct.error:
            raise FormatError(f"{self.what}truncated (field at {at:#x})") from None

    def string(self, at: int) -> tuple[str, int]:
        (n,) = self.unpack("I", at)
        end = at + 4 + n
        if end > len(self.data):
            raise FormatError(f"{self.what}truncated (string at {at:#x})")
        return self.data[at + 4 : end].decode("utf-8", errors="replace"), end

    def array(self, dtype: np.dtype, count: int, at: int, section: str) -> np.ndarray:
        if count < 0 or at + count * dtype.itemsize > len(self.data):
            raise FormatError(f"{self.what}{section} beyond the end of the file")
        return np.frombuffer(self.data, dtype, count, at)


def is_hpcrun(head: bytes) -> bool:
    return head.startswith(MAGIC)


def read_hpcrun(data: bytes, what: str = "") -> HpcrunFile:
    """Decode one file; ``what`` names it in error messages."""
    r = _Reader(data, what)
    what = r.what
    if not data.startswith(MAGIC):
        raise FormatError(f"{what}not an hpcrun profile")
    version = data[len(MAGIC) : len(MAGIC) + 5].decode("ascii", "replace")
    if not version.startswith(SUPPORTED_MAJOR + "."):
        raise FormatError(
            f"{what}hpcrun format {version}, written by HPCToolkit before 2022.10; "
            "only format 4.x is read (give the database hpcprof made of it)"
        )
    if len(data) < 24 + FOOTER_SIZE:
        raise FormatError(f"{what}truncated (no footer)")
    footer = struct.unpack_from(">14Q", data, len(data) - FOOTER_SIZE)
    if footer[13] != FOOTER_MAGIC:
        raise FormatError(f"{what}incomplete (no footer: the program did not finish?)")
    hdr, _, lm, _, cct, _, mtbl, _, dxnry, _, sm, sm_end, _, _ = footer
    if max(footer[:13]) > len(data):
        raise FormatError(f"{what}footer points beyond the end of the file")

    header = _nv_pairs(r, hdr + 24)
    load_modules = _load_map(r, lm)
    metrics = _metric_table(r, mtbl)
    kinds = _id_dictionary(r, dxnry)
    (count,) = r.unpack("Q", cct)
    raw = r.array(_NODE, count, cct + 8, "CCT")
    nodes = np.empty(count, NODES)
    nodes["id"], nodes["parent"], nodes["module"] = raw["id"], raw["parent"], raw["module"]
    nodes["ip"], nodes["unwound"] = raw["ip"], (raw["flags"] & 1).astype(bool)
    id_tuple, value_node, value_metric, value = _sparse_metrics(r, sm, sm_end, kinds, metrics)
    return HpcrunFile(
        version, header, load_modules, metrics, id_tuple, nodes, value_node, value_metric, value
    )


def _nv_pairs(r: _Reader, at: int) -> dict[str, str]:
    (n,) = r.unpack("I", at)
    at += 4
    out = {}
    for _ in range(n):
        key, at = r.string(at)
        out[key], at = r.string(at)
    return out


def _load_map(r: _Reader, at: int) -> dict[int, str]:
    (n,) = r.unpack("I", at)
    at += 4
    out = {}
    for _ in range(n):
        (lm_id,) = r.unpack("H", at)
        name, at = r.string(at + 2)
        out[lm_id] = name
        at += 8  # flags
    return out


def _metric_table(r: _Reader, at: int) -> list[MetricDesc]:
    (n,) = r.unpack("I", at)
    at += 4
    out = []
    for _ in range(n):
        name, at = r.string(at)
        description, at = r.string(at)
        flags = r.data[at : at + 16]
        if len(flags) < 16:
            raise FormatError(f"{r.what}truncated (metric {name})")
        (period,) = r.unpack("Q", at + 16)
        formula, at = r.string(at + 24)
        _format, at = r.string(at)
        at += 2 + 2 + 8 + 8  # is-frequency, is-multiplexed, threshold mean, sample count
        out.append(
            MetricDesc(
                name=name,
                description=description,
                value_format=flags[2],
                move_to_caller=bool(flags[3]),
                show=flags[6],
                period=period or 1,
                formula=formula,
            )
        )
    return out


def _id_dictionary(r: _Reader, at: int) -> dict[int, str]:
    (n,) = r.unpack("H", at)
    at += 2
    out = {}
    for _ in range(n):
        (kind,) = r.unpack("H", at)
        out[kind], at = r.string(at + 2)
    return out


_KIND_BITS = (1 << 14) - 1  # the top two bits of a kind say how to read its ids


def _sparse_metrics(
    r: _Reader, at: int, end: int, kinds: dict[int, str], metrics: list[MetricDesc]
) -> tuple[list[tuple[str, int, int]], np.ndarray, np.ndarray, np.ndarray]:
    (n_ids,) = r.unpack("H", at)
    at += 2
    id_tuple = []
    for _ in range(n_ids):
        kind, physical, logical = r.unpack("HQQ", at)
        name = kinds.get(kind & _KIND_BITS, f"KIND{kind & _KIND_BITS}")
        id_tuple.append((name, physical, logical))
        at += _ID.size
    n_values, n_nodes = r.unpack("QI", at)
    at += 12
    pairs = r.array(_VALUE, n_values, at, "metric values")
    index = r.array(_INDEX, n_nodes + 1, at + n_values * _VALUE.itemsize, "metric index")
    if at + n_values * _VALUE.itemsize + (n_nodes + 1) * _INDEX.itemsize > end:
        raise FormatError(f"{r.what}metric values beyond their section")
    starts = index["start"].astype(np.int64)
    if n_nodes and (np.any(np.diff(starts) < 0) or starts[0] != 0 or starts[-1] != n_values):
        raise FormatError(f"{r.what}metric index out of order")
    metric = pairs["metric"].astype(np.int64)
    if n_values and int(metric.max()) >= len(metrics):
        raise FormatError(f"{r.what}value of metric {int(metric.max())}, not in the table")
    bits = pairs["bits"].astype(">u8")
    is_real = np.array([m.is_real for m in metrics], dtype=bool)[metric]
    value = np.where(is_real, bits.view(">f8").astype(np.float64), bits.astype(np.float64))
    node = np.repeat(index["node"][:-1].astype(np.int64), np.diff(starts))
    return id_tuple, node, metric, value
