"""PyTorch memory snapshots: safe reading, peak / allocations / reserved by stack, and the
agreement of every per-stack number with PyTorch's own viewers on a real snapshot."""

from __future__ import annotations

import gzip
import io
import os
import pickle
import re
import shutil
import textwrap
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from aiflame.cli.main import main
from aiflame.errors import InputError
from aiflame.model import FrameKind, Profile
from aiflame.sources.inputs import Input
from aiflame.sources.torch_memory import importer as tm
from aiflame.sources.torch_memory.replay import decimate
from aiflame.symbolize.cxa import Demangler

DATA = Path(__file__).resolve().parents[1] / "data" / "memory"
SNAPSHOT = DATA / "medium_128_inference_memory_snapshot.pickle.gz"
# Python 3.12 built with its sources' paths: CPython's C helpers are named and placed
CS336 = DATA / "cs336_forward_memory_snapshot.pickle.gz"
BLESS = os.environ.get("AIFLAME_BLESS") == "1"


def read_raw() -> dict:
    with gzip.open(SNAPSHOT, "rb") as f:
        return tm.PlainDataUnpickler(f).load()


@pytest.fixture(scope="module")
def raw() -> dict:
    return read_raw()


@pytest.fixture(scope="module")
def profile() -> Profile:
    return tm.load(Input(str(SNAPSHOT)), resolve_classes=False)


def write_pickle(path: Path, data: object) -> str:
    path.write_bytes(pickle.dumps(data, protocol=4))
    return str(path)


def column(p: Profile, name: str) -> np.ndarray:
    return p.values[:, p.type_index(name)]


def folded(p: Profile, metric: str) -> dict[str, float]:
    """``root;...;leaf -> value`` of the stacks with a non-zero value of ``metric``."""
    return {
        ";".join(p.stack_names(s)): v for s, v in p.iter_stack_values(p.type_index(metric)) if v
    }


# -- the stack text of PyTorch's viewers, from aiflame's frames ------------------------------

VIZ_NO_FRAMES = {  # aiflame's label frames and what PyTorch's viewers print instead
    tm.BEFORE_RECORDING: (
        "<block was allocated before _record_history was enabled>",
        "<non-python>",
    ),
    tm.NO_STACK: ("<block was allocated before _record_history was enabled>", "<non-python>"),
}


def viz_stack(p: Profile, stack: int, basename: bool) -> str:
    """``file:line:name;...`` root first, as MemoryViz.js (full file) / _memory_viz (basename)."""
    out = []
    for fr in p.stack_frames(stack):
        if fr.kind == FrameKind.LABEL:
            out.append(VIZ_NO_FRAMES[fr.name][1 if basename else 0])
            continue
        name = function(fr.name) if fr.kind == FrameKind.PYTHON else fr.name
        file = fr.file.rsplit("/", 1)[-1] if basename else fr.file
        out.append(f"{file}:{fr.line}:{name}")
    return ";".join(out)


def module_from_line_1(stack: str) -> str:
    """PyTorch prints the line a module's code runs; aiflame names a module's code as one
    function from line 1, as traces and live recordings do."""
    return re.sub(r":\d+:<module>(?=;|$)", ":1:<module>", stack)


def unknown_file_as_empty(stack: str) -> str:
    """PyTorch prints the unwinder's unknown file ``??``; aiflame leaves the file empty."""
    return ";".join(":" + f[3:] if f.startswith("??:") else f for f in stack.split(";"))


def by_viz_stack(p: Profile, metric: str) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for stack, value in p.iter_stack_values(p.type_index(metric)):
        if value:
            out[viz_stack(p, stack, basename=False)] += int(value)
    return dict(out)


# -- reading safely -------------------------------------------------------------------------


class RunsCode:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def test_a_pickle_that_runs_code_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "marker"
    evil = {
        "segments": [],
        "device_traces": [[{"action": "alloc", "frames": RunsCode(f"touch {marker}")}]],
    }
    path = write_pickle(tmp_path / "evil.pickle", evil)
    assert tm.sniff(Path(path).read_bytes()[:4096], path)  # it looks like a snapshot
    with pytest.raises(InputError) as err:
        tm.load(Input(path))
    assert "refused" in str(err.value) and "system" in str(err.value) and path in str(err.value)
    assert not marker.exists()
    # The same bytes through the ordinary unpickler do run the command: the test can fail.
    pickle.loads(Path(path).read_bytes())
    assert marker.exists()


def test_the_cli_refuses_it_in_one_line(tmp_path, capsys):
    marker = tmp_path / "marker"
    path = write_pickle(
        tmp_path / "evil.pickle",
        {"segments": [RunsCode(f"touch {marker}")], "device_traces": []},
    )
    assert main(["memory", path, "-o", str(tmp_path / "out.folded")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "refused to load" in err and path in err
    assert not marker.exists() and not (tmp_path / "out.folded").exists()


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(__import__("collections").OrderedDict(segments=[]), id="class"),
        pytest.param({"segments": [], "f": print}, id="builtin function"),
    ],
)
def test_anything_but_plain_data_is_refused(tmp_path, payload):
    path = write_pickle(tmp_path / "x.pickle", payload)
    with pytest.raises(InputError, match="refused to load"):
        tm.load(Input(path))


def test_bad_files_are_one_clear_error(tmp_path, raw):
    good = pickle.dumps({"segments": raw["segments"][:3], "device_traces": []}, protocol=4)
    cut = tmp_path / "cut.pickle"
    cut.write_bytes(good[: len(good) // 2])
    with pytest.raises(InputError, match="truncated pickle"):
        tm.load(Input(str(cut)))
    other = write_pickle(tmp_path / "other.pickle", {"weights": [1, 2, 3]})
    with pytest.raises(InputError, match="not a PyTorch memory snapshot"):
        tm.load(Input(other))
    broken = write_pickle(tmp_path / "broken.pickle", {"segments": [{"blocks": "x"}]})
    with pytest.raises(InputError, match="not a valid PyTorch memory snapshot"):
        tm.load(Input(broken))


def test_sniff(raw, tmp_path):
    head = gzip.decompress(SNAPSHOT.read_bytes())[:65536]
    assert tm.sniff(head, "x")
    legacy = pickle.dumps(raw["segments"][:2], protocol=2)  # old format: the segment list
    assert tm.sniff(legacy[:65536], "x")
    assert not tm.sniff(pickle.dumps({"weights": [1.0] * 10}), "x")
    assert not tm.sniff(b"a;b;c 10\n" * 10, "x")


def test_detected_and_loaded_through_the_registry():
    from aiflame.sources import detect, load

    assert detect(Input(str(SNAPSHOT))).FORMAT == "torch-memory"
    p = load(str(SNAPSHOT))
    assert p.meta["format"] == "torch-memory" and p.sample_types[0].name == "peak-bytes"


# -- numbers against the snapshot itself ----------------------------------------------------


def independent_replay(raw: dict) -> tuple[int, int]:
    """(max of the trace's running total, the total at its end): alloc adds, free_completed
    subtracts the size its alloc had."""
    sizes, cur, top = {}, 0, 0
    for e in raw["device_traces"][0]:
        if e["action"] == "alloc":
            sizes[e["addr"]] = e["size"]
            cur += e["size"]
        elif e["action"] == "free_completed":
            cur -= sizes.pop(e["addr"])
        top = max(top, cur)
    return top, cur


def test_peak_equals_blocks_live_before_plus_the_replayed_trace(raw, profile):
    active = [b for s in raw["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
    before = sum(b["requested_size"] for b in active)
    top, end = independent_replay(raw)
    assert end == 0  # every allocation of this trace is freed: the active blocks predate it
    assert profile.meta["peak_bytes"] == before + top == 1_736_962_048
    assert column(profile, "peak-bytes").sum() == before + top


def test_total_allocated_is_the_sum_of_the_traces_allocations(raw, profile):
    allocs = [e for e in raw["device_traces"][0] if e["action"] == "alloc"]
    assert column(profile, "alloc-bytes").sum() == sum(e["size"] for e in allocs) == 2_851_305_568
    assert column(profile, "alloc-count").sum() == len(allocs) == 1280
    assert profile.meta["allocations"] == 1280


def test_reserved_is_the_segments_and_fragmentation_the_unallocated_part(raw, profile):
    reserved = sum(s["total_size"] for s in raw["segments"])
    requested = sum(
        b["requested_size"]
        for s in raw["segments"]
        for b in s["blocks"]
        if b["state"] != "inactive"
    )
    assert column(profile, "reserved-bytes").sum() == reserved == profile.meta["reserved_bytes"]
    assert profile.meta["fragmentation_bytes"] == reserved - requested
    frag_rows = [
        i
        for i in range(len(profile))
        if column(profile, "reserved-bytes")[i]
        and profile.stack_names(int(profile.sample_stack[i]))[0] == tm.FRAGMENTATION
    ]
    assert column(profile, "reserved-bytes")[frag_rows].sum() == reserved - requested
    inactive = sum(
        b["size"] for s in raw["segments"] for b in s["blocks"] if b["state"] == "inactive"
    )
    reserved_by_stack = folded(profile, "reserved-bytes")
    assert reserved_by_stack[f"{tm.FRAGMENTATION};{tm.FREE_BLOCK}"] == inactive


def test_timeline_ends_where_the_snapshot_is_and_marks_the_peak(raw, profile):
    tl = profile.meta["memory_timeline"]
    active = sum(
        b["requested_size"]
        for s in raw["segments"]
        for b in s["blocks"]
        if b["state"] == "active_allocated"
    )
    assert tl["live_bytes"][-1] == active  # the replay ends in the snapshot's state
    assert tl["reserved_bytes"][-1] == sum(s["total_size"] for s in raw["segments"])
    assert tl["live_bytes"][tl["peak_index"]] == profile.meta["peak_bytes"] == max(tl["live_bytes"])
    assert tl["start_us"] + tl["time_us"][tl["peak_index"]] == profile.meta["peak_time"]
    assert len(tl["time_us"]) == tl["points"] == 2560  # alloc + free_completed events


def test_allocation_times_bracket_the_peak(profile):
    free = np.asarray(profile.meta["free_time_ns"])
    assert len(free) == len(profile)
    peak_ns = profile.meta["peak_time"] * 1000
    live = column(profile, "peak-bytes") > 0
    assert np.all(profile.timestamps[live] <= peak_ns)
    assert np.all((free[live] > peak_ns) | (free[live] == -1))
    traced = column(profile, "alloc-count") > 0
    assert np.all(free[traced] >= profile.timestamps[traced])


# -- numbers against PyTorch's own viewers ----------------------------------------------------


def memoryviz_reference() -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    text = gzip.decompress((DATA / "memoryviz_timeline_reference.txt.gz").read_bytes()).decode()
    for line in text.splitlines():
        if line.startswith("# max_size"):
            out["max_size"][""] = int(line.split()[-1])
        if line.startswith("#"):
            continue
        metric, rest = line.split("\t")
        stack, value = rest.rsplit(" ", 1)
        out[metric][unknown_file_as_empty(module_from_line_1(stack))] += int(value)
    return {k: dict(v) for k, v in out.items()}


def test_peak_and_allocations_by_stack_equal_pytorchs_memory_timeline(profile):
    ref = memoryviz_reference()
    assert profile.meta["peak_bytes"] == ref["max_size"][""]
    for metric in ("peak-bytes", "alloc-bytes", "alloc-count"):
        mine = by_viz_stack(profile, metric)
        assert mine == ref[metric], metric
    assert len(ref["alloc-bytes"]) == 54 and len(ref["peak-bytes"]) == 9


def with_block_frames(data: dict) -> dict:
    """The snapshot with every block given the frames of one of the trace's allocations."""
    allocs = [e for e in data["device_traces"][0] if e["action"] == "alloc"]
    j = 0
    for seg in data["segments"]:
        for b in seg["blocks"]:
            b["frames"] = allocs[(j * 37) % len(allocs)]["frames"]
            j += 1
    return data


def aiflame_viz_lines(p: Profile, with_segment: bool) -> dict[str, dict[str, int]]:
    """Reserved rows in _memory_viz's terms: blocks by stack, and rounding / free totals."""
    out: dict[str, dict[str, int]] = {"blocks": defaultdict(int), "gaps": defaultdict(int)}
    col = column(p, "reserved-bytes")
    for i in np.nonzero(col)[0]:
        lab = p.labels_of(int(i))
        prefix = f"stream_{lab['stream']}"
        if with_segment:
            prefix += f";seg_{int(lab['segment'], 16)}"
        if lab["state"] in ("rounding", "inactive"):
            out["gaps"][prefix] += int(col[i])
        else:
            stack = viz_stack(p, int(p.sample_stack[i]), basename=True)
            out["blocks"][f"{prefix};{lab['state']};{stack}"] += int(col[i])
    return {k: dict(v) for k, v in out.items()}


def pytorch_viz_lines(folded: str) -> dict[str, dict[str, int]]:
    """_memory_viz lines grouped the same way (<gaps> and inactive blocks are unallocated)."""
    out: dict[str, dict[str, int]] = {"blocks": defaultdict(int), "gaps": defaultdict(int)}
    for line in folded.splitlines():
        stack, value = line.rsplit(" ", 1)
        parts = stack.split(";")
        state_at = 2 if parts[1].startswith("seg_") else 1
        prefix, state = ";".join(parts[:state_at]), parts[state_at]
        if state == "inactive" or parts[state_at + 1] == "<gaps>":
            out["gaps"][prefix] += int(value)
        else:
            out["blocks"][unknown_file_as_empty(module_from_line_1(stack))] += int(value)
    return {k: {s: v for s, v in d.items() if v} for k, d in out.items()}


def pytorch_output(name: str, fn: str, data: dict) -> str:
    """_memory_viz's folded text: live when torch is importable, else the recorded file."""
    expected = DATA / f"memory_viz_{name}.txt.gz"
    try:
        from torch.cuda import _memory_viz
    except ImportError:
        assert expected.exists(), f"torch not importable and {expected.name} missing"
        return gzip.decompress(expected.read_bytes()).decode()
    text = getattr(_memory_viz, fn)(data, format_flamegraph=str)
    if BLESS:
        expected.write_bytes(gzip.compress(text.encode(), mtime=0))
    else:  # the recorded file must still be what PyTorch says
        assert gzip.decompress(expected.read_bytes()).decode() == text
    return text


@pytest.mark.parametrize(
    "name, fn, framed",
    [
        ("memory_plain", "memory", False),
        ("memory_framed", "memory", True),
        ("segments_framed", "segments", True),
    ],
)
def test_reserved_by_stack_equals_pytorchs_memory_flamegraph(name, fn, framed):
    data = with_block_frames(read_raw()) if framed else read_raw()
    theirs = pytorch_viz_lines(pytorch_output(name, fn, data))
    mine = aiflame_viz_lines(tm.build_profile(data, resolve_classes=False), fn == "segments")
    assert mine == theirs
    if framed:
        assert len(mine["blocks"]) > 40  # real stacks compared, not one placeholder


# -- replay rules on small handmade snapshots -------------------------------------------------


def frame(name: str, filename: str = "??", line: int = 0) -> dict:
    return {"name": name, "filename": filename, "line": line}


def event(action: str, addr: int, size: int, t: int, frames=(), **extra) -> dict:
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t,
            "frames": list(frames), **extra}  # fmt: skip


def block(addr: int, size: int, requested: int, state: str, frames: list) -> dict:
    return {"address": addr, "size": size, "requested_size": requested, "state": state,
            "frames": frames}  # fmt: skip


def small_snapshot() -> dict:
    a = [frame("a", "/x/m.py", 1)]
    b = [frame("b", "/x/m.py", 2)]
    trace = [
        event("segment_alloc", 1000, 4096, 1),
        event("free_requested", 9000, 100, 2, b),  # allocated before recording
        event("free_completed", 9000, 100, 2, b),
        event("alloc", 1000, 512, 3, a),
        event("alloc", 1512, 1024, 4, b),
        event("free_requested", 1000, 512, 5, a),
        event("free_completed", 1000, 512, 6, a),
        event("oom", 0, 1 << 40, 7, device_free=123),
        event("alloc", 1000, 256, 8, a),
        event("snapshot", 0, 0, 9),
    ]
    blocks = [
        block(1000, 512, 256, "active_allocated", a),
        block(1512, 1024, 1024, "active_allocated", b),
        block(2536, 2560, 0, "inactive", []),
    ]
    seg = {"device": 0, "address": 1000, "total_size": 4096, "stream": 0, "blocks": blocks,
           "segment_type": "small"}  # fmt: skip
    old = {"device": 0, "address": 8000, "total_size": 2048, "stream": 0, "segment_type": "small",
           "blocks": [block(8000, 2048, 2000, "active_allocated", [])]}  # fmt: skip
    return {"segments": [seg, old], "device_traces": [trace]}


A, B = "a (/x/m.py:1)", "b (/x/m.py:2)"  # small_snapshot()'s frames, named as traces name them


def test_replay_rules_on_a_small_trace(tmp_path):
    p = tm.load(Input(write_pickle(tmp_path / "s.pickle", small_snapshot())), resolve_classes=False)
    # Before the trace: 100 (freed at t=2) + 2000 (a block never seen in the trace).
    # t=2: 2000; t=3: 2512; t=4: 3536 (peak); t=6: 3024; t=8: 3280.
    assert p.meta["peak_bytes"] == 3536 and p.meta["peak_time"] == 4
    tl = p.meta["memory_timeline"]
    assert tl["live_bytes"] == [2100, 2000, 2512, 3536, 3024, 3280]
    assert tl["reserved_bytes"] == [6144] * 6  # segment_alloc at t=1 brought 2048 to 6144
    assert folded(p, "peak-bytes") == {A: 512, B: 1024, tm.BEFORE_RECORDING: 2000}
    assert folded(p, "alloc-bytes") == {A: 768, B: 1024}
    assert folded(p, "alloc-count") == {A: 2, B: 1}
    assert p.meta["oom_events"] == [
        {"time_us": 7, "size": 1 << 40, "device_free": 123, "device": 0}
    ]
    assert folded(p, "reserved-bytes") == {
        A: 256,  # the live trace allocation holding the first block
        B: 1024,
        tm.BEFORE_RECORDING: 2000,
        f"{tm.FRAGMENTATION};{tm.FREE_BLOCK}": 2560,
        f"{tm.FRAGMENTATION};{tm.ROUNDING}": 256 + 48,
    }
    freed_only = [
        i for i in range(len(p)) if p.stack_names(int(p.sample_stack[i]))[0] == tm.FREED_ONLY
    ]
    assert p.stack_names(int(p.sample_stack[freed_only[0]])) == [tm.FREED_ONLY, B]


def test_segment_frames_go_under_fragmentation(tmp_path):
    data = small_snapshot()
    data["device_traces"][0][0]["frames"] = [frame("reserve_here", "/x/m.py", 9)]
    p = tm.load(Input(write_pickle(tmp_path / "s.pickle", data)), resolve_classes=False)
    reserve = "reserve_here (/x/m.py:9)"
    assert f"{tm.FRAGMENTATION};{reserve};{tm.FREE_BLOCK}" in folded(p, "reserved-bytes")


def test_no_trace_times_legacy_list_and_two_devices(tmp_path):
    data = small_snapshot()
    for e in data["device_traces"][0]:
        del e["time_us"]
    p = tm.load(Input(write_pickle(tmp_path / "nt.pickle", data)), resolve_classes=False)
    assert p.meta["peak_bytes"] == 3536 and p.meta["peak_time_unit"] == "event"
    legacy = tm.load(Input(write_pickle(tmp_path / "l.pickle", small_snapshot()["segments"])))
    assert legacy.meta["peak_bytes"] == 256 + 1024 + 2000  # no trace: the snapshot's state
    two = small_snapshot()
    seg1 = dict(two["segments"][1], device=1)
    two["segments"].append(seg1)
    p2 = tm.load(Input(write_pickle(tmp_path / "two.pickle", two)), resolve_classes=False)
    devices = {p2.labels_of(i)["device"] for i in range(len(p2))}
    assert devices == {"0", "1"} and column(p2, "reserved-bytes").sum() == 4096 + 2048 + 2048


def test_timeline_is_decimated_but_keeps_the_peak():
    rng = np.random.default_rng(1)
    series = rng.integers(0, 1000, 100_000)
    series[70_001] = 5000
    keep = decimate(len(series), series, 70_001, 4096)
    assert len(keep) <= 4096 + 3 and 70_001 in keep and keep[0] == 0 and keep[-1] == 99_999
    assert series[keep].min() == series.min()


# -- frames -----------------------------------------------------------------------------------


def function(frame_name: str) -> str:
    """The function of a Python frame's name: ``forward`` of ``Model > forward (m.py:3)``."""
    return re.sub(r" \([^()]*:\d+\)$", "", frame_name).rsplit(" > ", 1)[-1]


def test_frame_kinds_and_omitted_frames(profile):
    kinds = {
        function(profile.frames.get(i).name): profile.frames.get(i).kind
        for i in range(len(profile.frames))
    }
    assert kinds["forward"] == FrameKind.PYTHON and kinds["<module>"] == FrameKind.PYTHON
    assert kinds["PyMethod_New"] == FrameKind.NATIVE
    assert kinds["at::_ops::bmm::call(at::Tensor const&, at::Tensor const&)"] == FrameKind.CPP
    assert not any(n.startswith("torch::unwind::unwind") for n in kinds)
    assert "_PyEval_EvalFrameDefault" not in kinds  # omitted, as PyTorch's viewers do
    files = {profile.frames.get(i).file for i in range(len(profile.frames))}
    assert "??" not in files


def test_frame_modes_all_and_compact(profile):
    raw = read_raw()
    every = tm.build_profile(raw, frames="all", resolve_classes=False)
    names = {every.frames.name_of(i) for i in range(len(every.frames))}
    assert "_PyEval_EvalFrameDefault" in names and "torch::unwind::unwind()" in names
    compact = tm.build_profile(raw, frames="compact", resolve_classes=False)
    glue = {"PyMethod_New", "PyType_GetModule", "_PyRun_SimpleFileObject", "__libc_init_first"}
    kept = {function(compact.frames.name_of(i)) for i in range(len(compact.frames))}
    assert glue <= {profile.frames.name_of(i) for i in range(len(profile.frames))}
    assert not glue & kept and {"forward", "_call_impl", "<module>"} <= kept
    assert "at::_ops::bmm::call(at::Tensor const&, at::Tensor const&)" in kept  # C++ stays
    for p in (every, compact):  # frames change, bytes do not
        assert p.meta["peak_bytes"] == 1_736_962_048
        assert np.array_equal(p.totals(), profile.totals())
    with pytest.raises(ValueError):
        tm.build_profile(raw, frames="some")


def test_compact_frames_hide_cpython_helpers_by_name_and_file():
    # slot_tp_call, type_call, method_vectorcall_*, binary_op1 sat between the Python
    # frames of every stack (a 12-row tower of interpreter glue on a Jupyter snapshot).
    pytorch = tm.load(Input(str(CS336)), frames="pytorch", resolve_classes=False)
    compact = tm.load(Input(str(CS336)), frames="compact", resolve_classes=False)

    def natives(p: Profile) -> dict[str, str]:
        frames = [p.frames.get(i) for i in range(len(p.frames))]
        return {f.name: f.file for f in frames if f.kind == FrameKind.NATIVE}

    glue = {"slot_tp_call", "type_call", "method_vectorcall_VARARGS_KEYWORDS", "binary_op1"}
    assert glue <= set(natives(pytorch))  # as PyTorch's own viewers show them
    assert natives(pytorch)["slot_tp_call"].endswith("/python-3.12.3/Objects/typeobject.c")
    left = natives(compact)
    assert not glue & set(left)
    assert not [f for f in left.values() if "/python-3.12.3/" in f]  # none of CPython's files
    assert "THPVariable_subclass_clear(THPVariable*)" in left  # torch's own C++ stays
    assert compact.meta["peak_bytes"] == pytorch.meta["peak_bytes"] == 43_754_773_506
    assert np.array_equal(compact.totals(), pytorch.totals())


def test_methods_are_named_by_their_class_when_the_source_is_readable(tmp_path):
    src = tmp_path / "model.py"
    src.write_text(
        textwrap.dedent(
            """\
            class Attention:
                def __init__(self):
                    self.w = 1

                def forward(self, x):
                    return x

            class Outer:
                class Inner:
                    def forward(self, x):
                        return x

            def helper():
                def forward():
                    return 1
                return forward
            """
        )
    )
    f = str(src)
    frames_of = {
        "init": [frame("__init__", f, 3)],
        "fwd": [frame("forward", f, 6), frame("__call__", "/nowhere/module.py", 5)],
        "inner": [frame("forward", f, 11)],
        "helper": [frame("helper", f, 16)],
        "local": [frame("forward", f, 15)],
    }
    trace = [event("alloc", 100 * i, 10, i, fr) for i, fr in enumerate(frames_of.values())]
    data = {"segments": [], "device_traces": [trace]}
    p = tm.load(Input(write_pickle(tmp_path / "c.pickle", data)))
    # named as traces and live recordings name them: the class, the file, the first line
    assert set(folded(p, "alloc-bytes")) == {
        f"Attention > __init__ ({f}:2)",
        f"__call__ (/nowhere/module.py:5);Attention > forward ({f}:5)",
        f"Outer.Inner > forward ({f}:10)",
        f"helper ({f}:13)",
        f"forward ({f}:14)",  # a function inside a function has no class
    }
    bare = tm.load(Input(str(tmp_path / "c.pickle")), resolve_classes=False)
    names = {bare.frames.name_of(i) for i in range(len(bare.frames))}
    assert f"__init__ ({f}:3)" in names  # without the source: the line running, no class


def test_snapshot_frames_of_one_function_are_one_frame(tmp_path):
    """Allocations at two lines of one method are one frame (the function), as in traces."""
    src = tmp_path / "net.py"
    src.write_text("class Net:\n    def forward(self):\n        a = 1\n        b = 2\n")
    f = str(src)
    data = {
        "segments": [],
        "device_traces": [
            [event("alloc", 100, 10, 1, [frame("forward", f, 3)])],
            [event("alloc", 200, 10, 2, [frame("forward", f, 4)])],
        ],
    }
    p = tm.load(Input(write_pickle(tmp_path / "n.pickle", data)))
    assert folded(p, "alloc-bytes") == {f"Net > forward ({f}:2)": 20}


@pytest.mark.skipif(
    not Demangler().in_process and shutil.which("c++filt") is None,
    reason="needs libstdc++ (libstdc++6) or c++filt (binutils)",
)
def test_mangled_cpp_names_are_demangled(tmp_path):
    mangled = "_ZN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocator8allocateEm"
    data = {"segments": [], "device_traces": [[event("alloc", 1, 10, 1, [frame(mangled)])]]}
    p = tm.load(Input(write_pickle(tmp_path / "m.pickle", data)))
    (stack,) = [s for s, v in p.iter_stack_values(1) if v]
    (fr,) = p.stack_frames(stack)
    assert fr.name == (
        "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"
    )
    assert fr.kind == FrameKind.CPP


# -- command line -----------------------------------------------------------------------------


def test_cli_memory_writes_each_metric(tmp_path, capsys):
    out = tmp_path / "out.folded"
    assert main(["memory", str(SNAPSHOT), "-o", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert sum(int(ln.rsplit(" ", 1)[1]) for ln in lines) == 1_736_962_048
    assert "peak 1.62 GiB" in capsys.readouterr().err
    assert main(["memory", str(SNAPSHOT), "-o", str(out), "--metric", "reserved-bytes"]) == 0
    assert any(ln.startswith(tm.FRAGMENTATION) for ln in out.read_text().splitlines())
    assert main(["memory", str(SNAPSHOT), "-o", str(out), "--frames", "compact"]) == 0
    compact = out.read_text()
    assert "PyMethod_New" not in compact and ";forward (" in compact
    assert main(["memory", str(SNAPSHOT), "-o", str(out)]) == 0
    assert out.read_text() == compact  # compact is the default: the op on the first screen
    assert main(["memory", str(SNAPSHOT), "-o", str(out), "--frames", "pytorch"]) == 0
    assert "PyMethod_New" in out.read_text()
    assert main(["memory", str(SNAPSHOT), "-o", str(out), "--metric", "nope"]) == 1
    assert "no metric 'nope'" in capsys.readouterr().err


def test_cli_memory_html(tmp_path):
    pytest.importorskip("aiflame.render.html")
    out = tmp_path / "out.html"
    assert main(["memory", str(SNAPSHOT), "-o", str(out)]) == 0
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") or page.lstrip().lower().startswith("<!doctype html")
    assert len(page) < 1_000_000  # the call tree, not the pickle


def test_cli_diff_between_two_snapshots(tmp_path):
    pytest.importorskip("aiflame.transforms.diff")
    raw = read_raw()
    trace = raw["device_traces"][0]
    grown = [e for e in trace if e["action"] == "alloc"][:1]  # one allocation never freed
    raw["device_traces"][0] = [*trace, dict(grown[0], addr=1, time_us=trace[-1]["time_us"] + 1)]
    after = write_pickle(tmp_path / "after.pickle", raw)
    out = tmp_path / "diff.folded"
    assert main(["diff", str(SNAPSHOT), after, "-o", str(out), "-m", "alloc-bytes"]) == 0
    changed = [ln for ln in out.read_text().splitlines() if ln.split()[-1] != ln.split()[-2]]
    assert len(changed) == 1
    base, test = (int(x) for x in changed[0].split()[-2:])
    assert test - base == grown[0]["size"]


def test_plain_pickle_from_stdin(monkeypatch):
    data = gzip.decompress(SNAPSHOT.read_bytes())  # the other tests read the .gz file

    class Stdin:
        buffer = io.BytesIO(data)

    monkeypatch.setattr("sys.stdin", Stdin)
    p = tm.load(Input("-"), resolve_classes=False)
    assert p.meta["peak_bytes"] == 1_736_962_048
