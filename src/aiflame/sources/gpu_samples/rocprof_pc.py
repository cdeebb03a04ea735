"""rocprofv3 PC sampling (AMD): host-trap and stochastic samples, CSV or JSON.

``rocprofv3 --pc-sampling-beta-enabled --pc-sampling-method host_trap|stochastic`` writes
one row per sample: the dispatch it hit, the instruction's ISA text, its ``file:line``
(with ``-g``), and in stochastic mode whether the wave issued and, if not, why
(``ROCPROFILER_PC_SAMPLING_INSTRUCTION_NOT_ISSUED_REASON_WAITCNT`` ...). Each sample
becomes ``kernel ; file:line ; instruction ; stall reason`` (host-trap samples have no
reason, their stacks end at the instruction), weighted 1 in ``gpu-samples``.

Kernel names come from the dispatches: the JSON output carries them
(``kernel_dispatch`` -> ``kernel_symbols``); beside a CSV, rocprofv3's
``*kernel_trace.csv`` of the same run is read when present (``--kernel-trace``).
Otherwise the kernel frame reads ``dispatch N``. The labels ``dispatch`` and
``correlation`` keep the ids (the correlation id joins samples to launch stacks).
"""

from __future__ import annotations

import csv
import os
from collections import Counter
from collections.abc import Iterator
from itertools import repeat
from operator import itemgetter

import msgspec

from aiflame.errors import InputError
from aiflame.model import FrameKind, Profile, ProfileBuilder, gpu
from aiflame.model.stacks import EMPTY_STACK
from aiflame.sources.inputs import Input, decode_head, detect_encoding

FORMAT = "rocprofv3-pc"

CSV_COLUMNS = ("Sample_Timestamp", "Exec_Mask", "Dispatch_Id", "Instruction")
REASON_PREFIX = "ROCPROFILER_PC_SAMPLING_INSTRUCTION_NOT_ISSUED_REASON_"
ISSUED = "issued"
_JSON_MARK = b'"rocprofiler-sdk-tool"'
# Upper bound for fields of real ISA text or source paths; csv's default (128 KiB) is
# what a garbled file would hit first.
_FIELD_LIMIT = 1 << 20


def sniff(head: bytes, path: str) -> bool:
    text = decode_head(head[:4096]).lstrip("\ufeff")
    first = text.split("\n", 1)[0].replace('"', "")
    if first.startswith(",".join(CSV_COLUMNS)):
        return True
    return _JSON_MARK in head and (b"pc_sample_" in head or text.lstrip().startswith("{"))


def load(source: Input, **_: object) -> Profile:
    head = source.head(4096)
    if head.lstrip().startswith(b"{"):
        return _load_json(source)
    return _load_csv(source)


# -- rows -> profile ----------------------------------------------------------------------


class _Samples:
    """Counts samples per (dispatch, correlation, kernel, comment, instruction, reason)."""

    def __init__(self) -> None:
        self.b = ProfileBuilder([gpu.GPU_SAMPLES])
        self.frames: dict[tuple[int, str], int] = {}

    def frame(self, kind: FrameKind, name: str, file: str = "", line: int = 0) -> int:
        key = (int(kind), name)
        f = self.frames.get(key)
        if f is None:
            f = self.frames[key] = self.b.frame(name, kind, file, line)
        return f

    def add(
        self,
        kernel: str,
        comment: str,
        instruction: str,
        offset: int | None,
        reason: str,
        labels: dict[str, str],
        count: float,
    ) -> None:
        b = self.b
        sid = b.stacks.intern((self.frame(FrameKind.GPU_KERNEL, kernel),), EMPTY_STACK)
        if comment:
            file, _, line = comment.rpartition(":")
            if file and line.isdigit():
                name = gpu.source_line_name(file, int(line))
                sid = b.stacks.intern(
                    (self.frame(FrameKind.GPU_SOURCE, name, file, int(line)),), sid
                )
            else:
                sid = b.stacks.intern((self.frame(FrameKind.GPU_SOURCE, comment),), sid)
        text = " ".join(instruction.split())
        name = gpu.instruction_name(text, offset) if offset is not None else text or "[unknown]"
        f = self.b.frame(name, FrameKind.GPU_INSTRUCTION, address=offset or 0)
        sid = b.stacks.intern((f,), sid)
        lab = dict(labels)
        if reason:
            sid = b.stacks.intern((self.frame(FrameKind.GPU_STALL, reason),), sid)
            lab[gpu.STALL_LABEL] = reason
            lab[gpu.STALL_CLASS_LABEL] = gpu.stall_class(reason)
        b.add(sid, count, b.labels(lab))


def _reason(issued: str | bool | None, raw: str | None) -> str:
    """The stall leaf of a stochastic sample; "" for host-trap samples (no reason)."""
    if issued is None:
        return ""
    if issued in (True, "1", "true", "True"):
        return ISSUED
    name = (raw or "").removeprefix(REASON_PREFIX)
    return name.removeprefix("REASON_") or "unknown"


# -- CSV ----------------------------------------------------------------------------------

# rocprofv3 starts every row with the sample's timestamp and exec mask (numbers, never
# quoted), which no stack uses: dropped from the bytes, the rows of millions of samples
# collapse to their few distinct lines, counted in C (map, partition, Counter) before any
# CSV parsing.
_SKIPPED = ("Sample_Timestamp", "Exec_Mask")
_CHUNK = 16 << 20
_THIRD = itemgetter(2)


def _without_two_fields(lines: list[bytes]) -> Iterator[bytes]:
    """Each line after its second comma (C-level maps: no Python code per line)."""
    comma = repeat(b",")
    return map(_THIRD, map(bytes.partition, map(_THIRD, map(bytes.partition, lines, comma)), comma))


def _count_lines(source: Input) -> tuple[list[str], Counter]:
    """(header, distinct row text -> count), without the leading timestamp and mask."""
    with source.open_binary() as f:
        first = f.readline()
        encoding = detect_encoding(first[:4])
        text = first.decode(encoding, errors="replace").lstrip("\ufeff")
        try:
            header = next(csv.reader([text]))
        except (StopIteration, csv.Error):
            raise InputError(source.path, "empty rocprofv3 CSV") from None
        fast = header[: len(_SKIPPED)] == list(_SKIPPED) and encoding != "utf-16"
        counts: Counter = Counter()
        rest = b""
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                lines = rest.split(b"\n")
            else:
                chunk = rest + chunk
                cut = chunk.rfind(b"\n") + 1
                rest = chunk[cut:]
                lines = chunk[:cut].split(b"\n")
            counts.update(_without_two_fields(lines) if fast else lines)
            if not chunk:
                break
    counts.pop(b"", None)
    counts.pop(b"\r", None)
    out: Counter = Counter()
    for line, n in counts.items():
        out[line.decode(encoding, errors="replace").rstrip("\r")] += n
    return header, out


def _load_csv(source: Input) -> Profile:
    csv.field_size_limit(_FIELD_LIMIT)
    header, lines = _count_lines(source)
    col = {name.strip(): i for i, name in enumerate(header)}
    missing = [c for c in ("Dispatch_Id", "Instruction") if c not in col]
    if missing:
        raise InputError(source.path, f"rocprofv3 PC sampling CSV without {missing[0]}")
    wanted = [
        col.get(name, -1)
        for name in (
            "Dispatch_Id",
            "Correlation_Id",
            "Instruction",
            "Instruction_Comment",
            "Wave_Issued_Instruction",
            "Stall_Reason",
        )
    ]
    present = [i for i in wanted if i >= 0]
    width = max(present) + 1
    pick = itemgetter(*present)
    stripped = len(header) - len(_SKIPPED)  # a row whose timestamp and mask were dropped
    rows: Counter = Counter()
    try:
        for line, count in lines.items():
            for r in csv.reader([line]):
                if len(r) == stripped and header[: len(_SKIPPED)] == list(_SKIPPED):
                    r = ["", "", *r]  # the dropped timestamp and mask
                if len(r) >= width:
                    rows[pick(r)] += count
    except csv.Error as e:
        raise InputError(source.path, f"bad CSV: {e}") from None
    kernels = _kernel_trace_names(source.path)
    samples = _Samples()
    pos = {i: k for k, i in enumerate(present)}

    def field(row: tuple, which: int) -> str | None:
        i = wanted[which]
        return row[pos[i]] if i >= 0 else None

    for row, count in rows.items():
        dispatch = field(row, 0) or ""
        corr = field(row, 1)
        reason = _reason(field(row, 4), field(row, 5))
        kernel = kernels.get(dispatch) or f"dispatch {dispatch}"
        labels = {"dispatch": dispatch}
        if corr:
            labels["correlation"] = corr
        samples.add(kernel, field(row, 3) or "", field(row, 2) or "", None, reason, labels, count)
    profile = samples.b.build()
    if not len(profile):
        raise InputError(source.path, "rocprofv3 PC sampling CSV with no samples")
    return profile


def _kernel_trace_names(path: str) -> dict[str, str]:
    """Dispatch id -> kernel name from rocprofv3's kernel trace beside the samples."""
    if path == "-" or not os.path.isfile(path):
        return {}
    folder, name = os.path.split(path)
    candidates = [name.replace(kind, "kernel_trace") for kind in _PC_FILE_KINDS if kind in name]
    try:
        candidates += sorted(n for n in os.listdir(folder or ".") if n.endswith("kernel_trace.csv"))
    except OSError:
        return {}
    for cand in candidates:
        full = os.path.join(folder, cand)
        if cand != name and os.path.isfile(full):
            return _read_kernel_trace(full)
    return {}


_PC_FILE_KINDS = ("pc_sampling_host_trap", "pc_sampling_stochastic")


def _read_kernel_trace(path: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8", errors="replace", newline="") as f:
            rows = csv.DictReader(f)
            return {
                r["Dispatch_Id"]: r["Kernel_Name"]
                for r in rows
                if r.get("Dispatch_Id") and r.get("Kernel_Name")
            }
    except (OSError, csv.Error, KeyError):
        return {}


# -- JSON ---------------------------------------------------------------------------------


class _PC(msgspec.Struct):
    code_object_id: int = 0
    code_object_offset: int = 0


class _Snapshot(msgspec.Struct):
    stall_reason: str | int | None = None


class _Corr(msgspec.Struct):
    internal: int = 0
    external: int = 0


class _Record(msgspec.Struct):
    pc: _PC = msgspec.field(default_factory=_PC)
    dispatch_id: int = 0
    correlation_id: _Corr | int | None = None
    wave_issued: bool | int | None = None
    snapshot: _Snapshot | None = None


class _Sample(msgspec.Struct):
    record: _Record
    inst_index: int = -1


class _DispatchInfo(msgspec.Struct):
    dispatch_id: int = 0
    kernel_id: int = 0


class _Dispatch(msgspec.Struct):
    dispatch_info: _DispatchInfo = msgspec.field(default_factory=_DispatchInfo)


class _Symbol(msgspec.Struct):
    kernel_id: int = 0
    kernel_name: str = ""
    formatted_kernel_name: str = ""
    truncated_kernel_name: str = ""


class _Strings(msgspec.Struct):
    pc_sample_instructions: list[str] = []
    pc_sample_comments: list[str] = []


class _Buffers(msgspec.Struct):
    kernel_dispatch: list[_Dispatch] = []
    pc_sample_host_trap: list[_Sample] = []
    pc_sample_stochastic: list[_Sample] = []


class _Tool(msgspec.Struct):
    buffer_records: _Buffers = msgspec.field(default_factory=_Buffers)
    strings: _Strings = msgspec.field(default_factory=_Strings)
    kernel_symbols: list[_Symbol] = []


class _Results(msgspec.Struct):
    tool: list[_Tool] = msgspec.field(name="rocprofiler-sdk-tool", default_factory=list)


def _load_json(source: Input) -> Profile:
    try:
        results = msgspec.json.decode(source.read_bytes(), type=_Results)
    except msgspec.DecodeError as e:
        raise InputError(source.path, f"not a rocprofv3 JSON output: {e}") from None
    samples = _Samples()
    for tool in results.tool:
        symbols = {s.kernel_id: _symbol_name(s) for s in tool.kernel_symbols}
        kernel_of = {
            d.dispatch_info.dispatch_id: symbols.get(d.dispatch_info.kernel_id, "")
            for d in tool.buffer_records.kernel_dispatch
        }
        insts, comments = tool.strings.pc_sample_instructions, tool.strings.pc_sample_comments
        counts: Counter = Counter()
        for stochastic, recs in (
            (False, tool.buffer_records.pc_sample_host_trap),
            (True, tool.buffer_records.pc_sample_stochastic),
        ):
            for s in recs:
                r = s.record
                corr = (
                    r.correlation_id.internal
                    if isinstance(r.correlation_id, _Corr)
                    else r.correlation_id
                )
                issued = (
                    (bool(r.wave_issued) if r.wave_issued is not None else False)
                    if stochastic
                    else None
                )
                raw = r.snapshot.stall_reason if r.snapshot else None
                counts[
                    (
                        r.dispatch_id,
                        corr,
                        s.inst_index,
                        r.pc.code_object_id,
                        r.pc.code_object_offset,
                        issued,
                        str(raw) if raw is not None else None,
                    )
                ] += 1
        for (dispatch, corr, inst, code_object, offset, issued, raw), count in counts.items():
            text = insts[inst] if 0 <= inst < len(insts) else ""
            comment = comments[inst] if 0 <= inst < len(comments) else ""
            kernel = kernel_of.get(dispatch) or f"dispatch {dispatch}"
            labels = {"dispatch": str(dispatch), "code_object": str(code_object)}
            if corr:
                labels["correlation"] = str(corr)
            reason = _reason(issued, raw)
            samples.add(kernel, comment, text, offset, reason, labels, count)
    profile = samples.b.build()
    if not len(profile):
        raise InputError(source.path, "rocprofv3 JSON output with no PC samples")
    return profile


def _symbol_name(s: _Symbol) -> str:
    return s.formatted_kernel_name or s.truncated_kernel_name or s.kernel_name.removesuffix(".kd")
