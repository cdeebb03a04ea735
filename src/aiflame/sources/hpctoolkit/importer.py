"""HPCToolkit databases (format v4): CPU calling contexts down to GPU kernels, and GPU
PC samples by source line and instruction with their stall reasons.

A database directory holds ``meta.db`` (the calling-context tree, metrics, names) and
``profile.db`` (values per CPU thread or GPU stream); the importer takes the directory or
either file (``.gz`` copies are read too). ``hpcrun -e gpu=nvidia,pc`` attributes CUPTI's
PC samples (``GINS``, ``GINS:STL_*``) to the GPU contexts below a ``<gpu kernel>``
placeholder that hangs under the host call of the launch; that placeholder becomes the
``-`` delimiter, the GPU function below it the kernel, GPU loops and lines the
``gpu-source`` frames (inlined callees add a line level), GPU instructions (when the
database lists them) the ``gpu-instruction`` frames, and each ``GINS:STL_*`` reason a
``gpu-stall`` leaf. Samples issued without a stall (``GINS`` minus the stalls) go under
``STL_NONE``.

Values are taken from the *execution* (inclusive) scope: a context's own value is its
inclusive value minus that of the children ``meta.db`` lists. ``hpcprof`` keeps values
for contexts it does not list (it elides GPU instruction contexts, for one), and this way
they stay with the listed context above them: totals always equal HPCToolkit's.
``GINS`` counts are weighted by the sampling period (``GSAMP:PER``, in GPU cycles); they
are divided by it, so ``gpu-samples`` counts samples and the period is kept in meta.
``GKER (sec)`` becomes ``gpu-time`` and ``GKER:COUNT`` ``kernel-count``.

``hpcprof`` keeps the GPU contexts only down to the source line. hpcrun's measurement
directory (:mod:`aiflame.sources.hpctoolkit.measurements`) has every sampled instruction: given
beside the database (``aiflame flamegraph X.d X.m``), or found next to it (``X.m`` for
``X.d``, ``X-measurements`` for ``X-database``), the GPU samples are taken from it, one per
instruction with its SASS, under the host contexts of the database; the database's and the
measurements' ``GINS`` totals must agree. A measurement directory alone (or one ``.hpcrun``
file) is read too, its host frames named from the ``structs/`` hpcrun's ``hpcstruct`` left.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterable

import numpy as np

from aiflame.errors import InputError
from aiflame.model import FrameKind, Profile, ProfileBuilder, SampleType, gpu
from aiflame.model.stacks import EMPTY_STACK
from aiflame.sources.hpctoolkit import db, hpcrun_fmt
from aiflame.sources.hpctoolkit import measurements as meas_dir
from aiflame.sources.inputs import Input
from aiflame.symbolize.cxa import demangle_all
from aiflame.symbolize.kinds import DELIMITER, guess_kind

FORMAT = "hpctoolkit"

GPU_TIME = SampleType("gpu-time", "nanoseconds")
KERNEL_COUNT = SampleType("kernel-count", "count")
CPU_TIME = SampleType("cpu-time", "nanoseconds")

GPU_KERNEL_PLACEHOLDER = "<gpu kernel>"
ALL_SAMPLES = "GINS"
ANY_STALL = "GINS:STL_ANY"
STALL_PREFIX = "GINS:STL_"
NO_STALL = "STL_NONE"
PERIOD = "GSAMP:PER (cyc)"
_SECONDS = {"GKER (sec)": GPU_TIME, "CPUTIME (sec)": CPU_TIME}

_MAGIC = db.MAGIC
_DB_FILES = ("meta.db", "profile.db", "cct.db", "trace.db")


def sniff(head: bytes, path: str) -> bool:
    return head.startswith(_MAGIC) or hpcrun_fmt.is_hpcrun(head)


def is_database_dir(path: str) -> bool:
    return os.path.isdir(path) and any(
        os.path.isfile(os.path.join(path, n)) for n in ("meta.db", "meta.db.gz")
    )


def sniff_directory(path: str) -> bool:
    return is_database_dir(path) or meas_dir.is_measurement_dir(path)


def pair_inputs(paths: list[str]) -> tuple[list[str], dict[str, str]]:
    """Databases given with measurement directories: (the inputs left to load, database ->
    its measurements). A directory pairs with the database of the same name (``X.m`` and
    ``X.d``, ``X-measurements`` and ``X-database``), or one of each pairs whatever names."""
    dbs = [p for p in paths if is_database_dir(p)]
    meas = [p for p in paths if not is_database_dir(p) and meas_dir.is_measurement_dir(p)]
    pairs: dict[str, str] = {}
    for m in meas:
        for d in dbs:
            if d not in pairs and meas_dir.beside_database(d) == os.path.abspath(m.rstrip("/")):
                pairs[d] = m
    if len(dbs) == 1 and len(meas) == 1 and not pairs:
        pairs[dbs[0]] = meas[0]
    used = set(pairs.values())
    return [p for p in paths if p not in used], pairs


def load(source: Input, measurements: str | None = None, **_: object) -> Profile:
    if meas_dir.is_measurement_dir(source.path) and not is_database_dir(source.path):
        return meas_dir.build_profile(meas_dir.Measurements(source.path))
    if not os.path.isdir(source.path) and hpcrun_fmt.is_hpcrun(source.head(32)):
        if source.is_stdin:
            raise InputError(source.path, "an hpcrun file is read from its path (structs/ beside)")
        return meas_dir.build_profile(meas_dir.Measurements(source.path))
    meta_data, profile_data = _read_database(source)
    try:
        meta = db.read_meta(meta_data)
        profiles = db.read_profiles(profile_data, meta.id_names)
    except db.FormatError as e:
        raise InputError(source.path, str(e)) from None
    importer = _Importer(meta, profiles)
    if importer.has_gpu_samples():
        folder = source.path if os.path.isdir(source.path) else os.path.dirname(source.path)
        found = measurements or meas_dir.beside_database(folder or ".")
        if found:
            importer.use_measurements(meas_dir.Measurements(found), explicit=bool(measurements))
    profile = importer.run()
    profile.meta.setdefault("title", meta.title)
    return profile


def _read_database(source: Input) -> tuple[bytes, bytes]:
    """The bytes of meta.db and profile.db, from a database directory or one of its files."""
    if os.path.isdir(source.path):
        folder = source.path
    elif source.is_stdin:
        raise InputError(source.path, "an HPCToolkit database is a directory; give its path")
    else:
        folder = os.path.dirname(source.path) or "."
        name = os.path.basename(source.path).removesuffix(".gz")
        if name not in _DB_FILES:
            head = source.head(16)
            if head[10:14] != db.FORMAT_META:
                raise InputError(source.path, "HPCToolkit file; give the database directory")
            return source.read_bytes(), _read_beside(source.path, folder, "profile.db")
    return _read_beside(source.path, folder, "meta.db"), _read_beside(
        source.path, folder, "profile.db"
    )


def _read_beside(path: str, folder: str, name: str) -> bytes:
    for candidate in (name, name + ".gz"):
        full = os.path.join(folder, candidate)
        if os.path.isfile(full):
            try:
                if candidate.endswith(".gz"):
                    with gzip.open(full, "rb") as f:
                        return f.read()
                with open(full, "rb") as f:
                    return f.read()
            except (OSError, EOFError) as e:
                raise InputError(full, f"cannot read: {e}") from None
    raise InputError(path, f"HPCToolkit database without {name} (looked in {folder})")


class _Importer:
    def __init__(self, meta: db.MetaDB, profiles: list[db.ProfileValues]) -> None:
        self.meta = meta
        # hpcstruct leaves a name mangled where it could not demangle it
        self.readable = demangle_all(fn.name for fn in meta.functions if fn.name)
        self.profiles = [p for p in profiles if not p.is_summary] or profiles[:1]
        self.b = ProfileBuilder([])
        self.contexts = meta.contexts
        self.children: dict[int, list[int]] = {}
        for c in self.contexts.values():
            if c.ctx_id != c.parent:
                self.children.setdefault(c.parent, []).append(c.ctx_id)
        self.stack_of: dict[int, int] = {}
        self.gpu_side: dict[int, bool] = {}
        self.meas: meas_dir.Measurements | None = None
        self.meas_explicit = False
        self._calls: dict[int, list[int]] = {}

    def has_gpu_samples(self) -> bool:
        return any(m.name == ALL_SAMPLES for m in self.meta.metrics)

    def use_measurements(self, meas: meas_dir.Measurements, explicit: bool) -> None:
        """Take the GPU samples from hpcrun's measurements (one per instruction)."""
        if explicit and meas.program and self.meta.title and meas.program != self.meta.title:
            raise InputError(
                meas.path,
                f"measurements of '{meas.program}', not of the database's '{self.meta.title}'",
            )
        self.meas, self.meas_explicit = meas, explicit

    # -- values -----------------------------------------------------------------------------
    def _metric_ids(self, names: Iterable[str]) -> dict[str, int]:
        wanted = set(names)
        return {m.name: m.execution_id for m in self.meta.metrics if m.name in wanted}

    def _own_values(self, p: db.ProfileValues, metric_id: int) -> dict[int, float]:
        """Inclusive value of each listed context minus that of its listed children."""
        sel = p.metric == metric_id
        if not np.any(sel):
            return {}
        rows = np.flatnonzero(sel)
        owner = np.searchsorted(p.ctx_start, rows, side="right") - 1
        inclusive = dict(zip(p.ctx_ids[owner].tolist(), p.value[rows].tolist(), strict=True))
        own: dict[int, float] = {}
        for ctx, value in inclusive.items():
            if ctx not in self.contexts:
                continue  # not listed: its value is inside its listed ancestor's
            below = sum(inclusive.get(ch, 0.0) for ch in self.children.get(ctx, ()))
            rest = value - below
            if rest > 1e-9 * max(abs(value), 1.0):
                own[ctx] = rest
        return own

    # -- stacks -----------------------------------------------------------------------------
    def _path(self, ctx: int) -> list[int]:
        path = []
        while ctx in self.contexts and ctx not in self.stack_of:
            path.append(ctx)
            parent = self.contexts[ctx].parent
            if parent == ctx:
                break
            ctx = parent
        path.reverse()
        return path

    def stack(self, ctx: int) -> int:
        """Stack id of a context (memoized from its closest built ancestor)."""
        if ctx in self.stack_of:
            return self.stack_of[ctx]
        path = self._path(ctx)
        if not path:
            return EMPTY_STACK
        first_parent = self.contexts[path[0]].parent
        sid = self.stack_of.get(first_parent, EMPTY_STACK)
        gpu_side = self.gpu_side.get(first_parent, False)
        for c in path:
            frame, gpu_side = self._frame(self.contexts[c], gpu_side)
            if frame is not None:
                sid = self.b.stacks.intern((frame,), sid)
            self.stack_of[c] = sid
            self.gpu_side[c] = gpu_side
        return sid

    def _frame(self, c: db.Context, gpu_side: bool) -> tuple[int | None, bool]:
        m = self.meta
        fn = m.functions[c.function] if c.function >= 0 else None
        if c.ctx_id in m.entry_names:
            return None, False  # "main thread": the thread label says it
        if c.lexical_type == db.LEX_FUNCTION:
            name = self.readable.get(fn.name, fn.name) if fn and fn.name else "[unknown function]"
            if name == GPU_KERNEL_PLACEHOLDER:
                return self.b.frame(DELIMITER, FrameKind.DELIMITER), True
            file = m.files[fn.file] if fn and fn.file >= 0 else ""
            line = fn.line if fn else 0
            module = m.modules[fn.module] if fn and fn.module >= 0 else ""
            if gpu_side:
                if c.relation == db.REL_INLINED_CALL:
                    return None, True  # the lines inside it are the next inline level
                return self.b.frame(name, FrameKind.GPU_KERNEL, file, line, module), True
            return self.b.frame(name, guess_kind(name), file, line, module), False
        if not gpu_side:
            return None, False  # host loops, lines and instructions: the function says it
        file = m.files[c.file] if c.file >= 0 else ""
        if c.lexical_type == db.LEX_LOOP:
            name = "loop at " + gpu.source_line_name(file, c.line)
            return self.b.frame(name, FrameKind.GPU_SOURCE, file, c.line), True
        if c.lexical_type == db.LEX_LINE:
            name = gpu.source_line_name(file, c.line)
            return self.b.frame(name, FrameKind.GPU_SOURCE, file, c.line), True
        if c.lexical_type == db.LEX_INSTRUCTION:
            module = m.modules[c.module] if c.module >= 0 else ""
            name = gpu.instruction_name("", c.offset)
            kind = FrameKind.GPU_INSTRUCTION
            return self.b.frame(name, kind, module=module, address=c.offset), True
        return None, gpu_side

    # -- samples ----------------------------------------------------------------------------
    def run(self) -> Profile:
        names = [m.name for m in self.meta.metrics]
        stall_names = sorted(n for n in names if n.startswith(STALL_PREFIX) and n != ANY_STALL)
        ids = self._metric_ids([ALL_SAMPLES, PERIOD, "GKER:COUNT", *stall_names, *_SECONDS])
        period = self._period(ids.get(PERIOD))
        b = self.b
        if ALL_SAMPLES in ids:
            b.add_type(gpu.GPU_SAMPLES)
        for name, st in _SECONDS.items():
            if name in ids:
                b.add_type(st)
        if "GKER:COUNT" in ids:
            b.add_type(KERNEL_COUNT)
        if not b.sample_types:
            raise InputError(
                "hpctoolkit", "database has no GPU sample, kernel or CPU time metrics to show"
            )
        col = {t.name: i for i, t in enumerate(b.sample_types)}
        if self.meas is not None and ALL_SAMPLES in ids:
            self._check_measurements(ids[ALL_SAMPLES])
        if self.meas is not None:
            self._add_measured_samples(stall_names, period, col[gpu.GPU_SAMPLES.name])
            ids.pop(ALL_SAMPLES)  # the database's own GINS are the same samples, by line
        stall_frames: dict[str, int] = {}
        for p in self.profiles:
            labels = {k.lower(): str(v) for k, v in p.id_tuple if k not in ("NODE", "SUMMARY")}
            self._add_samples(p, ids, stall_names, period, col, stall_frames, labels)
        b.meta["default_type"] = 0
        if period:
            b.meta[gpu.META_PERIOD] = period
            b.meta[gpu.META_PERIOD_UNIT] = "cycles"
        return b.build()

    def _period(self, metric_id: int | None) -> float:
        if metric_id is None:
            return 0.0
        best = 0.0
        for p in self.profiles:
            for v in self._own_values(p, metric_id).values():
                best = max(best, v)
        return best

    def _add_samples(
        self,
        p: db.ProfileValues,
        ids: dict[str, int],
        stall_names: list[str],
        period: float,
        col: dict[str, int],
        stall_frames: dict[str, int],
        labels: dict[str, str],
    ) -> None:
        b = self.b
        ntypes = len(b.sample_types)
        scale = 1.0 / period if period else 1.0
        if ALL_SAMPLES in ids:
            all_own = self._own_values(p, ids[ALL_SAMPLES])
            stalls = {n: self._own_values(p, ids[n]) for n in stall_names if n in ids}
            for ctx, total in sorted(all_own.items()):
                parts = [(n[len("GINS:") :], v[ctx]) for n, v in stalls.items() if ctx in v]
                rest = total - sum(v for _, v in parts)
                if rest > 1e-9 * total:
                    parts.append((NO_STALL, rest))
                base = self.stack(ctx)
                for reason, value in parts:
                    frame = stall_frames.get(reason)
                    if frame is None:
                        frame = stall_frames[reason] = b.frame(reason, FrameKind.GPU_STALL)
                    row = [0.0] * ntypes
                    row[col[gpu.GPU_SAMPLES.name]] = value * scale
                    lab = dict(labels)
                    lab[gpu.STALL_LABEL] = reason
                    lab[gpu.STALL_CLASS_LABEL] = gpu.stall_class(reason)
                    b.add(b.stacks.intern((frame,), base), row, b.labels(lab))
        for name, st in _SECONDS.items():
            if name in ids:
                self._add_metric(p, ids[name], col[st.name], 1e9, labels)
        if "GKER:COUNT" in ids:
            self._add_metric(p, ids["GKER:COUNT"], col[KERNEL_COUNT.name], 1.0, labels)

    def _add_metric(
        self, p: db.ProfileValues, metric_id: int, column: int, scale: float, labels: dict
    ) -> None:
        for ctx, value in sorted(self._own_values(p, metric_id).items()):
            self.b.add_value(self.stack(ctx), column, value * scale, self.b.labels(labels))

    # -- GPU samples from the measurement directory -------------------------------------------
    def _check_measurements(self, gins_id: int) -> None:
        """The measurements must be those the database was made of: same GINS in total."""
        assert self.meas is not None
        ours = sum(sum(self._own_values(p, gins_id).values()) for p in self.profiles)
        theirs = 0.0
        for t in self.meas.threads:
            gins = t.values({meas_dir.ALL_SAMPLES}).get(meas_dir.ALL_SAMPLES, {})
            theirs += sum(gins[n] for n, _ in meas_dir.gpu_sample_nodes(t, gins))
        if abs(ours - theirs) <= 1e-9 * max(ours, 1.0):
            return
        why = f"GINS {theirs:,.0f} in the measurements, {ours:,.0f} in the database"
        if self.meas_explicit:
            raise InputError(self.meas.path, f"not the measurements of this database ({why})")
        self.b.meta["info:GPU instructions"] = f"not read from {self.meas.path} ({why})"
        self.meas = None

    def _add_measured_samples(self, stall_names: list[str], period: float, column: int) -> None:
        assert self.meas is not None
        maker = meas_dir.StackMaker(self.meas, self.b)
        joined = own = 0
        for ti, t in enumerate(self.meas.threads):

            def base(
                placeholder: int,
                binary: meas_dir.GpuBinary,
                kernel: meas_dir.Kernel,
                ti: int = ti,
                t: meas_dir.Thread = t,
            ) -> int:
                nonlocal joined, own
                names = maker.host_names(t, placeholder)
                ctx = self._kernel_context([*names, kernel[0] if kernel else None])
                if ctx is not None:
                    joined += 1
                    return self.stack(ctx)
                own += 1
                frame = maker.kernel_frame(binary, kernel)
                return self.b.stacks.intern((frame,), maker.host_stack(ti, t, placeholder))

            vals = t.values({meas_dir.ALL_SAMPLES, *stall_names})
            meas_dir.add_pc_samples(maker, t, vals, stall_names, period, column, base)
        note = f"one sample per instruction, from {self.meas.path}"
        if own:
            note += f" ({own} of {joined + own} instructions under stacks of hpcstruct's names)"
        self.b.meta["info:GPU instructions"] = note

    def _calls_below(self, ctx: int) -> list[int]:
        """The contexts called from ``ctx``'s body (below its loops, lines, inlined code)."""
        hit = self._calls.get(ctx)
        if hit is None:
            hit, todo = [], list(self.children.get(ctx, ()))
            while todo:
                c = self.contexts[todo.pop()]
                if c.lexical_type == db.LEX_FUNCTION and c.relation == db.REL_CALL:
                    hit.append(c.ctx_id)
                else:
                    todo.extend(self.children.get(c.ctx_id, ()))
            self._calls[ctx] = hit
        return hit

    def _function_name(self, ctx: int) -> str:
        f = self.contexts[ctx].function
        return self.meta.functions[f].name if f >= 0 else ""

    def _kernel_context(self, names: list[str | None]) -> int | None:
        """The database's context of a kernel launched through the calls ``names`` (the
        function of each host node of hpcrun's CCT, ``<gpu kernel>``, the kernel; None:
        any function): walked down from the entry points, one call level per name. None
        unless all the contexts it can be give one stack."""
        found = list(self.meta.entry_names)
        for name in names:
            found = [
                k for c in found for k in self._calls_below(c)
                if name is None or self._function_name(k) == name
            ]  # fmt: skip
            if not found:
                return None
        stacks = {self.stack(c) for c in found}
        return found[0] if len(stacks) == 1 else None
