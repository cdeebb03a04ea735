"""Records of ``bpf/cuda.bpf.c`` decoded, with memory bounded on long recordings.

Each ring-buffer record is a fixed header (``struct call``) followed by a payload: the
user stack (return addresses, innermost first) of a call, or the kernel name of a naming
call. :class:`EventLog` is the ring buffer's callback. Launches, copies and syncs, which
can come by the million, are summed on arrival by (pid, tid, function, stack, kernel or
direction, error); allocations and frees are kept one by one, since pairing them needs
each address and time.

Stacks taken at a function's entry start at the function itself (skipped in BPF) and,
on kernels before 6.11, lack the caller's frame (the return address is still on the stack,
not yet in a frame); the caller's address, read at entry, is put back in front when it is
missing. Stacks taken at return start at the call site already.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from aiflame.collectors.ebpf.cuda_apis import (
    ALIAS,
    ALLOC,
    APIS,
    COPY,
    COPY_KINDS,
    FREE,
    LAUNCH,
    Api,
)

HEADER = np.dtype(
    [
        ("ts", "<u8"),
        ("duration", "<u8"),
        ("args", "<u8", (7,)),
        ("caller", "<u8"),
        ("result", "<u8"),
        ("ret", "<i8"),
        ("pid", "<u4"),
        ("tid", "<u4"),
        ("api", "<u2"),
        ("type", "u1"),
        ("flags", "u1"),
        ("payload", "<u4"),
    ]
)
_HDR = struct.Struct("<QQ7QQQqIIHBBI")
assert _HDR.size == HEADER.itemsize == 112

EV_CALL, EV_NAME, EV_STACK = 0, 1, 2
F_RETURNED, F_NAME_FAULT = 1, 2

# Memory events: the header plus the interned stack id, as columns.
MEMORY = np.dtype([*HEADER.descr, ("stack", "<i8")])


def call_size(api: Api, args: tuple[int, ...] | np.ndarray) -> int:
    """Bytes an allocation requests or a copy moves."""
    if api.size_arg < 0:
        return 0
    size = int(args[api.size_arg])
    if api.size_arg2 >= 0:
        size *= int(args[api.size_arg2])
    return size


def copy_direction(api: Api, args: tuple[int, ...] | np.ndarray) -> str:
    return kind_direction(api, int(args[api.kind_arg]) if api.kind_arg >= 0 else 0)


def kind_direction(api: Api, kind: int) -> str:
    """A copy's direction from its function, or from its cudaMemcpyKind argument."""
    if api.direction:
        return api.direction
    if api.kind_arg >= 0:
        return COPY_KINDS.get(kind, "unknown")
    return "default"  # cuMemcpy/cuMemcpyAsync: unified addressing, the driver decides


@dataclass(frozen=True, slots=True)
class CallKey:
    """What calls are summed by. ``target``: the kernel's host stub address (runtime
    launches), its name or "" (driver launches), the copy direction, or None."""

    pid: int
    tid: int
    api: int
    stack: int
    target: int | str | None
    error: int  # the call's return value when it failed (only known with a return probe)


@dataclass
class CallSum:
    calls: int = 0
    duration_ns: int = 0
    nbytes: int = 0
    ok: int = 0  # calls known to have succeeded


@dataclass
class EventLog:
    """Ring-buffer callback: decodes, interns stacks, sums or keeps each call."""

    stacks: list[tuple[int, ...]] = field(default_factory=list)  # innermost first
    calls: dict[CallKey, CallSum] = field(default_factory=dict)  # from events
    summed: dict[CallKey, CallSum] = field(default_factory=dict)  # read from the kernel
    names: dict[tuple[int, int], str] = field(default_factory=dict)  # (pid, handle) -> name
    records: int = 0
    name_faults: int = 0
    pids: set[int] = field(default_factory=set)
    first_ts: int = 0
    last_ts: int = 0

    # called with (pid, stack) for each new stack: its Python frames are named meanwhile
    on_new_stack: Callable[[int, tuple[int, ...]], None] | None = None

    def __post_init__(self) -> None:
        self._stack_ids: dict[bytes, int] = {}
        self._memory = bytearray()
        self._memory_stacks = array("q")
        self._aliases: dict[tuple[int, int], int] = {}  # (pid, function) -> kernel handle

    # -- the callback -----------------------------------------------------------------------
    def __call__(self, data: bytes) -> None:
        (ts, dur, a0, a1, a2, a3, a4, a5, a6, caller, result, ret, pid, tid, api_id, typ,
         flags, payload) = _HDR.unpack_from(data)  # fmt: skip
        self.records += 1
        if api_id >= len(APIS):
            return
        api = APIS[api_id]
        self.pids.add(pid)
        if not self.first_ts or ts < self.first_ts:
            self.first_ts = ts
        self.last_ts = max(self.last_ts, ts + dur)
        body = data[_HDR.size : _HDR.size + payload]
        if typ == EV_STACK:  # a summed call's new stack, announced for its Python frames
            self._stack_id(body, pid)
            return
        returned = bool(flags & F_RETURNED)
        failed = returned and ret != 0
        if typ == EV_NAME:
            if flags & F_NAME_FAULT:
                self.name_faults += 1
            if not failed and result and body:
                self._name(pid, result, body.split(b"\0", 1)[0].decode("utf-8", "replace"))
            return
        if api.role == ALIAS:
            if not failed and result:
                self._alias(pid, result, a1)
            return
        args = (a0, a1, a2, a3, a4, a5, a6)
        if not returned and caller and body[:8] != caller.to_bytes(8, "little"):
            body = caller.to_bytes(8, "little") + body  # the caller's frame, see above
        stack = self._stack_id(body, pid)
        if api.role in (ALLOC, FREE):
            self._memory += data[: _HDR.size]
            self._memory_stacks.append(stack)
        key = CallKey(pid, tid, api_id, stack, self._target(api, pid, args), ret if failed else 0)
        s = self.calls.get(key)
        if s is None:
            s = self.calls[key] = CallSum()
        s.calls += 1
        s.duration_ns += dur
        s.nbytes += call_size(api, args)
        s.ok += 1 if returned and not failed else 0

    # -- helpers ----------------------------------------------------------------------------
    def add_sum(
        self,
        pid: int,
        tid: int,
        api_id: int,
        error: int,
        stack: tuple[int, ...],
        caller: int,
        target: int,
        sums: CallSum,
    ) -> None:
        """Calls summed in the kernel (``calls`` of the BPF program): ``stack`` innermost
        first, ``target`` the kernel handle/stub or the copy kind. The kernel's sums are
        totals so far: clear :attr:`summed` before reading them again."""
        if api_id >= len(APIS) or not sums.calls:
            return
        api = APIS[api_id]
        self.pids.add(pid)
        raw = struct.pack(f"<{len(stack)}Q", *stack)
        if not api.needs_return and caller and raw[:8] != caller.to_bytes(8, "little"):
            raw = caller.to_bytes(8, "little") + raw  # see the module docstring
        sid = self._stack_id(raw, pid)
        if api.role == LAUNCH:
            tgt: int | str | None = self.kernel_name(pid, target) if api.driver else target
        elif api.role == COPY:
            tgt = kind_direction(api, target)
        else:
            tgt = None
        _merge(self.summed, CallKey(pid, tid, api_id, sid, tgt, error), sums)

    def _stack_id(self, raw: bytes, pid: int) -> int:
        sid = self._stack_ids.get(raw)
        if sid is None:
            sid = self._stack_ids[raw] = len(self.stacks)
            n = len(raw) // 8
            self.stacks.append(struct.unpack(f"<{n}Q", raw[: n * 8]))
            if self.on_new_stack is not None:
                self.on_new_stack(pid, self.stacks[sid])
        return sid

    def _target(self, api: Api, pid: int, args: tuple[int, ...]) -> int | str | None:
        if api.role == LAUNCH:
            func = args[api.func_arg]
            return self.kernel_name(pid, func) if api.driver else func
        if api.role == COPY:
            return copy_direction(api, args)
        return None

    def _name(self, pid: int, handle: int, name: str) -> None:
        self.names[(pid, handle)] = name
        for (p, function), kernel in list(self._aliases.items()):
            if p == pid and kernel == handle:
                self.names[(pid, function)] = name

    def _alias(self, pid: int, function: int, kernel: int) -> None:
        self._aliases[(pid, function)] = kernel
        name = self.names.get((pid, kernel))
        if name is not None:
            self.names[(pid, function)] = name

    def kernel_name(self, pid: int, handle: int) -> str:
        """The name recorded for a driver function handle, or "" when none was seen."""
        return self.names.get((pid, handle), "")

    # -- results ----------------------------------------------------------------------------
    def memory_events(self) -> np.ndarray:
        """Allocations and frees in arrival order, as a structured array (:data:`MEMORY`)."""
        n = len(self._memory_stacks)
        out = np.zeros(n, dtype=MEMORY)
        if n:
            head = np.frombuffer(bytes(self._memory), dtype=HEADER)
            for name in HEADER.names or ():
                out[name] = head[name]
            out["stack"] = np.frombuffer(self._memory_stacks, dtype=np.int64)
        return out

    def take_calls(self) -> dict[CallKey, CallSum]:
        """:meth:`all_calls`, then forget them (a continuous profiler's period)."""
        out = self.all_calls()
        self.calls.clear()
        self.summed.clear()
        return out

    def take_memory_events(self) -> np.ndarray:
        """:meth:`memory_events`, then forget them."""
        out = self.memory_events()
        self._memory = bytearray()
        self._memory_stacks = array("q")
        return out

    def all_calls(self) -> dict[CallKey, CallSum]:
        """Calls from events and from the kernel's sums, together."""
        out = {k: CallSum(s.calls, s.duration_ns, s.nbytes, s.ok) for k, s in self.calls.items()}
        for k, s in self.summed.items():
            _merge(out, k, s)
        return out

    def count(self, roles: set[str]) -> int:
        """Calls of the given roles that were recorded."""
        return sum(s.calls for k, s in self.all_calls().items() if APIS[k.api].role in roles)


def _merge(into: dict[CallKey, CallSum], key: CallKey, s: CallSum) -> None:
    t = into.get(key)
    if t is None:
        into[key] = CallSum(s.calls, s.duration_ns, s.nbytes, s.ok)
        return
    t.calls += s.calls
    t.duration_ns += s.duration_ns
    t.nbytes += s.nbytes
    t.ok += s.ok
