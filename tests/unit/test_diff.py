"""diff_profiles, render_diff_folded and the ``aiflame diff`` command."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import numpy as np
import pytest

from aiflame.cli.main import main
from aiflame.errors import AiflameError
from aiflame.model import FrameKind, Profile, ProfileBuilder, SampleType
from aiflame.render import stackpaths
from aiflame.render.folded import render_diff_folded, stack_strings
from aiflame.sources import load
from aiflame.sources.folded.diff import load_diff
from aiflame.transforms.diff import diff_profiles, strip_hex_name

DIFF = Path(__file__).resolve().parents[1] / "data" / "diff"


def build(
    stacks: dict[tuple[tuple[str, FrameKind], ...], float],
    unit: str = "count",
    name: str = "samples",
    source: str = "p",
) -> Profile:
    """A profile with one sample per stack; frames are (name, kind) pairs, root first."""
    b = ProfileBuilder([SampleType(name, unit)])
    for frames, value in stacks.items():
        b.add(b.stack(b.frame(n, k) for n, k in frames), value)
    b.meta["source"] = source
    return b.build()


def per_stack(diff: Profile) -> dict[str, tuple[float, float]]:
    """'a;b;c' -> (base, test), summed over samples."""
    out: dict[str, list[float]] = {}
    for s, (b, t) in zip(diff.sample_stack.tolist(), diff.values.tolist(), strict=True):
        acc = out.setdefault(";".join(diff.stack_names(s)) if s >= 0 else "", [0.0, 0.0])
        acc[0] += b
        acc[1] += t
    return {k: (v[0], v[1]) for k, v in out.items()}


PY, CPP, GPU = FrameKind.PYTHON, FrameKind.CPP, FrameKind.GPU_KERNEL
BASE = {
    (("main", PY), ("fwd", PY)): 10.0,
    (("main", PY), ("fwd", PY), ("aten::mm", CPP)): 30.0,
    (("main", PY), ("old", PY)): 5.0,
}
TEST = {
    (("main", PY), ("fwd", PY)): 12.0,
    (("main", PY), ("fwd", PY), ("aten::mm", CPP)): 20.0,
    (("main", PY), ("fwd", PY), ("aten::mm", CPP), ("-", FrameKind.DELIMITER), ("sgemm", GPU)): 8.0,
}


def test_self_diff_has_no_delta():
    profile = load(str(DIFF / "own_before.txt"))
    diff = diff_profiles(profile, profile)
    assert len(diff) > 0
    assert np.array_equal(diff.values[:, 0], diff.values[:, 1])
    assert diff.meta["diff"]["base_total"] == diff.meta["diff"]["test_total"] == 44.75
    for line in render_diff_folded(diff).splitlines():
        _, b, t = line.rsplit(" ", 2)
        assert b == t


def test_union_of_stacks_with_zero_on_the_missing_side():
    diff = diff_profiles(build(BASE), build(TEST))
    assert per_stack(diff) == {
        "main;fwd": (10.0, 12.0),
        "main;fwd;aten::mm": (30.0, 20.0),
        "main;old": (5.0, 0.0),
        "main;fwd;aten::mm;-;sgemm": (0.0, 8.0),
    }
    assert [t.name for t in diff.sample_types] == ["base", "test"]
    assert {t.unit for t in diff.sample_types} == {"count"}
    assert diff.meta["diff"] == {
        "base": 0,
        "test": 1,
        "normalized": False,
        "base_total": 45.0,
        "test_total": 40.0,
        "metric": "samples",
        "unit": "count",
        "base_source": "p",
        "test_source": "p",
    }
    assert diff.type_index(None) == 1  # widths follow the test profile


def test_frame_kinds_are_kept_from_either_side():
    diff = diff_profiles(build(BASE), build(TEST))
    kinds = {}
    for s in range(len(diff.stacks)):
        frame = diff.frames.get(diff.stacks.frame[s])
        kinds[frame.name] = frame.kind
    assert kinds == {"main": PY, "fwd": PY, "aten::mm": CPP, "old": PY, "-": FrameKind.DELIMITER,
                     "sgemm": GPU}  # fmt: skip


def test_stacks_match_by_name_even_when_kinds_differ():
    base = build({(("main", FrameKind.UNKNOWN), ("f", FrameKind.NATIVE)): 3.0})
    test = build({(("main", PY), ("f", CPP)): 4.0})
    diff = diff_profiles(base, test)
    assert per_stack(diff) == {"main;f": (3.0, 4.0)}
    leaf = diff.frames.get(diff.stacks.frame[int(diff.sample_stack[0])])
    assert leaf.kind == FrameKind.NATIVE  # the base's frame is kept where both have one


def test_normalize_scales_base_to_the_test_total():
    diff = diff_profiles(build(BASE), build(TEST), normalize=True)
    assert per_stack(diff) == {  # count * test_total / base_total, in difffolded.pl's order
        "main;fwd": (10.0 * 40.0 / 45.0, 12.0),
        "main;fwd;aten::mm": (30.0 * 40.0 / 45.0, 20.0),
        "main;old": (5.0 * 40.0 / 45.0, 0.0),
        "main;fwd;aten::mm;-;sgemm": (0.0, 8.0),
    }
    assert diff.totals()[0] == pytest.approx(diff.totals()[1])
    assert diff.meta["diff"]["normalized"] is True
    assert diff.meta["diff"]["base_total"] == 45.0  # the total before scaling
    # As difffolded.pl -n: the folded base column is int(count * total2 / total1).
    lines = dict(line.rsplit(" ", 2)[0:2] for line in render_diff_folded(diff).splitlines())
    assert lines == {
        "main;fwd": "8",
        "main;fwd;aten::mm": "26",
        "main;fwd;aten::mm;-;sgemm": "0",
        "main;old": "4",
    }


def test_normalize_needs_a_base_with_a_total():
    empty_base = build({(("main", PY),): 0.0})
    with pytest.raises(AiflameError, match="cannot normalize"):
        diff_profiles(empty_base, build(TEST), normalize=True)
    # Without -n it is a plain diff where everything is new.
    assert per_stack(diff_profiles(empty_base, build(TEST)))["main;fwd"] == (0.0, 12.0)


def test_normalize_to_an_empty_test_keeps_the_base_stacks():
    diff = diff_profiles(build(BASE), build({(("main", PY),): 0.0}), normalize=True)
    assert render_diff_folded(diff) == "main;fwd 0 0\nmain;fwd;aten::mm 0 0\nmain;old 0 0\n"


def test_normalize_with_equal_totals_changes_nothing():
    a = diff_profiles(build(BASE), build(BASE), normalize=True)
    assert np.array_equal(a.values[:, 0], a.values[:, 1])


def test_metric_must_exist_in_both():
    base, test = build(BASE, source="before.pb"), build(TEST, name="cpu", source="after.pb")
    with pytest.raises(AiflameError, match=r"^after\.pb: no metric 'samples'"):
        diff_profiles(base, test, metric="samples")
    with pytest.raises(AiflameError, match=r"^before\.pb: no metric 'cpu'"):
        diff_profiles(base, test, metric="cpu")
    # By default each side's main metric is used; the names need not match.
    assert diff_profiles(base, test).meta["diff"]["test_total"] == 40.0


def test_units_must_match():
    base = build(BASE, unit="nanoseconds", source="gpu.json")
    with pytest.raises(AiflameError, match="units differ"):
        diff_profiles(base, build(TEST, source="cpu.folded"))


def test_chosen_metric_of_multi_metric_profiles():
    b = ProfileBuilder([SampleType("samples"), SampleType("cpu", "nanoseconds")])
    b.add(b.stack([b.frame("a")]), [1.0, 100.0])
    b.add(b.stack([b.frame("a"), b.frame("b")]), [2.0, 50.0])
    p = b.build()
    diff = diff_profiles(p, p, metric="cpu")
    assert per_stack(diff) == {"a": (100.0, 100.0), "a;b": (50.0, 50.0)}
    assert diff.sample_types[0].unit == "nanoseconds"


def test_samples_without_a_stack_count_in_totals_but_print_no_line():
    b = ProfileBuilder()
    b.add(-1, 5.0)
    b.add(b.stack([b.frame("a")]), 1.0)
    p = b.build()
    diff = diff_profiles(p, build({(("a", PY),): 2.0}))
    assert diff.meta["diff"]["base_total"] == 6.0
    assert per_stack(diff) == {"": (5.0, 0.0), "a": (1.0, 2.0)}
    assert render_diff_folded(diff) == "a 1 2\n"


def test_strip_hex_merges_addresses():
    assert strip_hex_name("f 0x7fA9 and 0x1;0xg") == "f 0x... and 0x...;0xg"
    base = build({(("main", PY), ("0x10", FrameKind.NATIVE)): 1.0,
                  (("main", PY), ("0x20", FrameKind.NATIVE)): 2.0})  # fmt: skip
    test = build({(("main", PY), ("0x30", FrameKind.NATIVE)): 5.0})
    assert per_stack(diff_profiles(base, test, strip_hex=True)) == {"main;0x...": (3.0, 5.0)}
    assert len(per_stack(diff_profiles(base, test))) == 3


def test_render_numbers_like_perl_and_truncate_like_inferno():
    base = build({(("a", PY),): 14.2343983248722834234, (("b", PY),): 1e6})
    test = build({(("a", PY),): 2.5, (("b", PY),): 3.0})
    diff = diff_profiles(base, test)
    assert render_diff_folded(diff) == "a 14.2343983248723 2.5\nb 1000000 3\n"
    assert render_diff_folded(diff, truncate=True) == "a 14 2\nb 1000000 3\n"


def test_render_refuses_a_plain_profile():
    with pytest.raises(ValueError, match="not a differential profile"):
        render_diff_folded(build(BASE))


def test_stack_strings_agree_with_stack_names(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(stackpaths, "_CELLS", 5)  # many chunks, a stack deeper than one
    p = load(str(DIFF / "own_before.txt"))
    ids = np.arange(len(p.stacks))
    assert stack_strings(p, ids) == [";".join(p.stack_names(s)) for s in ids]
    assert stack_strings(p, np.array([], dtype=np.int64)) == []


# -- the command ------------------------------------------------------------------------------


def run_cli(capsys, *args: str) -> tuple[int, str]:
    code = main(["diff", *args])
    return code, capsys.readouterr().err


def test_cli_writes_folded(tmp_path, capsys):
    out = tmp_path / "d.collapsed"
    code, err = run_cli(capsys, "-n", str(DIFF / "own_before.txt"), str(DIFF / "own_after.txt"),
                        "-o", str(out))  # fmt: skip
    assert code == 0, err
    expected = (DIFF / "difffolded_pl" / "own_normalize.txt").read_text(encoding="utf-8")
    assert out.read_text(encoding="utf-8") == expected


def test_cli_folded_to_stdout(capsys):
    code = main(["diff", str(DIFF / "before.txt"), str(DIFF / "after.txt"), "-o", "-"])
    assert code == 0
    assert capsys.readouterr().out.splitlines() == sorted(
        (DIFF / "inferno_results" / "default.txt").read_text(encoding="utf-8").splitlines()
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-m", "cpu"], "before.txt: no metric 'cpu' in this profile (it has: samples)"),
        (["-o", "out.svg"], "out.svg: this command does not write svg; name the output .html"),
        (["-o", "out.png"], "out.png: cannot write '.png' files"),
    ],
)
def test_cli_errors_are_one_line(tmp_path, capsys, args, message):
    argv = [str(DIFF / "before.txt"), str(DIFF / "after.txt"), "-o", str(tmp_path / "x.folded")]
    code, err = run_cli(capsys, *argv, *args)
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("aiflame: error: ")
    assert message in err


def test_cli_missing_input_is_one_line(tmp_path, capsys):
    code, err = run_cli(capsys, str(tmp_path / "nope.txt"), str(DIFF / "after.txt"),
                        "-o", str(tmp_path / "x.folded"))  # fmt: skip
    assert code == 1
    assert err == f"aiflame: error: {tmp_path / 'nope.txt'}: no such file\n"
    assert not (tmp_path / "x.folded").exists()


@pytest.mark.skipif(
    importlib.util.find_spec("aiflame.render.html") is None, reason="no HTML renderer yet"
)
def test_cli_writes_html(tmp_path, capsys):
    out = tmp_path / "d.html"
    code, err = run_cli(capsys, str(DIFF / "before.txt"), str(DIFF / "after.txt"),
                        "-o", str(out), "--title", "dd before/after")  # fmt: skip
    assert code == 0, err
    page = out.read_text(encoding="utf-8")
    assert page.lstrip().lower().startswith("<!doctype html")
    assert "dd before/after" in page


# -- the folded fast path gives what diff_profiles gives ---------------------------------------

PAIRS = [("own_before.txt", "own_after.txt"), ("before_fractionals.txt", "after.txt")]
OPTIONS = [{}, {"normalize": True}, {"strip_hex": True}, {"normalize": True, "strip_hex": True}]


def kinds_by_path(profile: Profile) -> dict[str, tuple[int, ...]]:
    out = {}
    for s in profile.sample_stack.tolist():
        frames = profile.stack_frames(s)
        out[";".join(f.name for f in frames)] = tuple(int(f.kind) for f in frames)
    return out


@pytest.mark.parametrize("pair", PAIRS)
@pytest.mark.parametrize("options", OPTIONS)
def test_folded_fast_path_equals_diff_profiles(pair, options):
    base, test = (str(DIFF / name) for name in pair)
    general = diff_profiles(load(base), load(test), **options)
    fast = load_diff(base, test, **options)
    assert render_diff_folded(fast) == render_diff_folded(general)
    fast_values, general_values = per_stack(fast), per_stack(general)
    assert fast_values.keys() == general_values.keys()
    for stack, values in fast_values.items():
        assert values == pytest.approx(general_values[stack]), stack
    assert kinds_by_path(fast) == kinds_by_path(general)
    assert fast.meta["diff"] == general.meta["diff"]


def test_cli_paths_agree(tmp_path, capsys, monkeypatch):
    """Folded + folded takes the fast path; stdin or another format takes diff_profiles."""
    before, after = DIFF / "own_before.txt", DIFF / "own_after.txt"
    fast = tmp_path / "fast.folded"
    assert main(["diff", "-n", "-s", str(before), str(after), "-o", str(fast)]) == 0
    expected = (DIFF / "difffolded_pl" / "own_strip_hex_normalize.txt").read_text(encoding="utf-8")
    assert fast.read_text(encoding="utf-8") == expected

    stdin = tmp_path / "stdin.folded"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(before.read_bytes())))
    assert main(["diff", "-n", "-s", "-", str(after), "-o", str(stdin)]) == 0
    assert stdin.read_text(encoding="utf-8") == expected

    pprof = tmp_path / "before.pb.gz"
    assert main(["convert", str(before), "-o", str(pprof)]) == 0
    other = tmp_path / "pprof.folded"
    assert main(["diff", "-n", "-s", str(pprof), str(after), "-o", str(other)]) == 0
    assert other.read_text(encoding="utf-8") == expected


def test_cli_units_differ_is_one_line(tmp_path, capsys):
    from aiflame.render.pprof import render_pprof

    timed = build(BASE, unit="nanoseconds", name="cpu", source="t")
    path = tmp_path / "cpu.pb.gz"
    path.write_bytes(render_pprof(timed))
    code, err = run_cli(
        capsys, str(path), str(DIFF / "after.txt"), "-o", str(tmp_path / "x.folded")
    )
    assert code == 1
    assert err.count("\n") == 1 and "the units differ" in err and str(path) in err


def test_cli_nothing_to_compare(tmp_path, capsys):
    zero = tmp_path / "zero.folded"
    zero.write_text("a;b 0\n", encoding="utf-8")
    for out in ("x.folded", "x.html"):
        code, err = run_cli(capsys, str(zero), str(zero), "-o", str(tmp_path / out))
        assert code == 1 and "no samples with a value in either" in err
