"""Building ``kernel ; source line(s) ; instruction ; stall`` stacks for GPU PC samples.

Shared by the importers whose samples are (kernel, PC offset, reason, count) rows: CUPTI
dumps, Nsight Compute reports and exports, the collector's recordings. Frames are
interned once per distinct value, stacks once per distinct path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aiflame.model import FrameKind, ProfileBuilder, gpu
from aiflame.model.stacks import EMPTY_STACK


class GpuStacks:
    def __init__(self, builder: ProfileBuilder) -> None:
        self.b = builder
        self._frames: dict[tuple, int] = {}
        self._labels: dict[tuple, int] = {}

    def _frame(self, key: tuple, *args: object, **kw: object) -> int:
        f = self._frames.get(key)
        if f is None:
            f = self._frames[key] = self.b.frame(*args, **kw)  # type: ignore[arg-type]
        return f

    def kernel(self, name: str, parent: int = EMPTY_STACK) -> int:
        f = self._frame(("k", name), name, FrameKind.GPU_KERNEL)
        return self.b.stacks.intern((f,), parent)

    def lines(self, sid: int, lines: Sequence[tuple[str, int]]) -> int:
        """One ``gpu-source`` frame per inline level, outermost first."""
        for file, line in lines:
            name = gpu.source_line_name(file, line)
            f = self._frame(("s", file, line), name, FrameKind.GPU_SOURCE, file, line)
            sid = self.b.stacks.intern((f,), sid)
        return sid

    def loop(self, sid: int, file: str, line: int) -> int:
        """A loop of the kernel (HPCToolkit's structure knows them): ``loop at f.cu:21``."""
        name = "loop at " + gpu.source_line_name(file, line)
        f = self._frame(("l", file, line), name, FrameKind.GPU_SOURCE, file, line)
        return self.b.stacks.intern((f,), sid)

    def instruction(self, sid: int, text: str, offset: int, module: str = "") -> int:
        name = gpu.instruction_name(text, offset)
        key = ("i", name, module, offset)
        f = self._frame(key, name, FrameKind.GPU_INSTRUCTION, module=module, address=offset)
        return self.b.stacks.intern((f,), sid)

    def stall(self, sid: int, reason: str) -> int:
        f = self._frame(("r", reason), reason, FrameKind.GPU_STALL)
        return self.b.stacks.intern((f,), sid)

    def labels(self, reason: str | None, extra: Mapping[str, str] | None = None) -> int:
        key = (reason, tuple(sorted(extra.items())) if extra else ())
        i = self._labels.get(key)
        if i is None:
            lab = dict(extra or {})
            if reason:
                lab[gpu.STALL_LABEL] = reason
                lab[gpu.STALL_CLASS_LABEL] = gpu.stall_class(reason)
            i = self._labels[key] = self.b.labels(lab)
        return i
