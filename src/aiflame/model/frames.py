"""Frames (one function / kernel / source line / instruction) and their kinds."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from aiflame.model.strings import StringTable


class FrameKind(IntEnum):
    """What a frame is; drives the colour and meaning in every view.

    The values are stable: they are written into pprof files and HTML pages.
    """

    UNKNOWN = 0
    PYTHON = 1
    NATIVE = 2  # C and other native code without C++ names
    CPP = 3  # C++ functions and framework operators (aten::mm)
    KERNEL = 4  # the Linux kernel
    RUNTIME = 5  # CUDA / HIP runtime and driver API
    DELIMITER = 6  # the `-` frame between CPU and GPU parts of a stack
    GPU_KERNEL = 7
    GPU_SOURCE = 8  # a source line inside a GPU kernel
    GPU_INSTRUCTION = 9
    JIT = 10  # JIT-compiled code (oneDNN, Java, perf maps)
    LABEL = 11  # synthetic frames: group-by roots such as `rank 0`, `[launch not in trace]`
    GPU_STALL = 12  # the stall reason of GPU PC samples (leaf above an instruction)

    @property
    def slug(self) -> str:
        """The lowercase, dash-separated name used in files and on the command line."""
        return self.name.lower().replace("_", "-")

    @classmethod
    def from_slug(cls, slug: str) -> FrameKind:
        try:
            return cls[slug.upper().replace("-", "_")]
        except KeyError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class Frame:
    """A frame as sources describe it; stored interned in a :class:`FrameTable`."""

    name: str
    kind: FrameKind = FrameKind.UNKNOWN
    file: str = ""
    line: int = 0
    module: str = ""
    address: int = 0


MAX_LINE = 2**31 - 1
MAX_ADDRESS = 2**64 - 1


class FrameTable:
    """Interned frames stored as columns of string indices."""

    __slots__ = ("_index", "address", "file", "kind", "line", "module", "name", "strings")

    def __init__(self, strings: StringTable) -> None:
        self.strings = strings
        self.name: list[int] = []
        self.kind: list[int] = []
        self.file: list[int] = []
        self.line: list[int] = []
        self.module: list[int] = []
        self.address: list[int] = []
        self._index: dict[tuple[int, int, int, int, int, int], int] = {}

    def intern(
        self,
        name: str,
        kind: FrameKind | int = FrameKind.UNKNOWN,
        file: str = "",
        line: int = 0,
        module: str = "",
        address: int = 0,
    ) -> int:
        """Return the id of the frame with exactly these attributes, adding it if new.

        A line outside 0..2**31-1 or an address outside 0..2**64-1 (a corrupt input) is
        kept as unknown (0): every table, page and output format can hold what is left."""
        if not 0 <= line <= MAX_LINE:
            line = 0
        if not 0 <= address <= MAX_ADDRESS:
            address = 0
        s = self.strings.intern
        key = (
            s(name),
            int(kind),
            s(file) if file else 0,
            line,
            s(module) if module else 0,
            address,
        )
        i = self._index.get(key)
        if i is None:
            i = len(self.name)
            self._index[key] = i
            self.name.append(key[0])
            self.kind.append(key[1])
            self.file.append(key[2])
            self.line.append(line)
            self.module.append(key[4])
            self.address.append(address)
        return i

    def intern_frame(self, frame: Frame) -> int:
        return self.intern(
            frame.name, frame.kind, frame.file, frame.line, frame.module, frame.address
        )

    def get(self, i: int) -> Frame:
        st = self.strings.strings
        return Frame(
            st[self.name[i]],
            FrameKind(self.kind[i]),
            st[self.file[i]],
            self.line[i],
            st[self.module[i]],
            self.address[i],
        )

    def name_of(self, i: int) -> str:
        return self.strings.strings[self.name[i]]

    def __len__(self) -> int:
        return len(self.name)
