"""A small ctypes binding to the system's ``libbpf.so.1`` (Debian/Ubuntu package ``libbpf1``).

Only what aiflame's collectors need; no compiler or kernel headers at run time. API::

    from aiflame.collectors.ebpf.libbpf import BpfObject, BpfError

    with BpfObject(data, name="profile") as obj:       # bytes of a compiled .bpf.o
        obj.set_rodata(target_tgid=1234, flags=b"...")  # `const volatile` globals, before load
        obj.set_max_entries("counts", 65536)            # map sizes, before load
        obj.load()                                      # BpfError with the verifier's tail
        obj.attach_perf_event("on_sample", perf_fd)     # the link owns (and closes) the fd
        obj.attach_uprobe("on_malloc", "/usr/lib/libc.so.6", symbol="malloc", pid=1234)
        obj.attach_uprobe("on_ret", path, offset=0x1a2b, retprobe=True)
        obj.attach_uprobe_multi("on_call", path, offsets, cookies, pid=1234)  # kernel 6.6+,
        #   after obj.set_expected_attach_type("on_call", BPF_TRACE_UPROBE_MULTI) before load
        obj.attach_raw_tracepoint("on_fork", "sched_process_fork")  # no tracefs needed
        obj.attach_tracepoint("on_x", "sched", "sched_switch")  # needs tracefs mounted
        m = obj.map("counts")                           # a :class:`Map`
        m.lookup(key), m.update(key, value), m.delete(key), m.keys(), m.items()
        m.lookup_percpu(key) -> list[bytes]             # per-CPU maps: one value per CPU
        m.take_all() -> list[(key, value)]              # read and delete every entry
        rb = obj.ring_buffer("events", callback)        # callback(data: bytes) per record
        rb.poll(timeout_ms=100)                         # -> records consumed
    # leaving the block (or obj.close()) destroys every link, ring buffer and the object

Keys and values are ``bytes`` of the map's exact key/value size (pack them with
:mod:`struct` or ctypes structures). Every failing call raises :class:`BpfError` naming the
call and the errno; libbpf's own log lines (warnings, verifier output) are kept in
``obj.log`` instead of going to stderr.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import struct
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from aiflame.errors import AiflameError

LIBRARY = "libbpf.so.1"
_BTF_KIND_VAR = 14
_BTF_KIND_DATASEC = 15
_LOG_LINES = 400


class BpfError(AiflameError):
    """libbpf or the kernel refused something (load, attach, map access)."""


c_void_p, c_int, c_char_p, c_size_t, c_uint32 = (
    ctypes.c_void_p,
    ctypes.c_int,
    ctypes.c_char_p,
    ctypes.c_size_t,
    ctypes.c_uint32,
)

_PRINT_FN = ctypes.CFUNCTYPE(c_int, c_int, c_char_p, c_void_p)
_SAMPLE_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t)


class _OpenOpts(ctypes.Structure):
    # struct bpf_object_open_opts, up to object_name; libbpf accepts a shorter `sz`.
    _fields_ = (("sz", c_size_t), ("object_name", c_char_p))


class _UprobeOpts(ctypes.Structure):
    # struct bpf_uprobe_opts of libbpf 1.1 (func_name since 0.8)
    _fields_ = (
        ("sz", c_size_t),
        ("ref_ctr_offset", c_size_t),
        ("bpf_cookie", ctypes.c_uint64),
        ("retprobe", ctypes.c_bool),
        ("func_name", c_char_p),
    )


_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "libbpf_set_print": (c_void_p, [_PRINT_FN]),
    "libbpf_num_possible_cpus": (c_int, []),
    "bpf_object__open_mem": (c_void_p, [c_void_p, c_size_t, ctypes.POINTER(_OpenOpts)]),
    "bpf_object__load": (c_int, [c_void_p]),
    "bpf_object__close": (None, [c_void_p]),
    "bpf_object__btf": (c_void_p, [c_void_p]),
    "bpf_object__find_program_by_name": (c_void_p, [c_void_p, c_char_p]),
    "bpf_program__set_autoload": (c_int, [c_void_p, ctypes.c_bool]),
    "bpf_object__find_map_by_name": (c_void_p, [c_void_p, c_char_p]),
    "bpf_object__next_map": (c_void_p, [c_void_p, c_void_p]),
    "bpf_map__name": (c_char_p, [c_void_p]),
    "bpf_map__fd": (c_int, [c_void_p]),
    "bpf_map__is_internal": (ctypes.c_bool, [c_void_p]),
    "bpf_map__initial_value": (c_void_p, [c_void_p, ctypes.POINTER(c_size_t)]),
    "bpf_map__key_size": (c_uint32, [c_void_p]),
    "bpf_map__value_size": (c_uint32, [c_void_p]),
    "bpf_map__max_entries": (c_uint32, [c_void_p]),
    "bpf_map__set_max_entries": (c_int, [c_void_p, c_uint32]),
    "bpf_map__type": (c_int, [c_void_p]),
    "bpf_map_lookup_elem": (c_int, [c_int, c_void_p, c_void_p]),
    "bpf_map_update_elem": (c_int, [c_int, c_void_p, c_void_p, ctypes.c_uint64]),
    "bpf_map_delete_elem": (c_int, [c_int, c_void_p]),
    "bpf_map_get_next_key": (c_int, [c_int, c_void_p, c_void_p]),
    "bpf_map_lookup_and_delete_elem": (c_int, [c_int, c_void_p, c_void_p]),
    "bpf_map_lookup_and_delete_batch": (
        c_int,
        [c_int, c_void_p, c_void_p, c_void_p, c_void_p, ctypes.POINTER(c_uint32), c_void_p],
    ),
    "bpf_program__attach_perf_event": (c_void_p, [c_void_p, c_int]),
    "bpf_program__attach_uprobe_opts": (
        c_void_p,
        [c_void_p, c_int, c_char_p, c_size_t, ctypes.POINTER(_UprobeOpts)],
    ),
    "bpf_program__attach_tracepoint": (c_void_p, [c_void_p, c_char_p, c_char_p]),
    "bpf_program__attach_raw_tracepoint": (c_void_p, [c_void_p, c_char_p]),
    "bpf_program__fd": (c_int, [c_void_p]),
    "bpf_program__set_expected_attach_type": (c_int, [c_void_p, c_int]),
    "bpf_link__destroy": (c_int, [c_void_p]),
    "btf__type_by_id": (c_void_p, [c_void_p, c_uint32]),
    "btf__find_by_name_kind": (ctypes.c_int32, [c_void_p, c_char_p, c_uint32]),
    "btf__name_by_offset": (c_char_p, [c_void_p, c_uint32]),
    "ring_buffer__new": (c_void_p, [c_int, _SAMPLE_FN, c_void_p, c_void_p]),
    "ring_buffer__add": (c_int, [c_void_p, c_int, _SAMPLE_FN, c_void_p]),
    "ring_buffer__poll": (c_int, [c_void_p, c_int]),
    "ring_buffer__consume": (c_int, [c_void_p]),
    "ring_buffer__free": (None, [c_void_p]),
}

# uprobe_multi links (kernel 6.6+): many uprobes of one file in one link, created with the
# bpf() syscall (libbpf 1.1 predates them); detaching them waits for one RCU grace period
# in all, where a link per uprobe waits for one each (about 0.1 s apiece on 6.12+).
BPF_TRACE_UPROBE_MULTI = 48  # enum bpf_attach_type
BPF_F_UPROBE_MULTI_RETURN = 1
_BPF_LINK_CREATE = 28
_BPF_SYSCALL = {"x86_64": 321, "aarch64": 280}

# Per-CPU map types: a lookup returns one value per possible CPU.
_PERCPU_TYPES = {5, 6, 10}  # PERCPU_HASH, PERCPU_ARRAY, LRU_PERCPU_HASH

_lib: ctypes.CDLL | None = None
_lib_error: str | None = None
_log: deque[str] = deque(maxlen=_LOG_LINES)
_lock = threading.Lock()


def _on_print(level: int, fmt: bytes | None, args: int | None) -> int:
    """libbpf's printer: format through the C library's vsnprintf into our log."""
    if fmt is None:
        return 0
    buf = ctypes.create_string_buffer(4096)
    try:
        _vsnprintf(buf, len(buf), fmt, args)
        _log.append(buf.value.decode("utf-8", "replace").rstrip("\n"))
    except Exception:  # never raise into C
        _log.append(fmt.decode("utf-8", "replace").rstrip("\n"))
    return 0


_print_cb = _PRINT_FN(_on_print)
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_vsnprintf = _libc.vsnprintf
_vsnprintf.restype = c_int
# va_list reaches the callback as a pointer on x86-64 and (by-reference copy) on AArch64.
_vsnprintf.argtypes = [c_char_p, c_size_t, c_char_p, c_void_p]


def library() -> ctypes.CDLL:
    """The loaded libbpf, or BpfError saying why it cannot be used."""
    global _lib, _lib_error
    with _lock:
        if _lib is None and _lib_error is None:
            try:
                lib = ctypes.CDLL(LIBRARY, use_errno=True)
                for name, (restype, argtypes) in _SIGNATURES.items():
                    fn = getattr(lib, name)
                    fn.restype, fn.argtypes = restype, argtypes
            except (OSError, AttributeError) as e:
                _lib_error = f"{LIBRARY} is missing or too old ({e}); install the libbpf1 package"
            else:
                if platform.machine() in ("x86_64", "aarch64"):
                    lib.libbpf_set_print(_print_cb)
                _lib = lib
        if _lib is None:
            raise BpfError(_lib_error or LIBRARY)
        return _lib


def _errno_text(code: int) -> str:
    code = abs(code)
    return f"{os.strerror(code)} (errno {code})" if code else "unknown error"


def _check_ptr(ptr: int | None, what: str) -> int:
    if not ptr:
        raise BpfError(f"{what}: {_errno_text(ctypes.get_errno())}")
    return ptr


def _check_rc(rc: int, what: str) -> None:
    if rc < 0:
        raise BpfError(f"{what}: {_errno_text(rc)}")


def possible_cpus() -> int:
    n = library().libbpf_num_possible_cpus()
    _check_rc(n, "libbpf_num_possible_cpus")
    return n


class Map:
    """One map of a loaded object; keys and values are bytes of the map's sizes."""

    def __init__(self, ptr: int, lib: ctypes.CDLL) -> None:
        self._lib = lib
        self.ptr = ptr
        self.name = (lib.bpf_map__name(ptr) or b"").decode()
        self.key_size = lib.bpf_map__key_size(ptr)
        self.value_size = lib.bpf_map__value_size(ptr)
        self.max_entries = lib.bpf_map__max_entries(ptr)
        self.percpu = lib.bpf_map__type(ptr) in _PERCPU_TYPES

    @property
    def fd(self) -> int:
        fd = self._lib.bpf_map__fd(self.ptr)
        _check_rc(fd, f"map {self.name}: not loaded")
        return fd

    def _key(self, key: bytes) -> ctypes.Array:
        if len(key) != self.key_size:
            raise BpfError(f"map {self.name}: key of {len(key)} bytes, expected {self.key_size}")
        return ctypes.create_string_buffer(key, self.key_size)

    def _raw_lookup(self, key: bytes, size: int) -> bytes | None:
        value = ctypes.create_string_buffer(size)
        rc = self._lib.bpf_map_lookup_elem(self.fd, self._key(key), value)
        if rc == -2:  # ENOENT
            return None
        _check_rc(rc, f"map {self.name}: lookup")
        return value.raw

    def lookup(self, key: bytes) -> bytes | None:
        if self.percpu:
            raise BpfError(f"map {self.name} is per-CPU: use lookup_percpu")
        return self._raw_lookup(key, self.value_size)

    def lookup_percpu(self, key: bytes) -> list[bytes] | None:
        stride = (self.value_size + 7) // 8 * 8
        raw = self._raw_lookup(key, stride * possible_cpus())
        if raw is None:
            return None
        return [raw[i : i + self.value_size] for i in range(0, len(raw), stride)]

    def update(self, key: bytes, value: bytes, flags: int = 0) -> None:
        if len(value) != self.value_size:
            raise BpfError(
                f"map {self.name}: value of {len(value)} bytes, expected {self.value_size}"
            )
        buf = ctypes.create_string_buffer(value, self.value_size)
        _check_rc(
            self._lib.bpf_map_update_elem(self.fd, self._key(key), buf, flags),
            f"map {self.name}: update",
        )

    def delete(self, key: bytes) -> bool:
        """Remove ``key``; False when it was not there."""
        rc = self._lib.bpf_map_delete_elem(self.fd, self._key(key))
        if rc == -2:
            return False
        _check_rc(rc, f"map {self.name}: delete")
        return True

    def keys(self) -> Iterator[bytes]:
        """Every key (a snapshot walk: entries added meanwhile may or may not show)."""
        fd = self.fd
        cur: ctypes.Array | None = None
        nxt = ctypes.create_string_buffer(self.key_size)
        while True:
            rc = self._lib.bpf_map_get_next_key(fd, cur, nxt)
            if rc == -2:
                return
            _check_rc(rc, f"map {self.name}: next key")
            key = nxt.raw
            yield key
            cur = ctypes.create_string_buffer(key, self.key_size)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        for key in list(self.keys()):
            value = self._raw_lookup(key, self.value_size) if not self.percpu else None
            if self.percpu:
                per_cpu = self.lookup_percpu(key)
                value = b"".join(per_cpu) if per_cpu is not None else None
            if value is not None:
                yield key, value

    def take_all(self, chunk: int = 1024) -> list[tuple[bytes, bytes]]:
        """Read and delete every entry of a hash map, while the BPF programs go on adding
        (a continuous profiler's cut): each entry is taken atomically, so a count is either
        in this answer or stays for the next. Batched (one system call per ``chunk``
        entries, Linux 5.6+); entry by entry where the kernel refuses batches."""
        if self.percpu:
            raise BpfError(f"map {self.name} is per-CPU: take_all reads plain values")
        out: list[tuple[bytes, bytes]] = []
        if not self._take_batched(chunk, out):
            out.extend(self._take_one_by_one())
        return out

    def _take_batched(self, chunk: int, out: list[tuple[bytes, bytes]]) -> bool:
        """Batches into ``out``; False if the kernel refused one (the rest is left)."""
        fd, ks, vs = self.fd, self.key_size, self.value_size
        token = max(ks, 8)  # the batch position: a bucket index for hash maps
        in_batch, out_batch = ctypes.create_string_buffer(token), ctypes.create_string_buffer(token)
        first = True
        while True:
            keys = ctypes.create_string_buffer(ks * chunk)
            values = ctypes.create_string_buffer(vs * chunk)
            count = c_uint32(chunk)
            rc = self._lib.bpf_map_lookup_and_delete_batch(
                fd, None if first else in_batch, out_batch, keys, values, ctypes.byref(count), None
            )
            if rc == -28 and chunk < (1 << 20):  # ENOSPC: one bucket holds more than a chunk
                chunk *= 4
                continue
            if rc < 0 and rc != -2:  # anything but -ENOENT (the walk is done)
                return False
            kraw, vraw = keys.raw, values.raw
            out.extend(
                (kraw[i * ks : (i + 1) * ks], vraw[i * vs : (i + 1) * vs])
                for i in range(count.value)
            )
            if rc == -2:
                return True
            first = False
            ctypes.memmove(in_batch, out_batch, token)

    def _take_one_by_one(self) -> list[tuple[bytes, bytes]]:
        out = []
        value = ctypes.create_string_buffer(self.value_size)
        for key in list(self.keys()):
            rc = self._lib.bpf_map_lookup_and_delete_elem(self.fd, self._key(key), value)
            if rc == -2:
                continue
            _check_rc(rc, f"map {self.name}: lookup and delete")
            out.append((key, value.raw))
        return out


class RingBuffer:
    """libbpf's ring buffer reader over one BPF_MAP_TYPE_RINGBUF map."""

    def __init__(self, lib: ctypes.CDLL, map_fd: int, callback: Callable[[bytes], Any]) -> None:
        self._lib = lib
        self._callback = callback
        self._error: BaseException | None = None
        self._cfn = _SAMPLE_FN(self._on_sample)  # kept alive as long as the ring buffer
        self._more: list[Any] = []  # callbacks of maps added with add()
        self.ptr: int | None = _check_ptr(
            lib.ring_buffer__new(map_fd, self._cfn, None, None), "ring_buffer__new"
        )

    def _on_sample(self, ctx: int | None, data: int | None, size: int) -> int:
        return self._deliver(self._callback, data, size)

    def _deliver(self, callback: Callable[[bytes], Any], data: int | None, size: int) -> int:
        try:
            callback(ctypes.string_at(data, size) if data else b"")
        except BaseException as e:  # re-raised by poll(); a C caller cannot unwind
            self._error = e
            return -1
        return 0

    def add(self, map_fd: int, callback: Callable[[bytes], Any]) -> None:
        """Read another ring buffer map too, with its own callback: one poll waits for
        records of either."""
        if self.ptr is None:
            raise BpfError("ring buffer is closed")

        def on_sample(ctx: int | None, data: int | None, size: int) -> int:
            return self._deliver(callback, data, size)

        cfn = _SAMPLE_FN(on_sample)
        self._more.append(cfn)  # kept alive as long as the ring buffer
        _check_rc(self._lib.ring_buffer__add(self.ptr, map_fd, cfn, None), "ring_buffer__add")

    def poll(self, timeout_ms: int = 100) -> int:
        """Wait up to ``timeout_ms`` for records and hand each to the callback."""
        if self.ptr is None:
            raise BpfError("ring buffer is closed")
        n = self._lib.ring_buffer__poll(self.ptr, timeout_ms)
        self._raise_pending()
        if n == -4:  # EINTR: a signal arrived; the caller decides what to do
            return 0
        _check_rc(n, "ring_buffer__poll")
        return n

    def consume(self) -> int:
        """Hand every record already there to the callback, without waiting."""
        if self.ptr is None:
            return 0
        n = self._lib.ring_buffer__consume(self.ptr)
        self._raise_pending()
        _check_rc(n, "ring_buffer__consume")
        return n

    def _raise_pending(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def close(self) -> None:
        if self.ptr is not None:
            self._lib.ring_buffer__free(self.ptr)
            self.ptr = None


class BpfObject:
    """A BPF object opened from bytes; :meth:`close` (or ``with``) frees everything."""

    def __init__(self, data: bytes, name: str = "aiflame") -> None:
        self._lib = library()
        self._data = ctypes.create_string_buffer(data, len(data))  # libbpf reads it lazily
        self._name = name.encode()
        opts = _OpenOpts(ctypes.sizeof(_OpenOpts), self._name)
        self.ptr: int | None = _check_ptr(
            self._lib.bpf_object__open_mem(self._data, len(data), ctypes.byref(opts)),
            f"open BPF object {name}",
        )
        self.name = name
        self.links: list[int] = []
        self.link_fds: list[int] = []  # links made with the bpf() syscall (uprobe_multi)
        self.ring_buffers: list[RingBuffer] = []
        self.loaded = False

    # -- before load ----------------------------------------------------------------------
    def _rodata(self) -> tuple[int, ctypes.Array, dict[str, tuple[int, int]]]:
        """(map, writable initial value, {variable: (offset, size)}) of ``.rodata``."""
        lib, obj = self._lib, self._require()
        rodata = None
        it = lib.bpf_object__next_map(obj, None)
        while it:
            if lib.bpf_map__is_internal(it) and (lib.bpf_map__name(it) or b"").endswith(b".rodata"):
                rodata = it
                break
            it = lib.bpf_object__next_map(obj, it)
        if rodata is None:
            raise BpfError(f"{self.name}: the object has no .rodata (no const volatile globals)")
        size = c_size_t()
        ptr = _check_ptr(lib.bpf_map__initial_value(rodata, ctypes.byref(size)), ".rodata")
        view = (ctypes.c_char * size.value).from_address(ptr)
        return rodata, view, self._datasec_vars(b".rodata")

    def _datasec_vars(self, section: bytes) -> dict[str, tuple[int, int]]:
        lib = self._lib
        btf = _check_ptr(lib.bpf_object__btf(self._require()), f"{self.name}: no BTF")
        sec_id = lib.btf__find_by_name_kind(btf, section, _BTF_KIND_DATASEC)
        _check_rc(sec_id, f"{self.name}: BTF has no {section.decode()}")
        sec = lib.btf__type_by_id(btf, sec_id)
        _, info, _ = struct.unpack("<III", ctypes.string_at(sec, 12))
        out: dict[str, tuple[int, int]] = {}
        for i in range(info & 0xFFFF):  # vlen btf_var_secinfo {type, offset, size} follow
            type_id, offset, size = struct.unpack("<III", ctypes.string_at(sec + 12 + 12 * i, 12))
            var = lib.btf__type_by_id(btf, type_id)
            name_off, var_info, _ = struct.unpack("<III", ctypes.string_at(var, 12))
            if (var_info >> 24) & 0x1F == _BTF_KIND_VAR:
                out[lib.btf__name_by_offset(btf, name_off).decode()] = (offset, size)
        return out

    def set_rodata(self, **values: int | bytes) -> None:
        """Set ``const volatile`` globals; ints are packed little-endian to the variable's size."""
        if self.loaded:
            raise BpfError(f"{self.name}: .rodata is read-only once loaded")
        _, view, variables = self._rodata()
        for name, value in values.items():
            if name not in variables:
                raise BpfError(f"{self.name}: no read-only global named {name}")
            offset, size = variables[name]
            if isinstance(value, int):
                raw = value.to_bytes(size, "little", signed=value < 0)
            else:
                raw = bytes(value).ljust(size, b"\0")
                if len(raw) != size:
                    raise BpfError(f"{self.name}: {name} takes {size} bytes, got {len(raw)}")
            ctypes.memmove(ctypes.addressof(view) + offset, raw, size)

    def set_max_entries(self, map_name: str, n: int) -> None:
        if self.loaded:
            raise BpfError(f"{self.name}: map sizes are fixed once loaded")
        m = self._map_ptr(map_name)
        _check_rc(self._lib.bpf_map__set_max_entries(m, n), f"map {map_name}: set_max_entries")

    def set_expected_attach_type(self, program: str, attach_type: int) -> None:
        """Before load: e.g. :data:`BPF_TRACE_UPROBE_MULTI` for :meth:`attach_uprobe_multi`
        (a kernel without it refuses the load: the caller can fall back)."""
        if self.loaded:
            raise BpfError(f"{self.name}: attach types are fixed once loaded")
        rc = self._lib.bpf_program__set_expected_attach_type(self._prog_ptr(program), attach_type)
        _check_rc(rc, f"program {program}: set_expected_attach_type")

    def set_autoload(self, program: str, load: bool) -> None:
        """Leave ``program`` out of the load (another program of the object is used instead,
        e.g. where the kernel lacks a helper it calls)."""
        if self.loaded:
            raise BpfError(f"{self.name}: programs are fixed once loaded")
        rc = self._lib.bpf_program__set_autoload(self._prog_ptr(program), load)
        _check_rc(rc, f"program {program}: set_autoload")

    def load(self) -> None:
        mark = len(_log)
        rc = self._lib.bpf_object__load(self._require())
        if rc < 0:
            lines = list(_log)[mark:] if len(_log) > mark else list(_log)[-20:]
            tail = "; ".join(ln.strip() for ln in lines[-6:] if ln.strip())
            raise BpfError(
                f"load {self.name}: {_errno_text(rc)}" + (f" (libbpf: {tail})" if tail else "")
            )
        self.loaded = True

    # -- lookups ----------------------------------------------------------------------------
    def _require(self) -> int:
        if self.ptr is None:
            raise BpfError(f"{self.name}: the object is closed")
        return self.ptr

    def _prog_ptr(self, name: str) -> int:
        p = self._lib.bpf_object__find_program_by_name(self._require(), name.encode())
        if not p:
            raise BpfError(f"{self.name}: no program named {name}")
        return p

    def _map_ptr(self, name: str) -> int:
        m = self._lib.bpf_object__find_map_by_name(self._require(), name.encode())
        if not m:
            raise BpfError(f"{self.name}: no map named {name}")
        return m

    def map(self, name: str) -> Map:
        return Map(self._map_ptr(name), self._lib)

    def program_fd(self, name: str) -> int:
        fd = self._lib.bpf_program__fd(self._prog_ptr(name))
        _check_rc(fd, f"program {name}: not loaded")
        return fd

    # -- attaching --------------------------------------------------------------------------
    def _link(self, ptr: int | None, what: str) -> int:
        link = _check_ptr(ptr, what)
        self.links.append(link)
        return link

    def attach_perf_event(self, program: str, perf_fd: int) -> int:
        """Run ``program`` on each overflow of ``perf_fd``; the link owns and closes the fd."""
        ptr = self._lib.bpf_program__attach_perf_event(self._prog_ptr(program), perf_fd)
        if not ptr:
            err = ctypes.get_errno()
            os.close(perf_fd)
            raise BpfError(f"attach {program} to a perf event: {_errno_text(err)}")
        return self._link(ptr, program)

    def attach_uprobe(
        self,
        program: str,
        binary: str,
        offset: int = 0,
        symbol: str | None = None,
        pid: int = -1,
        retprobe: bool = False,
        cookie: int = 0,
    ) -> int:
        """A uprobe (or uretprobe) at ``symbol`` + ``offset`` (file offset without a symbol).

        ``pid`` -1 fires in every process that maps ``binary``. ``cookie`` is what the
        program reads with ``bpf_get_attach_cookie()`` (one program, many functions).
        """
        opts = _UprobeOpts(
            ctypes.sizeof(_UprobeOpts), 0, cookie, retprobe, symbol and symbol.encode()
        )
        ptr = self._lib.bpf_program__attach_uprobe_opts(
            self._prog_ptr(program), pid, binary.encode(), offset, ctypes.byref(opts)
        )
        where = f"{binary}:{symbol or ''}+{offset:#x}"
        return self._link(ptr, f"attach {'uretprobe' if retprobe else 'uprobe'} {where}")

    def attach_uprobe_multi(
        self,
        program: str,
        binary: str,
        offsets: list[int],
        cookies: list[int] | None = None,
        pid: int = -1,
        retprobe: bool = False,
    ) -> int:
        """One link of uprobes (or uretprobes) at the file ``offsets`` of ``binary``, each
        with its cookie; ``program`` must be loaded as :data:`BPF_TRACE_UPROBE_MULTI`.
        Returns the link's fd (closed by :meth:`detach` or :meth:`close`)."""
        n = len(offsets)
        if not n or (cookies is not None and len(cookies) != n):
            raise BpfError(f"attach_uprobe_multi {binary}: {n} offsets, cookies do not match")
        number = _BPF_SYSCALL.get(platform.machine())
        if number is None:
            raise BpfError(f"bpf(): unsupported machine {platform.machine()}")
        offs = (ctypes.c_uint64 * n)(*offsets)
        cks = (ctypes.c_uint64 * n)(*(cookies or [0] * n))
        path = ctypes.create_string_buffer(binary.encode())
        attr = ctypes.create_string_buffer(128)  # union bpf_attr, link_create.uprobe_multi
        struct.pack_into(
            "<IIIIQQQQIII",
            attr,
            0,
            self.program_fd(program),
            0,
            BPF_TRACE_UPROBE_MULTI,
            0,
            ctypes.addressof(path),
            ctypes.addressof(offs),
            0,  # ref_ctr_offsets
            ctypes.addressof(cks),
            n,
            BPF_F_UPROBE_MULTI_RETURN if retprobe else 0,
            max(pid, 0),
        )
        fd = _libc.syscall(ctypes.c_long(number), _BPF_LINK_CREATE, attr, ctypes.c_uint(128))
        if fd < 0:
            kind = "uretprobes" if retprobe else "uprobes"
            raise BpfError(f"attach {n} {kind} to {binary}: {_errno_text(ctypes.get_errno())}")
        self.link_fds.append(int(fd))
        return int(fd)

    def attach_tracepoint(self, program: str, category: str, name: str) -> int:
        ptr = self._lib.bpf_program__attach_tracepoint(
            self._prog_ptr(program), category.encode(), name.encode()
        )
        return self._link(ptr, f"attach tracepoint {category}/{name}")

    def attach_raw_tracepoint(self, program: str, name: str) -> int:
        """A raw tracepoint (``SEC("raw_tp/NAME")``): needs no tracefs mount, unlike
        :meth:`attach_tracepoint`; the program gets the tracepoint's raw arguments."""
        ptr = self._lib.bpf_program__attach_raw_tracepoint(self._prog_ptr(program), name.encode())
        return self._link(ptr, f"attach raw tracepoint {name}")

    def detach(self, link: int) -> None:
        if link in self.links:
            self.links.remove(link)
            self._lib.bpf_link__destroy(link)
        elif link in self.link_fds:
            self.link_fds.remove(link)
            os.close(link)

    def ring_buffer(self, map_name: str, callback: Callable[[bytes], Any]) -> RingBuffer:
        rb = RingBuffer(self._lib, self.map(map_name).fd, callback)
        self.ring_buffers.append(rb)
        return rb

    @property
    def log(self) -> list[str]:
        """libbpf's recent log lines (all objects of the process share them)."""
        return list(_log)

    # -- teardown ---------------------------------------------------------------------------
    def close(self) -> None:
        """Free ring buffers, destroy every link (detaching probes), close the object."""
        for rb in self.ring_buffers:
            rb.close()
        self.ring_buffers.clear()
        while self.link_fds:
            os.close(self.link_fds.pop())
        while self.links:
            self._lib.bpf_link__destroy(self.links.pop())
        if self.ptr is not None:
            self._lib.bpf_object__close(self.ptr)
            self.ptr = None

    def __enter__(self) -> BpfObject:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # a forgotten close() must not leave probes attached
        if (
            getattr(self, "ptr", None) is not None
            or getattr(self, "links", None)
            or getattr(self, "link_fds", None)
        ):
            self.close()
