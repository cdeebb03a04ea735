"""iaprof (Intel's AI flame graph profiler: EU stall sampling on PVC / Xe2 GPUs) output.

Two families of files, as iaprof's sources write them:

* folded stacks: ``comm;pid;CPU frames;-;gpu file_[G];kernel_[G];insn_[g];stall_[g];0xOFF_[g]``
  with the count after a space (``scripts/iaprof_to_stack_collapse.sh``) or after a ``;``
  (``iaprof flame``); ``_[G]`` marks kernel-level GPU frames, ``_[g]`` instruction-level ones;
* the tab-separated record stream (``iaprof record``): ``string ID TEXT`` definitions, then
  ``kernel`` lines (process, pid, CPU stack, GPU file, kernel symbol) each followed by its
  ``eustall`` lines (offset, instruction, ten counts: active, control, pipestall, send,
  dist_acc, sbid, sync, inst_fetch, other, tdr), or, in the older stream, ``e`` lines naming
  a whole folded stack by string id with a count.

Each becomes ``comm (pid) ; CPU frames ; - ; kernel ; instruction @ +0xOFF ; stall`` with
``gpu-samples`` counts and the stall labels.
"""

from __future__ import annotations

import math

from aiflame.errors import InputError
from aiflame.model import FrameKind, Profile, ProfileBuilder, gpu
from aiflame.model.stacks import EMPTY_STACK
from aiflame.sources.gpu_samples.stacks import GpuStacks
from aiflame.sources.inputs import Input, decode_head
from aiflame.symbolize.kinds import DELIMITER, KindGuesser

FORMAT = "iaprof"

STALL_TYPES = (
    "active",
    "control",
    "pipestall",
    "send",
    "dist_acc",
    "sbid",
    "sync",
    "inst_fetch",
    "other",
    "tdr",
)
_GPU_KERNEL_LEVEL = "_[G]"
_GPU_INSN_LEVEL = "_[g]"
_UNKNOWN_FILES = ("", "unknown_file", "[unknown file]", "[unknown]", "<unknown>")


def sniff(head: bytes, path: str) -> bool:
    text = decode_head(head[:65536])
    if "_[G];" in text and "_[g]" in text:
        return True
    lines = text.splitlines()[:50]
    tags = {line.split("\t", 1)[0] for line in lines if "\t" in line}
    return "string" in tags and bool(tags & {"kernel", "eustall", "e", "interval_start"})


def load(source: Input, **_: object) -> Profile:
    text = source.read_text()
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    importer = _Importer()
    if first.startswith("string\t") or "\t" in first.split(";", 1)[0]:
        importer.tsv(text, source.path)
    else:
        importer.folded(text, source.path)
    profile = importer.b.build()
    if not len(profile):
        raise InputError(source.path, "iaprof output without EU stall samples")
    return profile


class _Importer:
    def __init__(self) -> None:
        self.b = ProfileBuilder([gpu.GPU_SAMPLES])
        self.stacks = GpuStacks(self.b)
        self.kind = KindGuesser()
        self._cpu: dict[tuple[str, ...], int] = {}

    # -- stacks -------------------------------------------------------------------------
    def cpu_stack(self, comm: str, pid: str, frames: list[str]) -> int:
        key = (comm, pid, *frames)
        sid = self._cpu.get(key)
        if sid is None:
            b = self.b
            sid = EMPTY_STACK
            if comm or pid:
                root = f"{comm} ({pid})" if pid else comm
                sid = b.stacks.intern((b.frame(root, FrameKind.LABEL),), sid)
            for name in frames:
                kind = self.kind(name)
                if name.endswith("_[k]"):
                    name = name[:-4]
                sid = b.stacks.intern((b.frame(name, kind),), sid)
            sid = b.stacks.intern((b.frame(DELIMITER, FrameKind.DELIMITER),), sid)
            self._cpu[key] = sid
        return sid

    def add(
        self, cpu: int, file: str, symbol: str, insn: str, offset: int, stall: str, count: float
    ) -> None:
        st = self.stacks
        kernel = self.b.frame(
            symbol or "[unknown kernel]",
            FrameKind.GPU_KERNEL,
            file="" if file in _UNKNOWN_FILES else file,
        )
        sid = self.b.stacks.intern((kernel,), cpu)
        sid = st.instruction(sid, "" if insn == "[failed decode]" else insn, offset)
        sid = st.stall(sid, stall)
        self.b.add(sid, count, st.labels(stall))

    # -- folded -------------------------------------------------------------------------
    def folded(self, text: str, path: str) -> None:
        for n, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            stack, count = _split_count(line)
            if count is None:
                raise InputError(path, f"line {n}: no sample count at the end")
            self.folded_stack(stack, count, path, n)

    def folded_stack(self, stack: str, count: float, path: str, n: int) -> None:
        parts = stack.split(";")
        try:
            cut = parts.index(DELIMITER)
        except ValueError:
            raise InputError(path, f"line {n}: no '-' between CPU and GPU frames") from None
        cpu, gpu_part = parts[:cut], parts[cut + 1 :]
        kernel_level = [p[:-4] for p in gpu_part if p.endswith(_GPU_KERNEL_LEVEL)]
        insn_level = [p[:-4] for p in gpu_part if p.endswith(_GPU_INSN_LEVEL)]
        if len(insn_level) < 3:
            raise InputError(path, f"line {n}: expected instruction, stall and offset _[g] frames")
        insn, stall, off = insn_level[-3:]
        try:
            offset = int(off, 16)
        except ValueError:
            raise InputError(path, f"line {n}: bad instruction offset {off!r}") from None
        file, symbol = (
            ("", kernel_level[0]) if len(kernel_level) == 1 else (kernel_level[-2:] or ["", ""])
        )
        comm = cpu[0] if cpu else ""
        pid = cpu[1] if len(cpu) > 1 and cpu[1].isdigit() else ""
        frames = [f for f in cpu[2 if pid else 1 :] if f]
        self.add(self.cpu_stack(comm, pid, frames), file, symbol, insn, offset, stall, count)

    # -- tab-separated stream -----------------------------------------------------------
    def tsv(self, text: str, path: str) -> None:
        strings: dict[str, str] = {}
        kernel: tuple[int, str, str] | None = None
        for n, raw in enumerate(text.splitlines(), 1):
            f = raw.rstrip("\r\n").split("\t")
            tag = f[0]
            try:
                if tag == "string" and len(f) >= 3:
                    strings[f[1]] = "\t".join(f[2:])
                elif tag == "kernel" and len(f) >= 7:
                    cpu_frames = [x for x in strings.get(f[4], "").split(";") if x]
                    cpu = self.cpu_stack(strings.get(f[2], ""), f[3], cpu_frames)
                    kernel = (cpu, strings.get(f[5], ""), strings.get(f[6], ""))
                elif tag == "eustall" and len(f) >= 3 + len(STALL_TYPES):
                    if kernel is None:
                        raise InputError(path, f"line {n}: eustall before any kernel line")
                    offset = _number(f[1], 16, "instruction offset")
                    insn = strings.get(f[2], "")
                    for stall, value in zip(STALL_TYPES, f[3 : 3 + len(STALL_TYPES)], strict=True):
                        count = _number(value, 10, f"{stall} count")
                        if count > 0:
                            self.add(kernel[0], kernel[1], kernel[2], insn, offset, stall, count)
                elif tag == "e" and len(f) >= 5:
                    stack = strings.get(f[1])
                    if stack is None:
                        raise InputError(path, f"line {n}: stack string {f[1]} is not defined")
                    self.folded_stack(stack, _count(f[4]), path, n)
            except _BadField as e:
                raise InputError(path, f"line {n}: {e}") from None


class _BadField(ValueError):
    """A field of a line that is not what it should be (the message names it)."""


def _number(text: str, base: int, what: str) -> int:
    try:
        return int(text, base)
    except ValueError:
        kind = "a hexadecimal number" if base == 16 else "a whole number"
        raise _BadField(f"{what} {text[:40]!r} is not {kind}") from None


def _count(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise _BadField(f"sample count {text[:40]!r} is not a number")
    return value


def _split_count(line: str) -> tuple[str, float | None]:
    """``stack COUNT`` or ``stack;COUNT`` (iaprof flame puts the count after a ``;``)."""
    for sep in (" ", ";"):
        head, _, tail = line.rpartition(sep)
        if head:
            try:
                return head, float(tail)
            except ValueError:
                continue
    return line, None
