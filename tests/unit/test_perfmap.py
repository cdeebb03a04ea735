"""Perf maps: parsing, lookup at the edges, later entries winning, oneDNN names."""

from __future__ import annotations

from aiflame.model import FrameKind
from aiflame.symbolize.perfmap import JitSymbol, PerfMap, clean_name, map_path, parse_lines


def test_parse_accepts_hex_with_or_without_prefix_and_skips_garbage():
    syms = parse_lines(
        [
            "7f00 10 jit_a.0\n",
            "0x8000 0x20 py::f:/x.py\n",
            "zzzz 10 bad\n",
            "9000 0 empty_size\n",
            "a000 10\n",  # truncated write
            "b000 8 name with spaces\n",
        ]
    )
    assert [(s.start, s.size, s.name) for s in syms] == [
        (0x7F00, 0x10, "jit_a.0"),
        (0x8000, 0x20, "py::f:/x.py"),
        (0xB000, 8, "name with spaces"),
    ]


def test_lookup_is_half_open_and_misses_outside():
    pm = PerfMap([JitSymbol(0x1000, 0x10, "a"), JitSymbol(0x2000, 0x10, "b")])
    assert pm.lookup(0x1000).name == "a"
    assert pm.lookup(0x100F).name == "a"
    assert pm.lookup(0x1010) is None
    assert pm.lookup(0xFFF) is None
    assert pm.lookup(0x2008).name == "b"
    assert pm.lookup(0x9999) is None


def test_a_later_definition_at_the_same_address_wins():
    pm = PerfMap(parse_lines(["1000 10 old\n", "1000 20 new\n"]))
    assert len(pm) == 1
    assert pm.lookup(0x1018).name == "new"


def test_onednn_counter_is_dropped_other_names_kept():
    assert clean_name("jit_avx2_conv_fwd_kernel_f32_t.0") == "jit_avx2_conv_fwd_kernel_f32_t"
    assert clean_name("jit_uni_reorder_kernel_f32.12") == "jit_uni_reorder_kernel_f32"
    assert clean_name("direct_copy_kernel_t.9") == "direct_copy_kernel_t"
    assert clean_name("py::train_step:/tmp/train.py") == "py::train_step:/tmp/train.py"
    assert clean_name("LazyCompile:*foo app.js:1") == "LazyCompile:*foo app.js:1"


def test_kinds_jit_unless_python_trampoline():
    assert JitSymbol(0, 1, "jit_single_blk_kernel.2").kind == FrameKind.JIT
    assert JitSymbol(0, 1, "py::train_step:/tmp/train.py").kind == FrameKind.PYTHON


def test_missing_file_gives_an_empty_map(tmp_path):
    pm = PerfMap.read(str(tmp_path / "nope.map"))
    assert not pm and pm.lookup(1) is None
    assert map_path(42, str(tmp_path)) == str(tmp_path / "perf-42.map")


def test_real_onednn_map(data_dir):
    pm = PerfMap.read(str(data_dir / "record" / "pyspy-native.perf.map"))
    names = {clean_name(s.name) for s in pm}
    assert "jit_avx2_conv_fwd_kernel_f32_t" in names
    assert "jit_avx2_conv_bwd_weights_kernel_f32_t" in names
    first = next(iter(pm))
    assert pm.lookup(first.start + first.size - 1) is first
