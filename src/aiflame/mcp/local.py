"""The tools over files: each computes what an aiflame command computes, bounded.

=================  ==========================================================
tool               the command whose numbers it gives
=================  ==========================================================
analyze_trace      ``aiflame analyze TRACE... --json - --top N``
top_functions      ``aiflame top INPUT... [--metric M] [--by B] [--kind K] --json``
top_kernels        traces: ``aiflame analyze`` (top kernels); profiles:
                   ``aiflame top --kind gpu-kernel``
gpu_stall_reasons  ``aiflame analyze SAMPLES --json -`` (gpu_stalls)
diff_profiles      ``aiflame diff BASE TEST -o d.folded`` (by function)
memory_at_peak     ``aiflame memory SNAPSHOT -o m.folded`` (peak-bytes)
=================  ==========================================================
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from aiflame.analysis.hotspots import first_frame_of_names, function_values, top_functions
from aiflame.errors import AiflameError
from aiflame.mcp import bounds
from aiflame.mcp.paths import Roots
from aiflame.model import FrameKind, Profile
from aiflame.render.jsonsafe import dumps

MAX_INPUTS = 64  # files one call may read (a directory of ranks)


class LocalTools:
    def __init__(self, roots: Roots) -> None:
        self.roots = roots
        self._cache: OrderedDict[tuple, Profile] = OrderedDict()
        self._lock = threading.Lock()

    # -- inputs -------------------------------------------------------------------------------
    def inputs(self, paths: list[str]) -> list[str]:
        """The files ``paths`` name (a directory: its traces), each under a root."""
        from aiflame.sources.registry import expand_inputs

        if not paths:
            raise AiflameError("give at least one input file or directory")
        named = [self.roots.resolve(p) for p in paths]
        files = [self.roots.resolve(f) for f in expand_inputs(named)]
        if len(files) > MAX_INPUTS:
            raise AiflameError(f"{len(files)} input files; at most {MAX_INPUTS} in one call")
        return files

    def profile(self, files: list[str]) -> Profile:
        """The inputs loaded and merged as ``aiflame top``/``flamegraph`` load them (the last
        few kept, keyed by their paths, sizes and modification times)."""
        from aiflame.sources import load_many

        key = tuple((f, os.stat(f).st_size, os.stat(f).st_mtime_ns) for f in files)
        with self._lock:
            found = self._cache.get(key)
            if found is not None:
                self._cache.move_to_end(key)
                return found
        profile = load_many(files)
        with self._lock:
            self._cache[key] = profile
            while len(self._cache) > 4:
                self._cache.popitem(last=False)
        return profile

    @staticmethod
    def _formats(profile: Profile, files: list[str]) -> list[str]:
        fmt = str(profile.meta.get("format", ""))
        return [fmt] * len(files) if fmt else []

    # -- tools ----------------------------------------------------------------------------------
    def analyze_trace(self, paths: list[str], top: int | None = None) -> dict[str, Any]:
        from aiflame.analysis import read
        from aiflame.analysis.gpu_inputs import split_inputs, stall_report
        from aiflame.analysis.report import Options, analyze
        from aiflame.analysis.schema import to_json

        n = bounds.rows(top)
        files = self.inputs(paths)
        traces, samples = split_inputs(files)
        answer: dict[str, Any] = {}
        events: dict[str, int] = {}
        formats: list[str] = []
        if traces:
            inputs = [read(path) for path in traces]
            report = analyze(
                [i.trace for i in inputs], options=Options(top=n), captures=[None] * len(inputs)
            )
            full = _loads(to_json(report))
            answer["ranks"] = [_rank_summary(r, n) for r in full["ranks"]]
            answer["job"] = _job_summary(full.get("job") or {}, n)
            events = {
                "gpu_activities": sum(int(i.trace.gpu_ts.size) for i in inputs),
                "cpu_slices": sum(int(i.trace.cpu_ts.size) for i in inputs),
            }
            formats = [i.format for i in inputs]
        if samples:
            stalls = stall_report(samples, n)
            answer["gpu_stalls"] = _stalls_summary(stalls.to_json(), n) if stalls else None
            formats += ["gpu-pc-samples"] * len(samples)
        answer["provenance"] = bounds.provenance(
            inputs=bounds.file_inputs(traces + samples, formats),
            command=f"aiflame analyze {' '.join(traces + samples)} --json - --top {n}",
            metric={"name": "GPU time", "unit": "microseconds"},
            samples=events,
        )
        return bounds.bounded(answer)

    def top_functions(
        self,
        paths: list[str],
        metric: str | None = None,
        by: str = "self",
        kind: str | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        files = self.inputs(paths)
        profile = self.profile(files)
        kinds = frozenset({FrameKind.from_slug(kind)}) if kind else None
        if kind and FrameKind.from_slug(kind) == FrameKind.UNKNOWN and kind != "unknown":
            raise AiflameError(f"unknown frame kind {kind!r}")
        try:
            h = top_functions(profile, metric, by, bounds.rows(limit), kinds)
        except KeyError as e:
            raise AiflameError(str(e.args[0])) from None
        table = h.to_json()
        answer = {
            "functions": [
                {**row, "name": bounds.name(str(row["name"]))} for row in table["functions"]
            ],
            "functions_with_value": table["functions_with_value"],
            "by": by,
            "total": table["total"],
            "provenance": bounds.provenance(
                inputs=bounds.file_inputs(files, self._formats(profile, files)),
                command=_top_command(files, metric, by, kind, bounds.rows(limit)),
                metric={"name": h.metric, "unit": h.unit},
                samples=h.samples,
            ),
        }
        return bounds.bounded(answer)

    def top_kernels(self, paths: list[str], limit: int | None = None) -> dict[str, Any]:
        from aiflame.analysis.gpu_inputs import split_inputs

        files = self.inputs(paths)
        traces, samples = split_inputs(files)
        if traces and not samples:
            from aiflame.sources.inputs import Input
            from aiflame.sources.registry import detect

            # GPU timelines: the analysis' kernel table (count, mean, share of GPU time)
            if all(hasattr(detect(Input(t)), "trace_input") for t in traces):
                answer = self.analyze_trace(traces, limit)
                kernels = [
                    {"rank": r.get("name"), "kernels": r.get("top_kernels", [])}
                    for r in answer.get("ranks", [])
                ]
                prov = answer["provenance"]
                prov["metric"] = {"name": "GPU kernel time", "unit": "microseconds"}
                return bounds.bounded({"ranks": kernels, "provenance": prov})
        answer = self.top_functions(files, None, "self", FrameKind.GPU_KERNEL.slug, limit)
        answer["kernels"] = answer.pop("functions")
        return answer

    def gpu_stall_reasons(self, paths: list[str], limit: int | None = None) -> dict[str, Any]:
        from aiflame.analysis.gpu_inputs import split_inputs, stall_report

        n = bounds.rows(limit)
        files = self.inputs(paths)
        _, samples = split_inputs(files)
        if not samples:
            raise AiflameError(
                "no GPU PC samples among the inputs (HPCToolkit, Nsight Compute, CUPTI PC "
                "sampling dumps, rocprofv3 PC sampling, iaprof, or aiflame record "
                "--gpu-pc-sampling output)"
            )
        stalls = stall_report(samples, n)
        if stalls is None:
            raise AiflameError("the inputs hold no GPU PC samples with a value")
        j = stalls.to_json()
        unit = j.get("period_unit") or "samples"
        answer = _stalls_summary(j, n)
        answer["provenance"] = bounds.provenance(
            inputs=bounds.file_inputs(samples),
            command=f"aiflame analyze {' '.join(samples)} --json - --top {n}",
            metric={"name": "gpu-samples", "unit": "count", "period": j.get("period"),
                    "period_unit": unit},
            samples=j["total_samples"],
        )  # fmt: skip
        return bounds.bounded(answer)

    def diff_profiles(
        self, base: str, test: str, metric: str | None = None, limit: int | None = None
    ) -> dict[str, Any]:
        from aiflame.analysis.compare import diff_inputs

        n = bounds.rows(limit)
        (base_file,) = self._one(base)
        (test_file,) = self._one(test)
        b, t, diff = diff_inputs(base_file, test_file, metric=metric)
        if diff.is_empty():
            raise AiflameError(f"{base} and {test}: no samples with a value in either")
        info: dict[str, Any] = dict(diff.meta["diff"])  # type: ignore[call-overload]
        bcol, tcol = int(info["base"]), int(info["test"])
        self_b, total_b = function_values(diff, bcol)
        self_t, total_t = function_values(diff, tcol)
        delta = self_t - self_b
        names = np.flatnonzero((self_b != 0) | (self_t != 0))
        first = first_frame_of_names(diff)
        S, fr = diff.strings, diff.frames

        def rows(order: np.ndarray) -> list[dict[str, Any]]:
            out = []
            for i in order[:n].tolist():
                if delta[i] == 0:
                    break
                out.append(
                    {
                        "name": bounds.name(S[i]),
                        "kind": FrameKind(fr.kind[first[i]]).slug,
                        "self_base": float(self_b[i]),
                        "self_test": float(self_t[i]),
                        "self_change": float(delta[i]),
                        "total_base": float(total_b[i]),
                        "total_test": float(total_t[i]),
                    }
                )
            return out

        grew = names[np.lexsort((names, -delta[names]))]
        shrank = names[np.lexsort((names, delta[names]))]
        unit = diff.sample_types[bcol].unit
        totals = info.get("totals") or [float(diff.values[:, bcol].sum()), 0.0]
        answer = {
            "total_base": float(diff.values[:, bcol].sum()),
            "total_test": float(diff.values[:, tcol].sum()),
            "grew": rows(grew),
            "shrank": rows(shrank),
            "provenance": bounds.provenance(
                inputs=bounds.file_inputs(
                    [base_file, test_file],
                    [str(b.meta.get("format", "")), str(t.meta.get("format", ""))],
                ),
                command=f"aiflame diff {base_file} {test_file} -o diff.folded"
                + (f" --metric {metric}" if metric else ""),
                metric={"name": str(info.get("metric") or metric or ""), "unit": unit},
                samples={"base": len(b), "test": len(t)},
                input_totals=totals,
            ),
        }
        return bounds.bounded(answer)

    def memory_at_peak(self, path: str, limit: int | None = None) -> dict[str, Any]:
        n = bounds.rows(limit)
        (file,) = self._one(path)
        profile, fmt = _memory_profile(file)
        col = profile.type_index("peak-bytes" if _has(profile, "peak-bytes") else None)
        st = profile.sample_types[col]
        if st.unit != "bytes":
            raise AiflameError(f"{path}: no memory data in bytes ({st.name} is in {st.unit})")
        # by the names of their frames, as the flame graph and the folded output show them
        by_names: dict[tuple[str, ...], float] = {}
        for s, v in profile.iter_stack_values(col):
            if s >= 0 and v > 0:
                key = tuple(profile.stack_names(s))
                by_names[key] = by_names.get(key, 0.0) + v
        per_stack = sorted(by_names.items(), key=lambda kv: (-kv[1], kv[0]))
        total = float(sum(by_names.values()))
        stacks = [
            {
                "bytes": v,
                "share": v / total if total else 0.0,
                "depth": len(names),
                "stack_leaf_first": [bounds.name(x) for x in reversed(names)][:24],
            }
            for names, v in per_stack[:n]
        ]
        sites = top_functions(profile, st.name, "self", n).to_json()["functions"]
        info = {k[5:]: v for k, v in profile.meta.items() if k.startswith("info:")}
        answer = {
            "metric_total_bytes": total,
            "summary": {k: info[k] for k in ("peak bytes", "allocated", "reserved") if k in info},
            "stacks": stacks,
            "allocation_sites": [
                {"name": bounds.name(str(r["name"])), "bytes": r["self"], "share": r["self_share"]}
                for r in sites
            ],
            "provenance": bounds.provenance(
                inputs=bounds.file_inputs([file], [fmt]),
                command=f"aiflame memory {file} -o memory.folded --metric {st.name}",
                metric={"name": st.name, "unit": st.unit},
                samples=len(profile),
                stacks=len(per_stack),
            ),
        }
        return bounds.bounded(answer)

    def _one(self, path: str) -> list[str]:
        files = self.inputs([path])
        if len(files) != 1:
            raise AiflameError(f"{path}: one input file is compared, not {len(files)}")
        return files


def _has(profile: Profile, name: str) -> bool:
    return any(t.name == name for t in profile.sample_types)


def _memory_profile(file: str) -> tuple[Profile, str]:
    """The input's memory profile as ``aiflame memory`` loads it by default."""
    from aiflame.sources.inputs import Input
    from aiflame.sources.registry import detect, load

    fmt = detect(Input(file)).FORMAT
    if fmt == "torch-memory":
        return load(file, fmt, frames="compact", resolve_classes=True), fmt
    if fmt == "kineto":
        from aiflame.sources.kineto import memory as kineto_memory

        return kineto_memory.load(Input(file), device=None), fmt
    profile = load(file, fmt)
    if not any(t.unit == "bytes" for t in profile.sample_types):
        raise AiflameError(
            f"{file}: no memory data ({fmt}); give a PyTorch memory snapshot, a profiler "
            "trace recorded with profile_memory=True, or a profile with a metric in bytes"
        )
    return profile, fmt


def _top_command(files: list[str], metric: str | None, by: str, kind: str | None, n: int) -> str:
    parts = ["aiflame top", *files, f"--by {by}", f"-n {n}", "--json"]
    if metric:
        parts.append(f"--metric {metric}")
    if kind:
        parts.append(f"--kind {kind}")
    return " ".join(parts)


def _loads(text: str) -> dict[str, Any]:
    import json

    return json.loads(text)  # type: ignore[no-any-return]


_RANK_KEYS = ("path", "rank", "name", "format", "devices", "workload", "time_breakdown")


def _rank_summary(r: dict[str, Any], n: int) -> dict[str, Any]:
    """What a model needs of one rank's report (the CLI's JSON holds the rest)."""
    out = {k: r.get(k) for k in _RANK_KEYS}
    idle = r.get("idle") or {}
    out["idle"] = {k: idle.get(k) for k in ("total_us", "gaps", "categories", "summary")}
    for key in ("top_kernels", "top_ops", "op_categories"):
        out[key] = [
            {**row, "name": bounds.name(str(row.get("name", "")))} if "name" in row else row
            for row in (r.get(key) or [])[:n]
        ]
    launch = r.get("launch") or {}
    out["launch"] = {
        k: launch.get(k)
        for k in ("launches", "launch_cpu_time_us", "launched_gpu_time_us", "shorter_than_launch")
    }
    sync = r.get("sync") or {}
    out["sync"] = {k: sync.get(k) for k in ("calls", "blocked_us", "gpu_idle_after_us")}
    out["findings"] = [_finding(f) for f in (r.get("findings") or [])[:n]]
    out["unavailable"] = r.get("unavailable")
    out["notes"] = [bounds.text(str(x)) for x in (r.get("notes") or [])[:n]]
    return out


def _finding(f: dict[str, Any]) -> dict[str, Any]:
    out = {k: f.get(k) for k in ("rule", "severity", "title", "cost_us", "share_of_gpu_time")}
    for k in ("summary", "assumption", "fix"):
        if f.get(k):
            out[k] = bounds.text(str(f[k]))
    stacks = f.get("top_stacks") or []
    if stacks:
        s = stacks[0]
        out["top_stack"] = {
            "stack": [bounds.name(str(x)) for x in (s.get("stack") or [])[-8:]],
            "cost_us": s.get("cost_us"),
            "count": s.get("count"),
        }
    return out


def _job_summary(job: dict[str, Any], n: int) -> dict[str, Any]:
    keep = ("ranks", "ranks_with_gpu_activity", "same_job", "time_breakdown_sum", "fractions",
            "computation_spread", "slowest_rank", "stragglers", "unavailable")  # fmt: skip
    out = {k: job.get(k) for k in keep if k in job}
    out["findings"] = [_finding(f) for f in (job.get("findings") or [])[:n]]
    return out


def _stalls_summary(j: dict[str, Any], n: int) -> dict[str, Any]:
    kernels = []
    for k in (j.get("kernels") or [])[:n]:
        kernels.append(
            {
                "kernel": bounds.name(str(k["kernel"])),
                "samples": k["samples"],
                "share": k["share"],
                "reasons": k["reasons"][:n],
                "lines": k["lines"][:n],
                "instructions": k["instructions"][:n],
            }
        )
    findings = [
        {**f, "evidence": [bounds.text(str(e)) for e in f.get("evidence", [])[:4]]}
        for f in (j.get("findings") or [])[:n]
    ]
    return {
        "total_samples": j["total_samples"],
        "period": j.get("period"),
        "period_unit": j.get("period_unit"),
        "kernels": kernels,
        "findings": findings,
    }


def as_text(answer: dict[str, Any]) -> str:
    return dumps(answer, indent=None)
