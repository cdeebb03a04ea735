"""Nsight Compute: ``.ncu-rep`` reports (through NVIDIA's ``ncu-report`` package, the
``nsight`` extra) and ``ncu --import R.ncu-rep --page source --csv`` exports.

The Source Counters section samples warp states per PC: each profiled launch becomes
``kernel ; file:line ; SASS @ +offset ; stall reason`` samples (``gpu-samples``), and its
duration a ``gpu-time`` sample on the kernel. Each stall reason is counted once: the
``*_not_issued`` metrics (and the CSV's ``(Not Issued)`` columns) count a subset of the
same samples again and are left out, so a kernel's total equals
``smsp__pcsamp_sample_count``. Samples carry the launch's ``grid`` and ``block`` as labels,
which is how they meet the launch stacks of a trace given with them.

CSV exports have one block per kernel (a ``"Kernel Name"`` row, then a header row): SASS
rows (an ``Address`` column) give instructions, CUDA-view rows (``#`` line numbers under
``"File Name"`` rows) give source lines.
"""

from __future__ import annotations

import csv
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from aiflame.errors import AiflameError, InputError
from aiflame.model import Profile, ProfileBuilder, SampleType, gpu
from aiflame.sources.gpu_samples.stacks import GpuStacks
from aiflame.sources.inputs import Input, decode_head

FORMAT = "nsight-compute"
REPORT_MAGIC = b"NVR\x00"
GPU_TIME = SampleType("gpu-time", "nanoseconds")
STALL_GROUP = "group:smsp__pcsamp_warp_stall_reasons"
SAMPLE_COUNT = "smsp__pcsamp_sample_count"
_TOTAL_COLUMNS = ("Warp Stall Sampling (All Samples)", "Warp Stall Sampling (All Cycles)")


def sniff(head: bytes, path: str) -> bool:
    if head.startswith(REPORT_MAGIC):
        return True
    text = decode_head(head[:8192]).lstrip("\ufeff")
    lines = text.splitlines()[:3]
    return (
        len(lines) >= 2
        and lines[0].startswith('"Kernel Name"')
        and any(col in lines[1] for col in ("Warp Stall Sampling", '"Address","Source"', '"#"'))
    )


def load(source: Input, **_: object) -> Profile:
    if source.head(4) == REPORT_MAGIC:
        return _load_report(source)
    return _load_csv(source)


# -- .ncu-rep -----------------------------------------------------------------------------


def _report_path(source: Input) -> tuple[str, str | None]:
    """A real file for ncu_report to open (it needs a path): the input itself, or a
    decompressed temporary copy of a gzipped one or of stdin."""
    if not source.is_stdin and os.path.isfile(source.path):
        with open(source.path, "rb") as f:
            if f.read(4) == REPORT_MAGIC:
                return source.path, None
    fd, tmp = tempfile.mkstemp(suffix=".ncu-rep")
    with os.fdopen(fd, "wb") as out, source.open_binary() as f:
        while chunk := f.read(1 << 20):
            out.write(chunk)
    return tmp, tmp


def _load_report(source: Input) -> Profile:
    try:
        import ncu_report  # type: ignore[import-not-found]
    except ImportError:
        raise AiflameError(
            f"{source.path}: Nsight Compute report; reading it needs NVIDIA's ncu-report "
            "package (pip install 'aiflame[nsight]'), or export it with "
            "ncu --import R.ncu-rep --page source --csv"
        ) from None
    path, tmp = _report_path(source)
    try:
        with _native_stderr() as said:
            ctx = ncu_report.load_report(path)
            if ctx is None:
                why = f" ({said()})" if said() else ""
                raise InputError(source.path, f"ncu-report cannot read this report{why}")
            return _Report(ncu_report).run(ctx)
    finally:
        if tmp:
            os.unlink(tmp)


@contextmanager
def _native_stderr() -> Iterator[Callable[[], str]]:
    """Keep what NVIDIA's library writes to file descriptor 2 itself (absl and protobuf
    log lines, "Can't parse message ...") off the terminal, where aiflame says one line;
    yields a function giving the last line it wrote, for that line."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)

        def last_line() -> str:
            caught.seek(0)
            lines = caught.read(1 << 16).decode("utf-8", "replace").strip().splitlines()
            text = lines[-1] if lines else ""
            return text.split("] ", 1)[-1][:300]  # without the log prefix

        try:
            yield last_line
        finally:
            os.dup2(saved, 2)
            os.close(saved)


class _Report:
    def __init__(self, mod) -> None:
        self.mod = mod
        self.b = ProfileBuilder([gpu.GPU_SAMPLES, GPU_TIME])
        self.stacks = GpuStacks(self.b)
        self.periods: set[float] = set()

    def _value(self, act, name: str) -> float | None:
        m = act.metric_by_name(name)
        if m is None:
            return None
        try:
            return float(m.as_double())
        except (TypeError, ValueError):
            return None

    def run(self, ctx) -> Profile:
        launches = 0
        for r in range(ctx.num_ranges()):
            rng = ctx.range_by_idx(r)
            for a in range(rng.num_actions()):
                self._action(rng.action_by_idx(a), launches)
                launches += 1
        if len(self.periods) == 1:
            self.b.meta[gpu.META_PERIOD] = self.periods.pop()
            self.b.meta[gpu.META_PERIOD_UNIT] = "cycles"
        self.b.meta["default_type"] = 0
        profile = self.b.build()
        if not launches:
            raise InputError("ncu", "report without profiled kernels")
        return profile

    def _action(self, act, index: int) -> None:
        mod = self.mod
        # The library answers None for what a damaged report lacks: every text is checked.
        name = act.name(mod.IAction.NameBase_DEMANGLED) or act.name() or f"kernel #{index}"
        grid = ",".join(str(int(self._value(act, f"launch__grid_dim_{d}") or 0)) for d in "xyz")
        block = ",".join(str(int(self._value(act, f"launch__block_dim_{d}") or 0)) for d in "xyz")
        launch = {"launch": str(index), "grid": grid, "block": block}
        device = act.metric_by_name("device__attribute_display_name")
        if device is not None and device.as_string():
            launch["device"] = device.as_string()
        kernel = self.stacks.kernel(name)
        duration = self._value(act, "gpu__time_duration.sum")
        if duration:
            self.b.add(kernel, [0.0, duration], self.stacks.labels(None, launch))
        period = self._value(act, "smsp__pcsamp_interval_cycles")
        if period:
            self.periods.add(period)
        group = act.metric_by_name(STALL_GROUP)
        if group is None:
            return  # no Source Counters section for this launch
        start_metric = act.metric_by_name("launch__function_pcs")
        start = int(start_metric.as_uint64()) if start_metric is not None else 0
        place: dict[int, int] = {}
        for counter in (group.as_string() or "").split(","):
            counter = counter.strip()
            if not counter or gpu.is_not_issued_subset(counter):
                continue
            m = act.metric_by_name(counter)
            if m is None or not m.has_correlation_ids():
                continue
            reason = gpu.nvidia_reason_name(counter)
            labels = self.stacks.labels(reason, launch)
            ids = m.correlation_ids()
            for i in range(m.num_instances()):
                samples = m.as_uint64(i)
                if not samples:
                    continue
                pc = ids.as_uint64(i)
                sid = place.get(pc)
                if sid is None:
                    sid = place[pc] = self._place(act, kernel, pc, start)
                self.b.add(self.stacks.stall(sid, reason), [float(samples), 0.0], labels)

    def _place(self, act, kernel: int, pc: int, start: int) -> int:
        info = act.source_info(pc)
        sid = kernel
        if info is not None and info.line() > 0:
            sid = self.stacks.lines(sid, [(info.file_name() or "?", int(info.line()))])
        offset = pc - start if start and pc >= start else pc
        return self.stacks.instruction(sid, act.sass_by_pc(pc) or "", offset)


# -- CSV ----------------------------------------------------------------------------------


def _blocks(rows: Iterator[list[str]]) -> Iterator[tuple[str, list[str], list[list[str]]]]:
    """(kernel name, header, rows) per ``"Kernel Name"`` block."""
    kernel, header = None, None
    body: list[list[str]] = []
    for row in rows:
        if not row:
            continue
        if row[0] == "Kernel Name":
            if kernel is not None and header is not None:
                yield kernel, header, body
            kernel, header, body = (row[1] if len(row) > 1 else ""), None, []
        elif header is None and kernel is not None:
            header = row
        elif header is not None:
            body.append(row)
    if kernel is not None and header is not None:
        yield kernel, header, body


def _number(text: str) -> float:
    try:
        return float(text.replace(",", "")) if text not in ("", "-") else 0.0
    except ValueError:
        return 0.0


def _load_csv(source: Input) -> Profile:
    csv.field_size_limit(1 << 24)
    b = ProfileBuilder([gpu.GPU_SAMPLES])
    stacks = GpuStacks(b)
    kernels = 0
    with source.open_text() as f:
        try:
            for kernel, header, body in _blocks(csv.reader(f)):
                kernels += 1
                _csv_block(stacks, kernel, header, body, kernels - 1)
        except csv.Error as e:
            raise InputError(source.path, f"bad CSV: {e}") from None
    if not kernels:
        raise InputError(source.path, "Nsight Compute CSV without a kernel block")
    profile = b.build()
    if not len(profile):
        raise InputError(source.path, "Nsight Compute CSV without warp stall samples")
    return profile


def _csv_block(stacks: GpuStacks, kernel: str, header: list[str], body, index: int) -> None:
    col = {name.strip(): i for i, name in enumerate(header)}
    reasons = [
        (i, name.removeprefix("stall_"))
        for name, i in col.items()
        if name.startswith("stall_") and "(Not Issued)" not in name
    ]
    total = next((col[c] for c in _TOTAL_COLUMNS if c in col), None)
    if not reasons and total is None:
        raise InputError(
            "ncu", f"kernel {kernel}: no warp stall sampling columns (Source Counters)"
        )
    k = stacks.kernel(kernel)
    labels_of = {r: stacks.labels(r, {"launch": str(index)}) for _, r in reasons}
    plain = stacks.labels(None, {"launch": str(index)})
    b = stacks.b
    if "Address" in col:
        addr, text = col["Address"], col.get("Source", -1)
        start = None
        for row in body:
            if len(row) <= addr or not row[addr].startswith("0x"):
                continue
            pc = int(row[addr], 16)
            start = pc if start is None else start
            sid = stacks.instruction(k, row[text].strip() if text >= 0 else "", pc - start)
            _add_row(b, stacks, sid, row, reasons, labels_of, total, plain)
    elif "#" in col:
        line_col, file = col["#"], ""
        for row in body:
            if row and row[0] == "File Name":
                file = row[1] if len(row) > 1 else ""
                continue
            if len(row) <= line_col or not row[line_col].strip().isdigit():
                continue
            sid = stacks.lines(k, [(file or "?", int(row[line_col]))])
            _add_row(b, stacks, sid, row, reasons, labels_of, total, plain)


def _add_row(b, stacks, sid, row, reasons, labels_of, total, plain) -> None:
    if reasons:
        for i, reason in reasons:
            v = _number(row[i]) if i < len(row) else 0.0
            if v:
                b.add(stacks.stall(sid, reason), v, labels_of[reason])
    elif total is not None and total < len(row) and _number(row[total]):
        b.add(sid, _number(row[total]), plain)
