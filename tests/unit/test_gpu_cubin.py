"""Cubin symbolizer: SASS text and source lines of real cubins (sm_75, sm_80, sm_121).

Checked three ways: against the CRC and line pairs computed by others (the PROVENANCE),
against ``nvdisasm -json -g`` (the same tool's other output), and against CUPTI's own
``cuptiGetSassToSourceCorrelation`` for every instruction.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from aiflame.symbolize import cubin as cb

DATA = Path(__file__).parents[1] / "data" / "gpu_instructions"
SM75 = DATA / "parca_otel_ebpf_profiler" / "toy.cubin"
SM121 = DATA / "parcagpu" / "pc_sample_toy.cubin"
SM80 = (
    DATA
    / "hpctoolkit"
    / "loops-cuda-nvidiapc-t.m"
    / "gpubins"
    / "82578c6c35b16bf3c6712d8cc5175793.gpubin"
)

needs_nvdisasm = pytest.mark.skipif(cb.find_nvdisasm() is None, reason="nvdisasm not installed")


def _cupti_works() -> bool:
    try:
        cb.cubin_crc(SM75.read_bytes())
        return True
    except cb.CubinError:
        return False


needs_cupti = pytest.mark.skipif(not _cupti_works(), reason="no driver-less libcupti installed")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cb._memory.clear()


@needs_cupti
@pytest.mark.parametrize(
    ("path", "crc"), [(SM75, 0x89D253C8), (SM121, 0x3AE994C7), (SM80, 0xB0E87D49)]
)
def test_crc_is_cuptis(path, crc):
    assert cb.cubin_crc(path.read_bytes()) == crc


@needs_nvdisasm
@needs_cupti
def test_line_pairs_of_the_provenance():
    toy = cb.load_cubin_file(str(SM121))
    assert toy.sm == "sm_121"
    pairs = {
        "_Z12shmem_bouncePfiy": {0x0: 49, 0x10: 51, 0x40: 51, 0x1F0: 58},
        "_Z10hash_churnPjiy": {0x0: 33, 0x10: 34, 0x1F0: 42},
    }
    for fn, lines in pairs.items():
        for off, line in lines.items():
            inst = toy.instruction(fn, off)
            assert inst.offset == off
            assert inst.lines[-1] == (
                "/home/tpr/src/parcagpu-proton/microbenchmarks/pc_sample_toy.cu",
                line,
            )
    add = cb.load_cubin_file(str(SM75))
    assert add.sm == "sm_75"
    f = "_Z3addPiS_S_i"
    assert (add.instruction(f, 0).text, add.instruction(f, 0).lines) == (
        "MOV R1, c[0x0][0x28]",
        (("/tmp/toy.cu", 1),),
    )
    assert add.instruction(f, 0x10).text == "S2R R6, SR_CTAID.X"
    assert add.instruction(f, 0x10).lines[-1][1] == 2
    assert add.instruction(f, 0x40).text.startswith("ISETP.GE.AND")
    assert add.instruction(f, 0x40).lines[-1][1] == 3
    assert add.instruction(f, 0x50).text == "@P0 EXIT"
    assert add.instruction(f, 0x58).offset == 0x50  # inside an instruction: that one


def without_target(text: str) -> str:
    """An instruction's text without its last operand (the branch target)."""
    t = text.replace(", ", ",")
    return t.rsplit(",", 1)[0] if "," in t else t.rsplit(" ", 1)[0]


def nvdisasm_json(path: Path) -> tuple[dict, list]:
    out = subprocess.run(
        [cb.find_nvdisasm(), "-json", "-g", str(path)], capture_output=True, check=True
    )
    doc = json.loads(out.stdout)
    return doc[2], doc[1]


@needs_nvdisasm
@needs_cupti
@pytest.mark.parametrize("path", [SM75, SM80, SM121])
def test_every_instruction_matches_nvdisasm_json(path):
    files, functions = nvdisasm_json(path)
    got = cb.load_cubin_file(str(path))
    assert set(got.functions) == {f["function-name"] for f in functions}
    for f in functions:
        mine = got.functions[f["function-name"]]
        assert len(mine) == len(f["sass-instructions"])
        line = None
        for inst, ref in zip(mine, f["sass-instructions"], strict=True):
            text = " ".join(
                x for x in (ref.get("predicate"), ref["opcode"], ref.get("operands")) if x
            )
            if "`(" in inst.text:  # branch targets: a label here, an address in JSON
                assert without_target(inst.text) == without_target(text), inst
            else:
                assert inst.text.replace(", ", ",") == text.replace(", ", ","), inst
            if "source-line" in ref:  # nvdisasm names a line only when it changes
                fid = ref["source-file-id"]
                d = files["directories"][files["files"][fid]["dir-idx"]]
                line = (
                    os.path.normpath(os.path.join(d, files["files"][fid]["file"])),
                    ref["source-line"],
                )
            assert (inst.lines[-1] if inst.lines else None) == line, hex(inst.offset)


@needs_nvdisasm
@needs_cupti
@pytest.mark.parametrize("path", [SM75, SM121])
def test_lines_agree_with_cupti_sass_to_source(path):
    data = path.read_bytes()
    got = cb.load_cubin(data)
    checked = 0
    for fn, insts in got.functions.items():
        for inst in insts:
            cupti = cb.sass_to_source(data, fn, inst.offset)
            if cupti is None or not inst.lines:
                continue
            assert os.path.normpath(cupti[0]) == inst.lines[-1][0]
            assert cupti[1] == inst.lines[-1][1], (fn, hex(inst.offset))
            checked += 1
    assert checked > 10


@needs_nvdisasm
@needs_cupti
def test_disassembled_once_per_crc(monkeypatch):
    first = cb.load_cubin_file(str(SM121))
    cb._memory.clear()
    monkeypatch.setenv("AIFLAME_NVDISASM", "/nonexistent/nvdisasm")  # must come from disk
    again = cb.load_cubin_file(str(SM121))
    assert again.functions == first.functions
    assert os.listdir(cb.cache_dir()) == ["000000003ae994c7.json"]


def test_not_a_cubin(tmp_path):
    bad = tmp_path / "x.cubin"
    bad.write_bytes(b"\x7fELF" + bytes(60))
    with pytest.raises(cb.CubinError, match="not a cubin"):
        cb.load_cubin_file(str(bad))


def test_parse_inline_chains():
    text = """//--------------------- .text._Z1kv --------------------------
\t//## File "/s/a.cu", line 16 inlined at "/s/a.cu", line 31 inlined at "/s/b.cu", line 7
        /*0180*/                   DFMA R14, R2.reuse, R20, 3 ;
\t//## File "/s/a.cu", line 16 inlined at "/s/a.cu", line 31
\t//## File "/s/a.cu", line 31
        /*0188*/                   DFMA R14, R2.reuse, R20, 3 ;
\t//## File "/s/a.cu", line 31
        /*0190*/                   STL.64 [R1], R20 ;
"""
    _sm, funcs = cb.parse_nvdisasm(text)
    first, restated, second = funcs["_Z1kv"]
    assert first.lines == (("/s/b.cu", 7), ("/s/a.cu", 31), ("/s/a.cu", 16))
    assert first.text == "DFMA R14, R2.reuse, R20, 3"
    # an inlined line, then its call site restated: the instruction is in the inlined line
    assert restated.lines == (("/s/a.cu", 31), ("/s/a.cu", 16))
    assert second.lines == (("/s/a.cu", 31),) and second.offset == 0x190
