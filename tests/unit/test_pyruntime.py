"""Where CPython keeps its frames: the tabled offsets against the interpreters' own headers,
and finding (or refusing) the interpreter of real processes."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import time

import pytest

import systools
from aiflame.collectors.ebpf.pyruntime import (
    TABLES,
    UnsupportedPython,
    candidate_files,
    find_python,
)
from aiflame.symbolize.maps import Maps

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
    P("native_thread_id", offsetof(PyThreadState, native_thread_id));
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


def include_dirs(version: tuple[int, int]) -> list[str]:
    """Header directories of that version installed here (pyenv, python3.X-dev)."""
    major, minor = version
    found = glob.glob(os.path.expanduser(f"~/.pyenv/versions/{major}.{minor}.*/include"))
    found += [os.path.dirname(sysconfig_include())] if sys.version_info[:2] == version else []
    found += ["/usr/include"]
    return [
        f"{d}/python{major}.{minor}"
        for d in dict.fromkeys(found)
        if os.path.exists(f"{d}/python{major}.{minor}/internal/pycore_frame.h")
    ]


def sysconfig_include() -> str:
    import sysconfig

    return sysconfig.get_paths()["include"]


@pytest.mark.parametrize("version", sorted(TABLES))
def test_table_matches_the_headers(version, tmp_path):
    dirs = include_dirs(version)
    if not dirs:
        v = f"{version[0]}.{version[1]}"
        pytest.skip(f"needs the headers of Python {v} (apt-get install python{v}-dev, or pyenv)")
    systools.need("gcc")
    source = tmp_path / "offsets.c"
    source.write_text(OFFSETS_C)
    for include in dirs:
        exe = tmp_path / "offsets"
        subprocess.run(["gcc", f"-I{include}", str(source), "-o", str(exe)], check=True)
        out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
        measured = {name: int(v) for name, v in (line.split() for line in out.splitlines())}
        table = TABLES[version]
        for name, value in measured.items():
            assert getattr(table, name) == value, (include, name)


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
    old = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.10.*/bin/python3.10")))
    if not old:
        pytest.skip("needs a Python 3.10 (pyenv install 3.10)")
    proc = subprocess.Popen([old[0], "-c", "import time; time.sleep(5)"])
    try:
        time.sleep(0.3)
        with pytest.raises(UnsupportedPython, match=r"3\.10 is not read"):
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
