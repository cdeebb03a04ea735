"""Decoding the ``.dat`` files of CUPTI's PC Sampling Utility (``CuptiUtilPutPcSampData``).

The file is a ``Header`` (u32 version, u32 number of buffers), then per buffer a
``BufferInfo`` (u64 record count, number of stall reasons, number of selected reasons, byte
size) and that many bytes: a FlatBuffer (file identifier ``CUPS``) mirroring
``CUpti_PCSamplingData``. The field numbers below were read off files that NVIDIA's
library writes (``tests/unit/test_gpu_cupti_dump.py`` writes them with it and reads them
back here). Only FlatBuffers' wire rules are used: tables with a vtable of u16 field
offsets, u32 offsets to vectors and strings, little endian.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

FILE_IDENTIFIER = b"CUPS"
_HEADER = struct.Struct("<II")
_BUFFER_INFO = struct.Struct("<QQQQ")

# CUpti_PCSamplingData as a table
ROOT_CONFIG, ROOT_TOTAL_SAMPLES, ROOT_DROPPED = 0, 3, 4
ROOT_RANGE_ID, ROOT_PCS, ROOT_NON_USER_SAMPLES = 7, 8, 9
# the configuration table (root field 0, then its field 5)
CONFIG_WRAPPED = 5
CFG_PERIOD, CFG_SELECTED, CFG_MODE, CFG_REASON_INDEX, CFG_REASON_NAMES = 0, 1, 4, 7, 8
# CUpti_PCSamplingPCData as a table
PC_CRC, PC_OFFSET, PC_FUNCTION_NAME, PC_FUNCTION_INDEX, PC_STALLS, PC_CORRELATION = (
    1,
    2,
    4,
    5,
    6,
    7,
)


class DumpError(ValueError):
    """The bytes are not a PC Sampling Utility file (or it is cut short)."""


@dataclass
class PcRecord:
    cubin_crc: int
    pc_offset: int
    function_name: str
    function_index: int
    correlation_id: int
    stalls: list[tuple[int, int]]  # (stall reason index, samples)


@dataclass
class Buffer:
    total_samples: int
    dropped_samples: int
    non_user_samples: int
    range_id: int
    sampling_period: int | None  # the exponent: 2**period cycles
    collection_mode: int | None
    reason_names: dict[int, str]  # stall reason index -> name (first buffer has them)
    records: list[PcRecord] = field(default_factory=list)


class _Table:
    """A FlatBuffers table: scalar fields by number, with defaults for absent ones."""

    __slots__ = ("buf", "fields", "pos")

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = buf
        self.pos = pos
        (soff,) = struct.unpack_from("<i", buf, pos)
        vt = pos - soff
        vlen, _ = struct.unpack_from("<HH", buf, vt)
        n = (vlen - 4) // 2
        self.fields = struct.unpack_from(f"<{n}H", buf, vt + 4) if n > 0 else ()

    def _at(self, i: int) -> int:
        return self.fields[i] if i < len(self.fields) else 0

    def scalar(self, i: int, fmt: str, default: int = 0) -> int:
        off = self._at(i)
        return struct.unpack_from("<" + fmt, self.buf, self.pos + off)[0] if off else default

    def has(self, i: int) -> bool:
        return self._at(i) != 0

    def _target(self, i: int) -> int:
        at = self.pos + self._at(i)
        return at + struct.unpack_from("<I", self.buf, at)[0]

    def table(self, i: int) -> _Table | None:
        return _Table(self.buf, self._target(i)) if self.has(i) else None

    def string(self, i: int) -> str:
        if not self.has(i):
            return ""
        at = self._target(i)
        (n,) = struct.unpack_from("<I", self.buf, at)
        return self.buf[at + 4 : at + 4 + n].decode("utf-8", "replace")

    def vector(self, i: int) -> tuple[int, int]:
        """(position of the first element, length) of a vector field."""
        if not self.has(i):
            return 0, 0
        at = self._target(i)
        return at + 4, struct.unpack_from("<I", self.buf, at)[0]

    def tables(self, i: int) -> list[_Table]:
        start, n = self.vector(i)
        out = []
        for k in range(n):
            e = start + 4 * k
            out.append(_Table(self.buf, e + struct.unpack_from("<I", self.buf, e)[0]))
        return out

    def strings(self, i: int) -> list[str]:
        start, n = self.vector(i)
        out = []
        for k in range(n):
            e = start + 4 * k
            s = e + struct.unpack_from("<I", self.buf, e)[0]
            (m,) = struct.unpack_from("<I", self.buf, s)
            out.append(self.buf[s + 4 : s + 4 + m].decode("utf-8", "replace"))
        return out

    def u32s(self, i: int) -> list[int]:
        start, n = self.vector(i)
        return list(struct.unpack_from(f"<{n}I", self.buf, start)) if n else []


def is_dump(head: bytes) -> bool:
    """Header, BufferInfo, then a FlatBuffer whose identifier is ``CUPS``."""
    if len(head) < 48 or head[44:48] != FILE_IDENTIFIER:
        return False
    version, buffers = _HEADER.unpack_from(head, 0)
    return 0 < version < 100 and buffers > 0


def read_dump(data: bytes) -> list[Buffer]:
    try:
        return _read(data)
    except (struct.error, IndexError):
        raise DumpError(
            "truncated or corrupt PC sampling file (a record runs past the end of the data)"
        ) from None


def _read(data: bytes) -> list[Buffer]:
    if len(data) < _HEADER.size:
        raise DumpError("too short for a PC sampling file")
    _, nbuffers = _HEADER.unpack_from(data, 0)
    pos = _HEADER.size
    out: list[Buffer] = []
    names: dict[int, str] = {}
    for _ in range(nbuffers):
        if pos == len(data):
            break  # the header counts a buffer whose write did not finish
        count, _nreasons, _nselected, size = _BUFFER_INFO.unpack_from(data, pos)
        pos += _BUFFER_INFO.size
        buf = data[pos : pos + size]
        if len(buf) < size or buf[4:8] != FILE_IDENTIFIER:
            raise DumpError(f"buffer at byte {pos} is cut short or not a CUPTI buffer")
        pos += size
        root = _Table(buf, struct.unpack_from("<I", buf, 0)[0])
        period = mode = None
        outer = root.table(ROOT_CONFIG)
        cfg = outer.table(CONFIG_WRAPPED) if outer is not None else None
        if cfg is not None:
            if cfg.has(CFG_PERIOD):
                period = cfg.scalar(CFG_PERIOD, "I")
            if cfg.has(CFG_MODE):
                mode = cfg.scalar(CFG_MODE, "B")
            reason_names = cfg.strings(CFG_REASON_NAMES)
            reason_index = cfg.u32s(CFG_REASON_INDEX)
            names.update(zip(reason_index, reason_names, strict=False))
        b = Buffer(
            total_samples=root.scalar(ROOT_TOTAL_SAMPLES, "Q"),
            dropped_samples=root.scalar(ROOT_DROPPED, "Q"),
            non_user_samples=root.scalar(ROOT_NON_USER_SAMPLES, "Q"),
            range_id=root.scalar(ROOT_RANGE_ID, "Q"),
            sampling_period=period,
            collection_mode=mode,
            reason_names=names,
        )
        for t in root.tables(ROOT_PCS):
            start, n = t.vector(PC_STALLS)
            flat = struct.unpack_from(f"<{2 * n}I", buf, start) if n else ()
            b.records.append(
                PcRecord(
                    cubin_crc=t.scalar(PC_CRC, "Q"),
                    pc_offset=t.scalar(PC_OFFSET, "Q"),
                    function_name=t.string(PC_FUNCTION_NAME),
                    function_index=t.scalar(PC_FUNCTION_INDEX, "I"),
                    correlation_id=t.scalar(PC_CORRELATION, "I"),
                    stalls=list(zip(flat[0::2], flat[1::2], strict=True)),
                )
            )
        if len(b.records) != count:
            raise DumpError(f"buffer says {count} PC records, holds {len(b.records)}")
        out.append(b)
    return out
