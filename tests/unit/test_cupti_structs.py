"""The collector's ctypes declarations of CUPTI's PC Sampling API match CUPTI's own headers.

A C program compiled against the headers of the ``nvidia-cuda-cupti`` wheel prints the
size of each structure and the offset of each field; the ctypes structures must agree,
field by field (no GPU needed, only g++ and the headers).
"""

from __future__ import annotations

import ctypes
import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest

import systools

BOOTSTRAP = Path(__file__).parents[2] / "src" / "aiflame" / "collectors" / "torch_bootstrap"
sys.path.insert(0, str(BOOTSTRAP))
import aiflame_cupti_api as api  # noqa: E402


def header_dirs() -> list[str]:
    out = []
    for p in sys.path:
        out += glob.glob(os.path.join(p, "nvidia", "*", "include", "cupti_pcsampling.h"))
    return sorted({os.path.dirname(h) for h in out})


def runtime_header_dirs() -> list[str]:
    """cuda.h and builtin_types.h, which CUPTI's headers include."""
    out = []
    for p in sys.path:
        out += glob.glob(os.path.join(p, "nvidia", "*", "include", "builtin_types.h"))
    return sorted(
        {
            os.path.dirname(h)
            for h in out
            if os.path.exists(os.path.join(os.path.dirname(h), "cuda.h"))
        }
    )


# ctypes structure -> (C type, {ctypes field: C field expression})
STRUCTS = {
    api.PCSamplingStallReason: ("CUpti_PCSamplingStallReason", None),
    api.PCSamplingPCData: ("CUpti_PCSamplingPCData", None),
    api.PCSamplingData: ("CUpti_PCSamplingData", None),
    api.PCSamplingConfigurationInfoParams: ("CUpti_PCSamplingConfigurationInfoParams", None),
    api.PCSamplingGetDataParams: ("CUpti_PCSamplingGetDataParams", None),
    api.PCSamplingCtxParams: ("CUpti_PCSamplingEnableParams", None),
    api.PCSamplingGetNumStallReasonsParams: ("CUpti_PCSamplingGetNumStallReasonsParams", None),
    api.PCSamplingGetStallReasonsParams: ("CUpti_PCSamplingGetStallReasonsParams", None),
    api.GetCubinCrcParams: ("CUpti_GetCubinCrcParams", None),
    api.ModuleResourceData: ("CUpti_ModuleResourceData", None),
    api.CallbackData: ("CUpti_CallbackData", None),
    api.ResourceData: ("CUpti_ResourceData", {"resourceHandle": "resourceHandle.stream"}),
    api.PcSamplingStallReasons: ("PcSamplingStallReasons", None),
    api.PutPcSampDataParams: ("CUptiUtil_PutPcSampDataParams", None),
    api.Header: ("Header", None),
    api.BufferInfo: ("BufferInfo", None),
    api.PCSamplingConfigurationInfo: (
        "CUpti_PCSamplingConfigurationInfo",
        {"attributeData": "attributeData"},
    ),
}
UNION_MEMBERS = {  # inside CUpti_PCSamplingConfigurationInfo.attributeData
    "samplingPeriod": "samplingPeriodData.samplingPeriod",
    "stallReasonData": "stallReasonData",
    "scratchBufferSize": "scratchBufferSizeData.scratchBufferSize",
    "hardwareBufferSize": "hardwareBufferSizeData.hardwareBufferSize",
    "collectionMode": "collectionModeData.collectionMode",
    "enableStartStopControl": "enableStartStopControlData.enableStartStopControl",
    "outputDataFormat": "outputDataFormatData.outputDataFormat",
    "samplingDataBuffer": "samplingDataBufferData.samplingDataBuffer",
}


def c_program() -> str:
    lines = [
        "#include <stdio.h>",
        "#include <stddef.h>",
        "#include <cupti_callbacks.h>",
        "#include <cupti_pcsampling.h>",
        "#include <cupti_pcsampling_util.h>",
        "using namespace CUPTI::PcSamplingUtil;",
        "int main(void) {",
    ]
    for cls, (ctype, rename) in STRUCTS.items():
        lines.append(f'printf("{cls.__name__} size %zu\\n", sizeof({ctype}));')
        for name, *_ in cls._fields_:
            expr = (rename or {}).get(name, name)
            lines.append(f'printf("{cls.__name__}.{name} %zu\\n", offsetof({ctype}, {expr}));')
    for name, expr in UNION_MEMBERS.items():
        full = f"attributeData.{expr}"
        lines.append(
            f'printf("union.{name} %zu\\n", offsetof(CUpti_PCSamplingConfigurationInfo, {full})'
            " - offsetof(CUpti_PCSamplingConfigurationInfo, attributeData));"
        )
    lines += ["return 0;", "}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def layout(tmp_path_factory) -> dict[str, int]:
    dirs = header_dirs()
    if not dirs:
        pytest.skip("needs CUPTI's headers (pip install nvidia-cuda-cupti)")
    systools.need("g++")  # the utility's header is C++
    cuda = runtime_header_dirs()
    if not cuda:
        pytest.skip("CUDA runtime headers (pip install nvidia-cuda-runtime-cu12) missing")
    tmp = tmp_path_factory.mktemp("cupti")
    # builtin_types.h pulls the CUDA compiler's headers, which no wheel here ships; the
    # structures checked use none of its types (the driver's come from the real cuda.h)
    (tmp / "builtin_types.h").write_text("#pragma once\n")
    src = tmp / "layout.cpp"
    src.write_text(c_program())
    exe = tmp / "layout"
    cc = subprocess.run(
        [
            "gcc",
            "-std=c11",
            "-I",
            str(tmp),
            "-I",
            dirs[-1],
            "-I",
            cuda[-1],
            str(src),
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
    )
    if cc.returncode != 0:
        pytest.fail(
            "the layout program does not compile against CUPTI's headers:\n" + cc.stderr[-3000:]
        )
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in (line.rsplit(" ", 1) for line in out.splitlines())}


@pytest.mark.parametrize("cls", list(STRUCTS), ids=lambda c: c.__name__)
def test_size_and_offsets_match_the_headers(layout, cls):
    assert ctypes.sizeof(cls) == layout[f"{cls.__name__} size"]
    for name, *_ in cls._fields_:
        assert getattr(cls, name).offset == layout[f"{cls.__name__}.{name}"], name


def test_union_members_match(layout):
    union = api.PCSamplingConfigurationInfo.attributeData.size
    assert union == ctypes.sizeof(api._AttributeData)
    for name in UNION_MEMBERS:
        assert getattr(api._AttributeData, name).offset == layout[f"union.{name}"], name


def test_params_sizes_are_cuptis_macros(layout):
    # CUpti_*ParamsSize = offsetof(last field) + its size: what CUPTI checks
    assert api.struct_size(api.PCSamplingGetDataParams, "pcSamplingData") == 32
    assert api.struct_size(api.PCSamplingCtxParams, "ctx") == 24
    assert (
        api.struct_size(api.PutPcSampDataParams, "fileName") == layout["PutPcSampDataParams size"]
    )
