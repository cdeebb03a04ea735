"""Frames of PyTorch memory snapshots: which to keep, what to call them, what kind they are.

A snapshot frame is ``{"name", "filename", "line"}``, leaf first, Python frames interleaved
with the C/C++ frames of the interpreter and of PyTorch.

* Kept frames: the same omit rules as PyTorch's own viewers (``_memory_viz._frame_filter``
  and ``MemoryViz.js``'s ``frameFilter``: the unwinder, the allocator's capture, ``_start``,
  ``PyEval_``/``PyObject_``/``PyFunction_`` and the dispatcher's ``Register*`` files), so
  that aiflame's graph and PyTorch's agree frame for frame (``frames="pytorch"``, the
  default). ``frames="compact"`` also hides the CPython interpreter's and libc's own C frames
  (``PyMethod_New``, ``_PyRun_SimpleFileObject``, ``slot_tp_call``, ``method_vectorcall_O``,
  ``__libc_init_first``..., and any C frame of CPython's own source files), which the
  unwinder interleaves with every Python frame; ``frames="all"`` keeps everything.
* Names: Python frames are named as in traces and live recordings
  (:mod:`aiflame.symbolize.pyframes`): ``Class > method (file.py:first line)``, the file
  relative to site-packages or the standard library as the PyTorch profiler writes it. The
  snapshot holds only the bare function name and the line running, so the class and the
  function's first line come from the source file where it is readable here (see
  :mod:`aiflame.symbolize.pyclass`; each file indexed once while it is unchanged);
  without it, the bare name and the line running. C++ names are demangled when mangled
  (PyTorch's unwinder usually demangles already).
* File and line stay on the frame (``??`` from the unwinder means unknown: left empty).
* Kinds: ``python`` for frames of ``.py`` files, ``cpp`` for C++ names, ``native`` for C.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from aiflame.model import FrameKind, ProfileBuilder
from aiflame.symbolize.cxa import demangle_all
from aiflame.symbolize.demangle import is_mangled
from aiflame.symbolize.pyframes import PythonNaming

# From torch/cuda/_memory_viz.py (_frame_filter) and torch/utils/viz/MemoryViz.js
# (frameFilter): substrings of function names and of file names that both viewers omit.
OMIT_FUNCTIONS = (
    "unwind::unwind",
    "CapturedTraceback::gather",
    "gather_with_cpp",
    "_start",
    "__libc_start_main",
    "PyEval_",
    "PyObject_",
    "PyFunction_",
)
OMIT_FILENAMES = (
    "core/boxing",
    "/Register",
    "/Redispatch",
    "pythonrun.c",
    "Modules/main.c",
    "Objects/call.c",
    "Objects/methodobject.c",
    "pycore_ceval.h",
    "ceval.c",
    "cpython/abstract.h",
)

FRAME_MODES = ("pytorch", "compact", "all")
# C frames of libpython and libc (never C++): the glue between Python frames. By name: the
# public API (PyObject_Call, _PyEval_EvalFrameDefault) and CPython's static helpers that
# unwinders name in every stack (slot_tp_call, method_vectorcall_O, cfunction_call,
# run_eval_code_obj, pymain_run_file; LTO clones carry a ".llvm.<hash>" suffix)...
_INTERPRETER = re.compile(
    r"^_{0,2}Py(?:[A-Z][A-Za-z]*)?_|^__libc_|^_start$|^main$"
    r"|^(?:method_vectorcall|cfunction_(?:vectorcall|call)|slot_(?:tp|nb|sq|mp)_|vectorcall_"
    r"|run_eval_code_obj$|run_mod$|pyrun_|pymain_|builtin_\w+_impl$|do_call_core$"
    r"|binary_op1?$|gen_send_ex2?$|task_step(?:_impl)?$|context_run$|partial_vectorcall$"
    r"|type_call$|method_call$|_?PyVectorcall_)"
)
_LLVM_CLONE = re.compile(r"\.llvm\.\d+$")
# ... and by file: any C frame of CPython's own sources (Python/ceval.c, Objects/call.c,
# Modules/_asynciomodule.c, Include/internal/pycore_ceval.h), where the build kept them.
_CPYTHON_SOURCE = re.compile(r"(?:^|/)(?:Python|Objects|Modules|Include|Parser)/[\w./-]*\.[ch]$")

NO_FRAMES_KEPT = "[no frames kept]"
UNKNOWN_FILES = frozenset(("??", ""))


def omitted(name: str, filename: str) -> bool:
    """True for frames PyTorch's memory viewers leave out."""
    return any(s in name for s in OMIT_FUNCTIONS) or any(s in filename for s in OMIT_FILENAMES)


def _interpreter(name: str, filename: str) -> bool:
    """True for a C frame of the interpreter or libc, by its file or its name."""
    return bool(_CPYTHON_SOURCE.search(filename) or _INTERPRETER.match(_LLVM_CLONE.sub("", name)))


def frame_kind(name: str, filename: str) -> FrameKind:
    if filename.endswith((".py", ".pyw")) or name == "<module>":
        return FrameKind.PYTHON
    if "::" in name or is_mangled(name) or "(anonymous namespace)" in name:
        return FrameKind.CPP
    return FrameKind.NATIVE


class FrameNamer:
    """Turns snapshot frame lists into stack ids of a :class:`ProfileBuilder`, with caches.

    Snapshots share frame dicts between events (the pickle memoizes them), so frames are
    cached by object identity; the caller keeps the snapshot alive while this is in use.
    """

    def __init__(
        self,
        builder: ProfileBuilder,
        frames: str = "pytorch",
        resolve_classes: bool = True,
    ) -> None:
        self.builder = builder
        if frames not in FRAME_MODES:
            raise ValueError(f"frames must be one of {', '.join(FRAME_MODES)}, not {frames!r}")
        self.mode = frames
        self.naming = PythonNaming(read_sources=resolve_classes)
        self._mangled: dict[int, str] = {}  # frame id -> mangled name, for finish()
        self._by_dict: dict[int, int] = {}  # id(frame dict) -> frame id, -1 if omitted
        self._by_key: dict[tuple[str, str, int], int] = {}
        # root frames -> (ids of the frame dicts -> stack id)
        self._stacks: dict[tuple[int, ...], dict[tuple[int, ...], int]] = {}

    def finish(self) -> None:
        """Demangle the mangled names seen, in one batch (libstdc++, else one ``c++filt``)."""
        if not self._mangled:
            return
        done = demangle_all(self._mangled.values())
        names, intern = self.builder.frames.name, self.builder.strings.intern
        for fid, name in self._mangled.items():
            if name in done:
                names[fid] = intern(done[name])
        self._mangled.clear()

    def frame_id(self, f: dict[str, Any]) -> int:
        fid = self._by_dict.get(id(f))
        if fid is None:
            name = str(f.get("name", "") or "??")
            filename = str(f.get("filename", "") or "")
            line = int(f.get("line", 0) or 0)
            key = (name, filename, line)
            fid = self._by_key.get(key)
            if fid is None:
                fid = self._by_key[key] = self._intern(name, filename, line)
            self._by_dict[id(f)] = fid
        return fid

    def _intern(self, name: str, filename: str, line: int) -> int:
        if self.mode != "all" and omitted(name, filename):
            return -1
        kind = frame_kind(name, filename)
        if self.mode == "compact" and kind == FrameKind.NATIVE and _interpreter(name, filename):
            return -1
        shown = name
        file = "" if filename in UNKNOWN_FILES else filename
        if kind == FrameKind.PYTHON:  # one frame per function, named as traces name it
            shown, _, line = self.naming.sampled(name, file, line)
        fid = self.builder.frame(shown, kind, file, line)
        if kind == FrameKind.CPP and is_mangled(name):
            self._mangled[fid] = name
        return fid

    def stack(self, frames: Sequence[dict[str, Any]], root: tuple[int, ...] = ()) -> int:
        """Stack id of a leaf-first snapshot frame list, below the frames ``root``.

        A stack whose frames are all omitted becomes ``[no frames kept]`` rather than the
        empty stack, which would make its bytes vanish from the graph.
        """
        cache = self._stacks.setdefault(root, {})
        key = tuple(map(id, frames))
        sid = cache.get(key)
        if sid is None:
            sid = cache[key] = self._new_stack(frames, root)
        return sid

    def stacks(self, frame_lists: Iterable[Sequence[dict[str, Any]]]) -> list[int]:
        """:meth:`stack` of many frame lists: the hot loop of big traces.

        Every allocation has its own frame list, so lists are looked up by a cheap key (length
        and three frame identities) and confirmed with ``==``, which compares the lists in C
        and stops at identical elements: about 10x cheaper than a key of every frame's id.
        An empty list gives -1 (the empty stack): the caller says why it has no frames.
        """
        return list(self.iter_stacks(frame_lists))

    def iter_stacks(self, frame_lists: Iterable[Sequence[dict[str, Any]]]) -> Iterator[int]:
        """:meth:`stacks`, one at a time (for ``np.fromiter``: no list of ints)."""
        buckets: dict[tuple[int, ...], list[tuple[Sequence[dict[str, Any]], int]]] = {}
        for frames in frame_lists:
            n = len(frames)
            if not n:
                yield -1
                continue
            key = (n, id(frames[0]), id(frames[n >> 1]), id(frames[-1]))
            found = buckets.get(key)
            sid = -1
            if found is None:
                found = buckets[key] = []
            else:
                for known, known_sid in found:
                    if known is frames or known == frames:  # `is` first: O(1)
                        sid = known_sid
                        break
            if sid < 0:
                sid = self.stack(frames)
                found.append((frames, sid))
            yield sid

    def _new_stack(self, frames: Sequence[dict[str, Any]], root: tuple[int, ...]) -> int:
        fid = self.frame_id
        ids = [i for i in (fid(f) for f in reversed(frames)) if i >= 0]
        if not ids and not root:
            ids = [self.label_frame(NO_FRAMES_KEPT)]
        return self.builder.stack([*root, *ids])

    def label_frame(self, name: str) -> int:
        """A synthetic frame such as ``[allocated before recording started]``."""
        return self.builder.frame(name, FrameKind.LABEL)
