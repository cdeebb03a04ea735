"""Where CPython keeps its frames: the tabled offsets against the interpreters' own headers,
and finding (or refusing) the interpreter of real processes."""

from __future__ import annotations

import glob
import os
import re
import struct
import subprocess
import sys
import time

import pytest

import pythons
import systools
from aiflame.collectors.ebpf.pylayouts import (
    DEBUG_COOKIE,
    DEBUG_LAYOUTS,
    TABLES,
    UnsupportedPython,
    debug_field_index,
    debug_table_size,
    from_debug_offsets,
)
from aiflame.collectors.ebpf.pyruntime import candidate_files, find_python
from aiflame.symbolize.maps import Maps

# 3.11 and 3.12: _PyInterpreterFrame, tabled
OFFSETS_C = r"""
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#include "internal/pycore_frame.h"
#define P(name, value) printf("%s %zu\n", name, (size_t)(value))
int main(void)
{
    P("interpreters_head", offsetof(_PyRuntimeState, interpreters.head));
    P("threads_head", offsetof(PyInterpreterState, threads.head));
    P("tstate_next", offsetof(PyThreadState, next));
    P("tstate_interp", offsetof(PyThreadState, interp));
    P("thread_id", offsetof(PyThreadState, native_thread_id));
    P("tstate_frame", offsetof(PyThreadState, cframe));
    P("cframe_frame", offsetof(_PyCFrame, current_frame));
    P("frame_code", offsetof(_PyInterpreterFrame, f_code));
    P("frame_previous", offsetof(_PyInterpreterFrame, previous));
    P("frame_owner", offsetof(_PyInterpreterFrame, owner));
#if PY_VERSION_HEX < 0x030C0000
    P("frame_is_entry", offsetof(_PyInterpreterFrame, is_entry));
#endif
    P("code_filename", offsetof(PyCodeObject, co_filename));
    P("code_name", offsetof(PyCodeObject, co_name));
    P("code_qualname", offsetof(PyCodeObject, co_qualname));
    P("code_firstlineno", offsetof(PyCodeObject, co_firstlineno));
    P("unicode_state", offsetof(PyASCIIObject, state));
    P("unicode_length", offsetof(PyASCIIObject, length));
    P("ascii_size", sizeof(PyASCIIObject));
    P("compact_size", sizeof(PyCompactUnicodeObject));
#if PY_VERSION_HEX < 0x030C0000
    P("gil_locked", offsetof(_PyRuntimeState, ceval.gil.locked));
    P("gil_holder", offsetof(_PyRuntimeState, ceval.gil.last_holder));
#else
    P("gil_locked", offsetof(PyInterpreterState, _gil.locked));
    P("gil_holder", offsetof(PyInterpreterState, _gil.last_holder));
#endif
    return 0;
}
"""
# 3.8-3.10: PyFrameObject, tabled
FRAME_OBJECT_OFFSETS_C = r"""
#define Py_BUILD_CORE 1
#include <Python.h>
#include <frameobject.h>
#include <stddef.h>
#include <stdio.h>
#if PY_VERSION_HEX < 0x03090000
#include "internal/pycore_pystate.h"
#else
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#endif
#define P(name, value) printf("%s %zu\n", name, (size_t)(value))
int main(void)
{
    P("interpreters_head", offsetof(_PyRuntimeState, interpreters.head));
    P("threads_head", offsetof(PyInterpreterState, tstate_head));
    P("tstate_next", offsetof(PyThreadState, next));
    P("tstate_interp", offsetof(PyThreadState, interp));
    P("thread_id", offsetof(PyThreadState, thread_id));
    P("tstate_frame", offsetof(PyThreadState, frame));
    P("frame_code", offsetof(PyFrameObject, f_code));
    P("frame_previous", offsetof(PyFrameObject, f_back));
    P("code_filename", offsetof(PyCodeObject, co_filename));
    P("code_name", offsetof(PyCodeObject, co_name));
    P("code_firstlineno", offsetof(PyCodeObject, co_firstlineno));
    P("unicode_state", offsetof(PyASCIIObject, state));
    P("unicode_length", offsetof(PyASCIIObject, length));
    P("ascii_size", sizeof(PyASCIIObject));
    P("compact_size", sizeof(PyCompactUnicodeObject));
    P("gil_locked", offsetof(_PyRuntimeState, ceval.gil.locked));
    P("gil_holder", offsetof(_PyRuntimeState, ceval.gil.last_holder));
    return 0;
}
"""
# 3.13+: where each field of _Py_DebugOffsets is, as uint64 indices after the cookie
DEBUG_OFFSETS_C = r"""
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include "internal/pycore_runtime.h"
#if PY_VERSION_HEX >= 0x030E0000
#include "internal/pycore_debug_offsets.h"
#endif
#define P(name, field) printf("%s %zu\n", name, (offsetof(_Py_DebugOffsets, field) - 8) / 8)
int main(void)
{
FIELDS
    return 0;
}
"""


def include_dirs(version: tuple[int, int]) -> list[list[str]]:
    """-I options for each installation of that version's headers here (pyenv, the
    system's python3.X-dev, the chroots of tests/pythons.py)."""
    major, minor = version
    name = f"python{major}.{minor}"
    prefixes = glob.glob(os.path.expanduser(f"~/.pyenv/versions/{major}.{minor}.*"))
    if sys.version_info[:2] == version:
        prefixes.append(os.path.dirname(os.path.dirname(sysconfig_include())))
    prefixes += ["/usr"]
    if pythons.CHROOTS.is_dir():
        prefixes += [f"{root}/usr" for root in sorted(pythons.CHROOTS.iterdir())]
    found = []
    for prefix in dict.fromkeys(prefixes):
        include = f"{prefix}/include/{name}"
        if os.path.exists(f"{include}/internal/pycore_runtime.h") or os.path.exists(
            f"{include}/internal/pycore_pystate.h"
        ):
            # Debian keeps pyconfig.h apart, per architecture, included by that path: its
            # directory goes after this machine's own headers (the C library's stay ours)
            found.append([f"-I{include}", "-idirafter", f"{prefix}/include"])
    return found


def sysconfig_include() -> str:
    import sysconfig

    return sysconfig.get_paths()["include"]


def compiled_values(source: str, flags: list[str], tmp_path) -> dict[str, int]:
    systools.need("gcc")
    c = tmp_path / "offsets.c"
    c.write_text(source)
    exe = tmp_path / "offsets"
    subprocess.run(["gcc", *flags, str(c), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return {name: int(v) for name, v in (line.split() for line in out.splitlines())}


def headers_or_skip(version: tuple[int, int]) -> list[list[str]]:
    dirs = include_dirs(version)
    if not dirs:
        v = f"{version[0]}.{version[1]}"
        pytest.skip(f"needs the headers of Python {v} (apt-get install python{v}-dev, or pyenv)")
    return dirs


@pytest.mark.parametrize("version", sorted(TABLES))
def test_table_matches_the_headers(version, tmp_path):
    source = FRAME_OBJECT_OFFSETS_C if version < (3, 11) else OFFSETS_C
    for flags in headers_or_skip(version):
        measured = compiled_values(source, flags, tmp_path)
        table = TABLES[version]
        for name, value in measured.items():
            assert getattr(table, name) == value, (flags, name)


@pytest.mark.parametrize("version", sorted(DEBUG_LAYOUTS))
def test_debug_offsets_layout_matches_the_headers(version, tmp_path):
    """Where each version keeps each field of its _Py_DebugOffsets (the table grows from
    one version to the next), as its own header declares the struct."""
    index = debug_field_index(version)
    lines = "\n".join(f'    P("{name}", {name});' for name in index)
    for flags in headers_or_skip(version):
        measured = compiled_values(DEBUG_OFFSETS_C.replace("FIELDS", lines), flags, tmp_path)
        assert measured == index, flags
        assert debug_table_size(version) == 8 + 8 * (max(index.values()) + 1)


def test_this_interpreter_is_found():
    python = find_python(os.getpid())
    assert python.version == sys.version_info[:2]
    assert python.runtime and python.code_type


def test_a_program_that_is_not_python_is_refused():
    proc = subprocess.Popen(["sleep", "5"])
    try:
        time.sleep(0.1)
        with pytest.raises(UnsupportedPython, match="no Python interpreter is mapped"):
            find_python(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_an_old_python_is_refused_with_its_version():
    old = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.7.*/bin/python3.7")))
    if not old:
        pytest.skip("needs a Python 3.7 (pyenv install 3.7)")
    proc = subprocess.Popen([old[0], "-c", "import time; time.sleep(5)"])
    try:
        time.sleep(0.3)
        refused = r"3\.7 is not read by the eBPF walker \(3\.8\+\)"
        with pytest.raises(UnsupportedPython, match=refused):
            find_python(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_a_gone_process_is_refused():
    proc = subprocess.Popen(["true"])
    proc.wait()
    with pytest.raises(UnsupportedPython, match="cannot read the mappings"):
        find_python(proc.pid)


def test_an_interpreter_file_only_mapped_to_read_is_not_this_process(tmp_path):
    """A profiler in this process maps other interpreters' files to read their symbols
    (r--s): they are not this process's interpreter, whatever version they are."""
    import mmap
    import shutil

    others = [
        p
        for p in glob.glob("/root/.pyenv/versions/3.1*/bin/python3.1*")
        + glob.glob("/usr/bin/python3.1*")
        if re.fullmatch(r"python3\.1\d", os.path.basename(p))
        and os.path.basename(p) != f"python{sys.version_info[0]}.{sys.version_info[1]}"
    ]
    if not others:  # the same file under another version's name still must not be taken
        others = [str(tmp_path / "python3.99")]
        shutil.copy(sys.executable, others[0])
    with open(others[0], "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ, flags=mmap.MAP_SHARED)
    try:
        with open(f"/proc/{os.getpid()}/maps") as m:
            maps = Maps.parse(m.read())
        assert others[0] not in {c.path for c in candidate_files(maps)}
        python = find_python(os.getpid())
        assert python.version == sys.version_info[:2]
        assert python.module != others[0]
    finally:
        mapped.close()


def _debug_table(layout: tuple[int, int], **fields: int) -> bytes:
    index = debug_field_index(layout)
    values = [0] * (max(index.values()) + 1)
    for name, value in fields.items():
        values[index[name]] = value
    return DEBUG_COOKIE + struct.pack(f"<{len(values)}Q", *values)


def test_a_free_threaded_python_is_refused_in_one_line():
    """A free-threaded build (3.13t, 3.14t) says so in its debug offsets: its objects and
    frames are laid out otherwise, and the walk says it does not read them."""
    table = _debug_table((3, 14), version=0x030E0AF0, free_threaded=1)
    with pytest.raises(UnsupportedPython, match=r"free-threaded Python \(3\.14t\) is not walked"):
        from_debug_offsets(lambda address, size: table[:size], 0x1000, (3, 14))


def test_a_python_newer_than_the_layouts_known_is_refused_in_one_line():
    table = _debug_table((3, 15), version=0x031000A0)
    with pytest.raises(UnsupportedPython, match=r"3\.16's debug offsets are not read yet"):
        from_debug_offsets(lambda address, size: table[:size], 0x1000, (3, 16))


def test_debug_offsets_outside_their_structures_are_refused():
    """A table that does not describe the structures (read at the wrong place, or laid out
    otherwise than described) fails before any walk."""
    table = _debug_table((3, 14), version=0x030E0AF0)  # every size 0
    with pytest.raises(UnsupportedPython, match="do not describe its runtime_state"):
        from_debug_offsets(lambda address, size: table[:size], 0x1000, (3, 14))
