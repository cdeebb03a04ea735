"""perf_event_open(2) through ctypes: the timer events BPF sampling programs hang on."""

from __future__ import annotations

import ctypes
import os
import platform
import struct

from aiflame.collectors.ebpf.libbpf import BpfError

_SYSCALL = {"x86_64": 298, "aarch64": 241}
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_CPU_CLOCK = 0
PERF_FLAG_FD_CLOEXEC = 1 << 3
_ATTR_SIZE = 128  # PERF_ATTR_SIZE_VER7: every field we set is in the first 48 bytes
_FLAG_FREQ = 1 << 10  # sample_freq instead of sample_period

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


def online_cpus(text: str | None = None) -> list[int]:
    """CPU numbers from ``/sys/devices/system/cpu/online`` (``0-3,6``)."""
    if text is None:
        try:
            with open("/sys/devices/system/cpu/online") as f:
                text = f.read()
        except OSError:
            return list(range(os.cpu_count() or 1))
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def cpu_clock_attr(freq_hz: int) -> bytes:
    """perf_event_attr of a CPU-clock timer firing ``freq_hz`` times per CPU-second."""
    head = struct.pack(
        "<IIQQQQQ",
        PERF_TYPE_SOFTWARE,
        _ATTR_SIZE,
        PERF_COUNT_SW_CPU_CLOCK,
        freq_hz,  # sample_freq (the union with sample_period)
        0,  # sample_type: the BPF program reads what it needs itself
        0,  # read_format
        _FLAG_FREQ,
    )
    return head.ljust(_ATTR_SIZE, b"\0")


_PERF_EVENT_IOC_PERIOD = 0x40082404  # _IOW('$', 4, __u64)


def set_period(fd: int, period_ns: int) -> None:
    """A CPU-clock timer's next period (and every one after it), in nanoseconds; its
    current period restarts from now."""
    import fcntl

    fcntl.ioctl(fd, _PERF_EVENT_IOC_PERIOD, struct.pack("<Q", period_ns))


def perf_event_open(attr: bytes, pid: int = -1, cpu: int = -1, group_fd: int = -1) -> int:
    number = _SYSCALL.get(platform.machine())
    if number is None:
        raise BpfError(f"perf_event_open: unsupported machine {platform.machine()}")
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = _syscall(
        ctypes.c_long(number),
        buf,
        ctypes.c_int(pid),
        ctypes.c_int(cpu),
        ctypes.c_int(group_fd),
        ctypes.c_ulong(PERF_FLAG_FD_CLOEXEC),
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise BpfError(f"perf_event_open (cpu {cpu}, pid {pid}): {os.strerror(err)}")
    return int(fd)
