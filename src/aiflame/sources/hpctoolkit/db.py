"""Reading HPCToolkit databases, format v4 (``meta.db``, ``profile.db``), as HPCToolkit's
``doc/FORMATS.md`` specifies them.

Only what a flame graph needs is decoded: the context tree (functions, lines, loops,
instructions and how each context was reached), the metrics with their propagation scopes,
and the sparse values of each profile (one per CPU thread or GPU stream). Structures are
read at the offsets of the spec, with the sizes each file records for its arrays (the spec's
rule for reading files of later minor versions).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

MAGIC = b"HPCTOOLKIT"
FORMAT_META = b"meta"
FORMAT_PROFILE = b"prof"
SUPPORTED_MAJOR = 4

# Context.lexicalType
LEX_FUNCTION, LEX_LOOP, LEX_LINE, LEX_INSTRUCTION = 0, 1, 2, 3
# Context.relation
REL_LEXICAL, REL_CALL, REL_INLINED_CALL = 0, 1, 2
# PropagationScope.type
SCOPE_CUSTOM, SCOPE_POINT, SCOPE_EXECUTION, SCOPE_TRANSITIVE = 0, 1, 2, 3

_VAL = np.dtype([("metric", "<u2"), ("value", "<f8")])  # {Val}, 10 bytes packed
_IDX = np.dtype([("ctx", "<u4"), ("start", "<u8")])  # {Idx}, 12 bytes packed


class FormatError(ValueError):
    """The bytes are not what the v4 spec says (truncated, wrong magic, bad pointer)."""


class _Reader:
    """Little-endian fields at absolute offsets, with bounds checks that raise FormatError."""

    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.what = what

    def _unpack(self, fmt: str, at: int) -> tuple:
        try:
            return struct.unpack_from("<" + fmt, self.data, at)
        except (struct.error, OverflowError):  # a pointer beyond the file (or any file)
            raise FormatError(f"{self.what}: field at {at:#x} beyond the end of the file") from None

    def u8(self, at: int) -> int:
        return self._unpack("B", at)[0]

    def u16(self, at: int) -> int:
        return self._unpack("H", at)[0]

    def u32(self, at: int) -> int:
        return self._unpack("I", at)[0]

    def u64(self, at: int) -> int:
        return self._unpack("Q", at)[0]

    def string(self, at: int) -> str:
        if at == 0:
            return ""
        end = self.data.find(b"\0", at)
        if at >= len(self.data) or end < 0:
            raise FormatError(f"{self.what}: string at {at:#x} is not terminated")
        return self.data[at:end].decode("utf-8", errors="replace")

    def header(self, fmt: bytes) -> tuple[int, int]:
        if self.data[:10] != MAGIC:
            raise FormatError(f"{self.what}: not an HPCToolkit database file")
        if self.data[10:14] != fmt:
            got = self.data[10:14].decode("ascii", "replace")
            raise FormatError(f"{self.what}: a '{got}' file, expected '{fmt.decode()}'")
        major, minor = self.data[14], self.data[15]
        if major != SUPPORTED_MAJOR:
            raise FormatError(f"{self.what}: format version {major}.{minor}, only 4.x is read")
        return major, minor

    def section(self, index: int) -> int:
        """Pointer to section ``index`` (0-based) of the file header."""
        return self.u64(0x18 + 0x10 * index)


@dataclass(frozen=True, slots=True)
class Function:
    name: str
    module: int  # index into MetaDB.modules, -1 if none
    offset: int
    file: int  # index into MetaDB.files, -1 if none
    line: int


@dataclass
class Context:
    """One node of the calling-context tree. ``parent`` is 0 for roots (0 is the global
    context); ``function``/``file``/``module`` are indices into the MetaDB tables, -1 if
    absent."""

    ctx_id: int
    parent: int
    relation: int
    lexical_type: int
    function: int = -1
    file: int = -1
    line: int = 0
    module: int = -1
    offset: int = 0


@dataclass
class Metric:
    """A measured metric; ``point_id``/``execution_id`` are its propMetricIds for the
    point (exclusive) and execution (inclusive) scopes, -1 when not instantiated."""

    name: str
    point_id: int = -1
    execution_id: int = -1
    summary_point_ids: dict[str, int] = field(default_factory=dict)  # formula+combine -> id


@dataclass
class MetaDB:
    title: str
    description: str
    id_names: list[str]
    metrics: list[Metric]
    modules: list[str]
    files: list[str]
    functions: list[Function]
    contexts: dict[int, Context]
    entry_names: dict[int, str]  # ctxId of an entry point -> its pretty name


@dataclass
class ProfileValues:
    """The sparse values of one profile: ``values[ctx_start[i]:ctx_start[i+1]]`` belong to
    context ``ctx_ids[i]``."""

    is_summary: bool
    id_tuple: list[tuple[str, int]]  # (kind name, logical id), outermost first
    ctx_ids: np.ndarray
    ctx_start: np.ndarray  # len(ctx_ids) + 1
    metric: np.ndarray  # u16 metric ids
    value: np.ndarray  # f64


def read_meta(data: bytes, what: str = "meta.db") -> MetaDB:
    r = _Reader(data, what)
    r.header(FORMAT_META)
    general, idnames, metrics_sec, context_sec = (r.section(i) for i in range(4))
    modules_sec, files_sec, functions_sec = (r.section(i) for i in (5, 6, 7))

    title = r.string(r.u64(general))
    description = r.string(r.u64(general + 8))
    pnames, nkinds = r.u64(idnames), r.u8(idnames + 8)
    id_names = [r.string(r.u64(pnames + 8 * k)) for k in range(nkinds)]

    modules, module_at = _string_table(r, modules_sec, path_at=8)
    files, file_at = _string_table(r, files_sec, path_at=8)
    functions, function_at = _functions(r, functions_sec, module_at, file_at)
    metrics = _metrics(r, metrics_sec)
    contexts, entry_names = _contexts(r, context_sec, function_at, file_at, module_at)
    return MetaDB(
        title, description, id_names, metrics, modules, files, functions, contexts, entry_names
    )


def _string_table(r: _Reader, sec: int, path_at: int) -> tuple[list[str], dict[int, int]]:
    """Load modules or source files: (paths, pointer of each spec -> its index)."""
    p, n, size = r.u64(sec), r.u32(sec + 8), r.u16(sec + 0xC)
    paths, index = [], {}
    for i in range(n):
        at = p + i * size
        index[at] = i
        paths.append(r.string(r.u64(at + path_at)))
    return paths, index


def _functions(
    r: _Reader, sec: int, module_at: dict[int, int], file_at: dict[int, int]
) -> tuple[list[Function], dict[int, int]]:
    p, n, size = r.u64(sec), r.u32(sec + 8), r.u16(sec + 0xC)
    out, index = [], {}
    for i in range(n):
        at = p + i * size
        index[at] = i
        pmod, pfile = r.u64(at + 8), r.u64(at + 0x18)
        out.append(
            Function(
                name=r.string(r.u64(at)),
                module=module_at.get(pmod, -1),
                offset=r.u64(at + 0x10),
                file=file_at.get(pfile, -1),
                line=r.u32(at + 0x20),
            )
        )
    return out, index


def _metrics(r: _Reader, sec: int) -> list[Metric]:
    pmetrics, n = r.u64(sec), r.u32(sec + 8)
    sz_metric, sz_inst, sz_summary = r.u8(sec + 0xC), r.u8(sec + 0xD), r.u8(sec + 0xE)
    out = []
    for i in range(n):
        at = pmetrics + i * sz_metric
        m = Metric(r.string(r.u64(at)))
        pinst, psum = r.u64(at + 8), r.u64(at + 0x10)
        ninst, nsum = r.u16(at + 0x18), r.u16(at + 0x1A)
        for j in range(ninst):
            inst = pinst + j * sz_inst
            scope_type = r.u8(r.u64(inst) + 8)
            if scope_type == SCOPE_POINT:
                m.point_id = r.u16(inst + 8)
            elif scope_type == SCOPE_EXECUTION:
                m.execution_id = r.u16(inst + 8)
        for j in range(nsum):
            s = psum + j * sz_summary
            if r.u8(r.u64(s) + 8) == SCOPE_POINT:
                key = f"{r.string(r.u64(s + 8))}/{r.u8(s + 0x10)}"
                m.summary_point_ids[key] = r.u16(s + 0x12)
        out.append(m)
    return out


def _contexts(
    r: _Reader,
    sec: int,
    function_at: dict[int, int],
    file_at: dict[int, int],
    module_at: dict[int, int],
) -> tuple[dict[int, Context], dict[int, str]]:
    pentries, nentries, sz_entry = r.u64(sec), r.u16(sec + 8), r.u8(sec + 0xA)
    contexts: dict[int, Context] = {}
    entry_names: dict[int, str] = {}
    # (pointer to a children array, its size in bytes, parent ctxId): iterative, trees
    # can be deeper than Python's recursion limit.
    todo: list[tuple[int, int, int]] = []
    for i in range(nentries):
        at = pentries + i * sz_entry
        ctx_id = r.u32(at + 0x10)
        entry_names[ctx_id] = r.string(r.u64(at + 0x18))
        contexts[ctx_id] = Context(ctx_id, 0, REL_CALL, LEX_FUNCTION)
        todo.append((r.u64(at + 8), r.u64(at), ctx_id))
    while todo:
        at, size, parent = todo.pop()
        end = at + size
        while at < end:
            ctx_id = r.u32(at + 0x10)
            flags, relation, lex, nflex = (r.u8(at + k) for k in (0x14, 0x15, 0x16, 0x17))
            c = Context(ctx_id, parent, relation, lex)
            word = at + 0x20
            if flags & 1:
                c.function = function_at.get(r.u64(word), -1)
                word += 8
            if flags & 2:
                c.file = file_at.get(r.u64(word), -1)
                c.line = r.u32(word + 8)
                word += 16
            if flags & 4:
                c.module = module_at.get(r.u64(word), -1)
                c.offset = r.u64(word + 8)
            contexts[ctx_id] = c
            if r.u64(at):
                todo.append((r.u64(at + 8), r.u64(at), ctx_id))
            at += 0x20 + 8 * nflex
    return contexts, entry_names


def read_profiles(
    data: bytes, id_names: list[str], what: str = "profile.db"
) -> list[ProfileValues]:
    r = _Reader(data, what)
    r.header(FORMAT_PROFILE)
    infos = r.section(0)
    pprofiles, n, size = r.u64(infos), r.u32(infos + 8), r.u8(infos + 0xC)
    out = []
    for i in range(n):
        at = pprofiles + i * size
        nvalues, pvalues = r.u64(at), r.u64(at + 8)
        nctxs, pidx = r.u32(at + 0x10), r.u64(at + 0x18)
        ptuple, flags = r.u64(at + 0x20), r.u32(at + 0x28)
        if pvalues + nvalues * _VAL.itemsize > len(data) or pidx + nctxs * 12 > len(data):
            raise FormatError(f"{what}: values of profile {i} beyond the end of the file")
        vals = np.frombuffer(data, _VAL, nvalues, pvalues)
        idx = np.frombuffer(data, _IDX, nctxs, pidx)
        start = np.empty(nctxs + 1, dtype=np.int64)
        start[:nctxs] = idx["start"]
        start[nctxs] = nvalues
        out.append(
            ProfileValues(
                is_summary=bool(flags & 1),
                id_tuple=_id_tuple(r, ptuple, id_names),
                ctx_ids=idx["ctx"].astype(np.int64),
                ctx_start=start,
                metric=vals["metric"].astype(np.int64),
                value=vals["value"].astype(np.float64),
            )
        )
    return out


def _id_tuple(r: _Reader, at: int, id_names: list[str]) -> list[tuple[str, int]]:
    if at == 0:
        return []
    n = r.u16(at)
    ids = []
    for k in range(n):
        e = at + 8 + 0x10 * k
        kind = r.u8(e)
        name = id_names[kind] if kind < len(id_names) else f"KIND{kind}"
        ids.append((name, r.u32(e + 4)))
    return ids
