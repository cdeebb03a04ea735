"""Where each CPython version keeps what the eBPF walker reads (``bpf/pystack.h``).

The walk needs the offsets of a few fields of the interpreter's internal structures (the
runtime's first interpreter, its thread states, each thread's current frame, each frame's
code object and caller, each code object's names and first line, the GIL), which change
between minor versions:

* 3.13 and later publish them in ``_PyRuntime`` itself (``_Py_DebugOffsets``, the table
  out-of-process debuggers read): :func:`from_debug_offsets` reads it from the process at
  attach time. The table's own layout grows from version to version; each known one is
  described in :data:`DEBUG_LAYOUTS` (``tests/unit/test_pyruntime.py`` checks them against
  each version's header).
* 3.8-3.12 do not: their offsets are tabled in :data:`TABLES`, from the ``offsetof`` of
  each version's own headers (x86-64 and AArch64 have the same layout;
  ``tests/unit/test_pyruntime.py`` compiles them against each installed version's headers).

Two frame models: up to 3.10 a frame is a ``PyFrameObject`` (``f_back``, ``f_code``), each
its own call of the eval loop, and a thread state knows its thread by ``pthread_self()``;
from 3.11 frames are ``_PyInterpreterFrame`` records and a thread state holds the OS
thread id. 3.8-3.10 code objects have no ``co_qualname``: the class of a method is then
found from its source (:mod:`.pycode`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

NO_OFFSET = 0xFFFFFFFF  # pystack.h PY_NO_OFFSET
FRAME_BYTES = 80  # pystack.h PY_FRAME_BYTES: the bytes of each frame the walk reads
DEBUG_COOKIE = b"xdebugpy"
# pystack.h struct py_proc flags
PYF_THREAD_BY_TLS = 1
PYF_ALL_ENTRIES = 2
_PY_PROC = struct.Struct("<Q14Iq")


class UnsupportedPython(Exception):
    """A Python this walker cannot read (the message says which and why)."""


@dataclass(frozen=True)
class Offsets:
    """Byte offsets of the fields the walk and the code reader use (struct py_proc)."""

    interpreters_head: int  # _PyRuntimeState.interpreters.head
    threads_head: int  # PyInterpreterState.threads.head (tstate_head before 3.11)
    tstate_next: int
    tstate_interp: int  # PyThreadState.interp: checks the layout on a live process
    thread_id: int  # PyThreadState.native_thread_id (3.11+), or .thread_id (pthread_self)
    tstate_frame: int  # PyThreadState.frame (3.8-3.10), .cframe (3.11, 3.12), .current_frame
    cframe_frame: int  # _PyCFrame.current_frame (3.11, 3.12); NO_OFFSET otherwise
    frame_code: int  # PyFrameObject.f_code, _PyInterpreterFrame.f_code / f_executable
    frame_previous: int  # PyFrameObject.f_back, _PyInterpreterFrame.previous
    frame_owner: int  # _PyInterpreterFrame.owner; NO_OFFSET before 3.11
    frame_is_entry: int  # 3.11 only; NO_OFFSET otherwise (shim frames mark the entries)
    code_filename: int
    code_name: int
    code_qualname: int  # NO_OFFSET before 3.11 (no co_qualname)
    code_firstlineno: int
    unicode_state: int
    unicode_length: int
    ascii_size: int  # sizeof(PyASCIIObject): where a compact ASCII string's text starts
    compact_size: int  # sizeof(PyCompactUnicodeObject): other compact strings' text
    gil_locked: int  # the GIL's locked flag and last holder: in _PyRuntimeState (before
    gil_holder: int  # 3.12), in the main interpreter's own GIL (PyInterpreterState._gil)
    gil_in_runtime: bool
    thread_by_tls: bool = False  # thread states hold pthread_self() (3.8-3.10)
    all_entries: bool = False  # every frame is an entry from C (PyFrameObject)

    def bpf_struct(self, runtime: int, tls_delta: int = 0) -> bytes:
        """``struct py_proc`` of bpf/pystack.h."""
        flags = (PYF_THREAD_BY_TLS if self.thread_by_tls else 0) | (
            PYF_ALL_ENTRIES if self.all_entries else 0
        )
        return _PY_PROC.pack(
            runtime,
            self.interpreters_head,
            self.threads_head,
            self.tstate_next,
            self.thread_id,
            self.tstate_frame,
            self.cframe_frame,
            self.frame_code,
            self.frame_previous,
            self.frame_owner,
            self.frame_is_entry,
            self.gil_locked,
            self.gil_holder,
            int(self.gil_in_runtime),
            flags,
            tls_delta,
        )

    def frame_fields_fit(self) -> bool:
        """Whether every frame field the walk reads lies in its read of each frame."""
        ends = [self.frame_code + 8, self.frame_previous + 8]
        ends += [at + 1 for at in (self.frame_owner, self.frame_is_entry) if at != NO_OFFSET]
        return max(ends) <= FRAME_BYTES


def _frame_objects(thread_id: int, gil_locked: int, gil_holder: int) -> Offsets:
    """3.8-3.10: PyFrameObject frames, as laid out alike in all three (their headers)."""
    return Offsets(
        interpreters_head=32,
        threads_head=8,  # PyInterpreterState.tstate_head
        tstate_next=8,
        tstate_interp=16,
        thread_id=thread_id,
        tstate_frame=24,
        cframe_frame=NO_OFFSET,
        frame_code=32,
        frame_previous=24,
        frame_owner=NO_OFFSET,
        frame_is_entry=NO_OFFSET,
        code_filename=104,
        code_name=112,
        code_qualname=NO_OFFSET,
        code_firstlineno=40,
        unicode_state=32,
        unicode_length=16,
        ascii_size=48,
        compact_size=72,
        gil_locked=gil_locked,  # _PyRuntimeState.ceval.gil.locked
        gil_holder=gil_holder,
        gil_in_runtime=True,
        thread_by_tls=True,
        all_entries=True,
    )


# From offsetof() over each version's own headers (Py_BUILD_CORE, x86-64).
TABLES: dict[tuple[int, int], Offsets] = {
    # 3.8's _ceval_runtime_state holds the pending calls' array before the GIL
    (3, 8): _frame_objects(thread_id=176, gil_locked=1168, gil_holder=1160),
    (3, 9): _frame_objects(thread_id=176, gil_locked=368, gil_holder=360),
    (3, 10): _frame_objects(thread_id=176, gil_locked=368, gil_holder=360),
    (3, 11): Offsets(
        interpreters_head=40,
        threads_head=16,
        tstate_next=8,
        tstate_interp=16,
        thread_id=160,
        tstate_frame=56,
        cframe_frame=8,
        frame_code=32,
        frame_previous=48,
        frame_owner=69,
        frame_is_entry=68,
        code_filename=112,
        code_name=120,
        code_qualname=128,
        code_firstlineno=72,
        unicode_state=32,
        unicode_length=16,
        ascii_size=48,
        compact_size=72,
        gil_locked=376,  # _PyRuntimeState.ceval.gil.locked
        gil_holder=368,
        gil_in_runtime=True,
    ),
    (3, 12): Offsets(
        interpreters_head=40,
        threads_head=72,
        tstate_next=8,
        tstate_interp=16,
        thread_id=144,
        tstate_frame=56,
        cframe_frame=0,
        frame_code=0,
        frame_previous=8,
        frame_owner=70,
        frame_is_entry=NO_OFFSET,
        code_filename=112,
        code_name=120,
        code_qualname=128,
        code_firstlineno=68,
        unicode_state=32,
        unicode_length=16,
        ascii_size=40,
        compact_size=56,
        gil_locked=1056,  # PyInterpreterState._gil.locked
        gil_holder=1048,
        gil_in_runtime=False,
    ),
}


def _section(name: str, fields: str) -> tuple[str, tuple[str, ...]]:
    return name, tuple(fields.split())


# The layout of _Py_DebugOffsets per version: after cookie[8], uint64 fields in these
# sections, in this order (only the sections up to the last one read). Each version's
# header: Include/internal/pycore_runtime.h (3.13), pycore_debug_offsets.h (3.14+).
_COMMON_313 = (
    _section("runtime_state", "size finalizing interpreters_head"),
    _section(
        "interpreter_state",
        "size id next threads_head gc imports_modules sysdict builtins ceval_gil "
        "gil_runtime_state gil_runtime_state_enabled gil_runtime_state_locked "
        "gil_runtime_state_holder",
    ),
)
_INTERP_314 = _section(
    "interpreter_state",
    "size id next threads_head threads_main gc imports_modules sysdict builtins ceval_gil "
    "gil_runtime_state gil_runtime_state_enabled gil_runtime_state_locked "
    "gil_runtime_state_holder code_object_generation tlbc_generation",
)
_THREAD_313 = _section(
    "thread_state",
    "size prev next interp current_frame thread_id native_thread_id datastack_chunk status",
)
_CODE_313 = _section(
    "code_object",
    "size filename name qualname linetable firstlineno argcount localsplusnames "
    "localspluskinds co_code_adaptive",
)
_CODE_314 = _section("code_object", " ".join((*_CODE_313[1], "co_tlbc")))
_OBJECTS_313 = (
    _section("pyobject", "size ob_type"),
    _section("type_object", "size tp_name tp_repr tp_flags"),
    _section("tuple_object", "size ob_item ob_size"),
    _section("list_object", "size ob_item ob_size"),
)
_NUMBERS = (
    _section("dict_object", "size ma_keys ma_values"),
    _section("float_object", "size ob_fval"),
    _section("long_object", "size lv_tag ob_digit"),
    _section("bytes_object", "size ob_size ob_sval"),
)
_SET = _section("set_object", "size used table mask")
DEBUG_LAYOUTS: dict[tuple[int, int], tuple[tuple[str, tuple[str, ...]], ...]] = {
    (3, 13): (
        *_COMMON_313,
        _THREAD_313,
        _section("interpreter_frame", "size previous executable instr_ptr localsplus owner"),
        _CODE_313,
        *_OBJECTS_313,
        *_NUMBERS,
        _section("unicode_object", "size state length asciiobject_size"),
    ),
    (3, 14): (
        _COMMON_313[0],
        _INTERP_314,
        _THREAD_313,
        _section(
            "interpreter_frame",
            "size previous executable instr_ptr localsplus owner stackpointer tlbc_index",
        ),
        _CODE_314,
        *_OBJECTS_313,
        _SET,
        *_NUMBERS,
        _section("unicode_object", "size state length asciiobject_size"),
    ),
    (3, 15): (
        _COMMON_313[0],
        _INTERP_314,
        _section(
            "thread_state",
            "size prev next interp current_frame base_frame last_profiled_frame "
            "last_profiled_frame_seq thread_id native_thread_id datastack_chunk status "
            "holds_gil gil_requested current_exception exc_state",
        ),
        _section("err_stackitem", "exc_value"),
        _section(
            "interpreter_frame",
            "size previous executable instr_ptr localsplus owner stackpointer tlbc_index",
        ),
        _CODE_314,
        _section("pyobject", "size ob_type"),
        _section("type_object", "size tp_name tp_repr tp_flags tp_basicsize tp_dictoffset"),
        _section("heap_type_object", "size ht_cached_keys"),
        *_OBJECTS_313[2:],
        _SET,
        *_NUMBERS,
        _section("unicode_object", "size state length asciiobject_size compactunicodeobject_size"),
    ),
}
# version and free_threaded come right after the cookie in every version
_HEADER_FIELDS = 2


def debug_field_index(version: tuple[int, int]) -> dict[str, int]:
    """``section.field`` -> its index among the uint64 fields after the cookie."""
    index = {"version": 0, "free_threaded": 1}
    i = _HEADER_FIELDS
    for section, fields in DEBUG_LAYOUTS[version]:
        for name in fields:
            index[f"{section}.{name}"] = i
            i += 1
    return index


def debug_table_size(version: tuple[int, int]) -> int:
    """Bytes of _Py_DebugOffsets read: the cookie and the fields through the last section."""
    return 8 + 8 * (_HEADER_FIELDS + sum(len(f) for _, f in DEBUG_LAYOUTS[version]))


def from_debug_offsets(
    read: Callable[[int, int], bytes | None], runtime: int, version: tuple[int, int]
) -> Offsets:
    """The offsets a 3.13+ interpreter publishes at the start of its ``_PyRuntime``
    (``read(address, size)`` reads the process's memory)."""
    v = f"{version[0]}.{version[1]}"
    if version not in DEBUG_LAYOUTS:
        newest = max(DEBUG_LAYOUTS)
        raise UnsupportedPython(
            f"Python {v}'s debug offsets are not read yet (3.8-{newest[0]}.{newest[1]})"
        )
    raw = read(runtime, debug_table_size(version))
    if raw is None or not raw.startswith(DEBUG_COOKIE):
        raise UnsupportedPython(f"no debug offsets in Python {v}")
    values = struct.unpack_from(f"<{(len(raw) - 8) // 8}Q", raw, 8)
    index = debug_field_index(version)

    def field(name: str) -> int:
        return values[index[name]]

    hexversion = field("version")
    if (hexversion >> 24, (hexversion >> 16) & 0xFF) != version:
        raise UnsupportedPython(f"Python {v}'s debug offsets name another version")
    if field("free_threaded"):
        raise UnsupportedPython(
            f"free-threaded Python ({v}t) is not walked by the eBPF walker: its objects and "
            "frames are laid out otherwise"
        )
    unicode = "unicode_object."
    compact = (
        field(unicode + "compactunicodeobject_size")
        if f"{unicode}compactunicodeobject_size" in index
        else field(unicode + "asciiobject_size") + 16  # + utf8_length, utf8
    )
    offsets = Offsets(
        interpreters_head=field("runtime_state.interpreters_head"),
        threads_head=field("interpreter_state.threads_head"),
        tstate_next=field("thread_state.next"),
        tstate_interp=field("thread_state.interp"),
        thread_id=field("thread_state.native_thread_id"),
        tstate_frame=field("thread_state.current_frame"),
        cframe_frame=NO_OFFSET,
        frame_code=field("interpreter_frame.executable"),
        frame_previous=field("interpreter_frame.previous"),
        frame_owner=field("interpreter_frame.owner"),
        frame_is_entry=NO_OFFSET,
        code_filename=field("code_object.filename"),
        code_name=field("code_object.name"),
        code_qualname=field("code_object.qualname"),
        code_firstlineno=field("code_object.firstlineno"),
        unicode_state=field(unicode + "state"),
        unicode_length=field(unicode + "length"),
        ascii_size=field(unicode + "asciiobject_size"),
        compact_size=compact,
        gil_locked=field("interpreter_state.gil_runtime_state_locked"),
        gil_holder=field("interpreter_state.gil_runtime_state_holder"),
        gil_in_runtime=False,
    )
    _check_sizes(offsets, values, index, v)
    return offsets


def _check_sizes(offsets: Offsets, values: tuple[int, ...], index: dict[str, int], v: str) -> None:
    """Every offset read lies inside its structure (a table read at the wrong place, or
    laid out otherwise than described, fails here rather than in the walk)."""
    checks = {
        "runtime_state": (offsets.interpreters_head,),
        "interpreter_state": (offsets.threads_head, offsets.gil_locked, offsets.gil_holder),
        "thread_state": (offsets.tstate_next, offsets.thread_id, offsets.tstate_frame),
        "interpreter_frame": (offsets.frame_code, offsets.frame_previous, offsets.frame_owner),
        "code_object": (offsets.code_filename, offsets.code_name, offsets.code_firstlineno),
    }
    for section, fields in checks.items():
        size = values[index[f"{section}.size"]]
        if not 0 < size < 1 << 20 or any(f >= size for f in fields):
            raise UnsupportedPython(f"Python {v}'s debug offsets do not describe its {section}")
    if not offsets.frame_fields_fit():
        raise UnsupportedPython(f"Python {v}'s frames are laid out otherwise")
