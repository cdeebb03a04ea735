"""Leaving frames out (splice or drop), metrics without data, and aiflame's own frames."""

from __future__ import annotations

import re
from pathlib import Path

from aiflame.collectors.own_frames import BOOTSTRAP_FILE, bootstrap_frames
from aiflame.model import FrameKind, ProfileBuilder, SampleType
from aiflame.render.folded import folded_lines
from aiflame.transforms.strip import Strip, drop_empty_types, strip_frames


def build(stacks: dict[str, tuple[float, ...]], types=("cpu", "gpu")):  # type: ignore[no-untyped-def]
    b = ProfileBuilder([SampleType(t, "count") for t in types])
    for stack, values in stacks.items():
        b.add(b.stack(b.frame(n, FrameKind.PYTHON) for n in stack.split(";")), values)
    return b.build()


def frame_ids(profile, *names: str) -> list[int]:  # type: ignore[no-untyped-def]
    strings = profile.strings.strings
    return [f for f in range(len(profile.frames)) if strings[profile.frames.name[f]] in names]


def test_splice_keeps_the_callees_drop_loses_the_samples():
    p = build(
        {
            "main;hook;import;torch": (5, 0),  # the hook passes the import through
            "main;hook;import;torch;ours": (2, 0),  # ...whose callback is ours
            "main;timer;wait": (3, 1),  # ours, with all it called
            "main;work": (10, 0),
        }
    )
    (hook,) = frame_ids(p, "hook")
    ours = frame_ids(p, "ours", "timer")
    out, lost = strip_frames(p, {hook: Strip.SPLICE, **dict.fromkeys(ours, Strip.DROP)})
    assert list(folded_lines(out, "cpu")) == ["main;import;torch 5", "main;work 10"]
    assert lost.tolist() == [5, 1]
    assert out.totals().tolist() == [15, 0]


def test_the_innermost_listed_frame_decides():
    # ours (dropped) runs a program's code through a pass-through frame: that code is kept
    p = build({"ours;chain;user": (4,), "ours;own": (1,)}, types=("cpu",))
    actions = {frame_ids(p, "ours")[0]: Strip.DROP, frame_ids(p, "chain")[0]: Strip.SPLICE}
    out, lost = strip_frames(p, actions)
    assert list(folded_lines(out, "cpu")) == ["user 4"] and lost.tolist() == [1]


def test_metrics_without_data_are_dropped_the_default_kept_by_name():
    p = build({"a": (0, 3, 0), "b": (0, 2, 0)}, types=("gpu", "cpu", "wall"))
    p.meta["default_type"] = 1
    out = drop_empty_types(p)
    assert [t.name for t in out.sample_types] == ["cpu"]
    assert out.sample_types[out.type_index(None)].name == "cpu"
    assert drop_empty_types(out) is out  # nothing to drop


def test_default_metric_is_never_an_empty_one():
    p = build({"a": (0, 3)}, types=("gpu", "cpu"))
    assert p.type_index(None) == 1  # default_type 0 holds nothing
    assert p.filled_types() == [1]


def _line_of(source: str, needle: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if needle in line)


def test_bootstrap_frames_found_by_file_and_first_line():
    source = Path(BOOTSTRAP_FILE).read_text()
    b = ProfileBuilder([SampleType("cpu", "count")])

    def frame(needle: str, name: str) -> int:
        line = _line_of(source, needle)
        return b.frame(f"{name} (sitecustomize.py:{line})", FrameKind.PYTHON, BOOTSTRAP_FILE, line)

    ids = {
        "find_spec": frame("def find_spec(", "_TorchFinder > find_spec"),
        "exec_module": frame("def exec_module(", "exec_module"),
        "_chain": frame("def _chain(", "_chain"),
        "_after": frame("def _after(", "_TorchWindow > _after"),
        "finish": frame("def finish(", "_TorchWindow > finish"),
        "<module>": b.frame("<module> (sitecustomize.py:1)", FrameKind.PYTHON, BOOTSTRAP_FILE, 1),
        "site": b.frame("execsitecustomize (<frozen site>:580)", FrameKind.PYTHON, "<frozen site>"),
        "user": b.frame("finish (sitecustomize.py:9)", FrameKind.PYTHON, "/x/sitecustomize.py"),
    }
    b.add(b.stack(ids.values()), 1)
    actions = {k: bootstrap_frames(b.build()).get(f) for k, f in ids.items()}
    splice, drop = Strip.SPLICE, Strip.DROP
    assert actions == {
        "find_spec": splice,
        "exec_module": splice,
        "_chain": splice,
        "_after": drop,
        "finish": drop,
        "<module>": drop,
        "site": drop,
        "user": None,  # another sitecustomize.py is the program's own
    }


def test_bootstrap_timer_threads_run_the_bootstrap_s_own_code():
    # threading.Timer would run threading's Timer.run: its frames would not be recognised
    source = Path(BOOTSTRAP_FILE).read_text()
    assert "threading.Timer(" not in source
    assert re.search(r"threading\.Thread\(\s*target=self\._after", source)
