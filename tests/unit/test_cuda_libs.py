"""Finding the CUDA/HIP libraries a process maps, and their API functions' file offsets."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import systools
from aiflame.collectors.ebpf.cuda_apis import (
    ALL_ROLES,
    API_INDEX,
    APIS,
    MEMORY_ROLES,
    NO_ARG,
    ApiClass,
    cookie,
)
from aiflame.collectors.ebpf.cuda_libs import (
    ElfError,
    GpuLibrary,
    family_of,
    function_offsets,
    gpu_libraries,
    probe_targets,
)

REQUIRED = os.environ.get("AIFLAME_REQUIRE_EBPF") == "1"  # CI installs the test extra


def wheel_libcudart() -> str:
    """libcudart.so.12 of PyPI's nvidia-cuda-runtime-cu12 (the test extra installs it)."""
    try:
        import nvidia.cuda_runtime as rt  # type: ignore[import-not-found]
    except ImportError:
        if REQUIRED:
            pytest.fail("nvidia-cuda-runtime-cu12 is not installed (pip install '.[test]')")
        pytest.skip("nvidia-cuda-runtime-cu12 is not installed")
    found = sorted(Path(next(iter(rt.__path__))).glob("lib/libcudart.so.*"))
    assert found, "the wheel has no lib/libcudart.so.*"
    return str(found[0])


@pytest.mark.parametrize(
    ("path", "family"),
    [
        ("/usr/lib/x86_64-linux-gnu/libcuda.so.1", "cuda"),
        ("/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", "cuda"),
        ("/venv/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12", "cudart"),
        ("/venv/site-packages/cupy_backends/libcudart-d0da41ae.so.11.0", "cudart"),
        ("/opt/rocm/lib/libamdhip64.so.6", "hip"),
        ("/opt/rocm/lib/libamdhip64.so", "hip"),
        ("/usr/lib/libcudart_static.a", None),
        ("/usr/lib/libcudadebugger.so.1", None),
        ("/usr/lib/libcuda.so.1.backup", None),
        ("/usr/lib/libcupti.so.12", None),
    ],
)
def test_library_families_by_file_name(path, family):
    assert family_of(path) == family


MAPS = """\
55d0c0000000-55d0c0001000 r--p 00000000 fe:00 11 /usr/bin/python3.11
7f0000000000-7f0000010000 r--p 00000000 fe:00 42 /venv/nvidia/cuda_runtime/lib/libcudart.so.12
7f0000010000-7f0000090000 r-xp 00010000 fe:00 42 /venv/nvidia/cuda_runtime/lib/libcudart.so.12
7f00000a0000-7f00000b0000 rw-p 000a0000 fe:00 42 /venv/nvidia/cuda_runtime/lib/libcudart.so.12
7f1000000000-7f1000400000 r-xp 00000000 fe:00 77 /usr/lib/x86_64-linux-gnu/libcuda.so.1
7f2000000000-7f2000400000 r-xp 00000000 fe:00 78 /old/libamdhip64.so (deleted)
7f3000000000-7f3000100000 rw-p 00000000 00:00 0
7f4000000000-7f4000001000 r-xp 00000000 fe:00 90 /usr/lib/libc.so.6
"""


def test_mapped_libraries_with_their_code_ranges():
    libs = gpu_libraries(os.getpid(), MAPS)
    assert [(lib.family, lib.path, lib.inode, lib.text) for lib in libs] == [
        ("cudart", "/venv/nvidia/cuda_runtime/lib/libcudart.so.12", 42,
         [(0x7F0000010000, 0x7F0000090000)]),
        ("cuda", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 77, [(0x7F1000000000, 0x7F1000400000)]),
    ]  # fmt: skip
    # files are opened as the process sees them: here our own root is the same
    assert libs[0].host_path == libs[0].path


def test_a_process_in_another_root_is_read_through_proc_pid_root(monkeypatch):
    real_stat = os.stat

    def stat(path, *a, **k):  # as if PID 4242 ran in a container with its own root
        return real_stat("/proc" if path == "/proc/4242/root" else path, *a, **k)

    monkeypatch.setattr(os, "stat", stat)
    libs = gpu_libraries(4242, MAPS)
    assert libs[0].host_path == "/proc/4242/root" + libs[0].path


def test_offsets_of_the_runtime_functions_in_the_real_libcudart():
    path = wheel_libcudart()
    lib = GpuLibrary("cudart", path, path, 0, "")
    targets = dict((APIS[i].name, off) for i, off in probe_targets(lib, ALL_ROLES))
    for name in ("cudaMalloc", "cudaFree", "cudaLaunchKernel", "cudaMemcpy", "cudaMemcpy2D",
                 "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
                 "cudaMallocHost", "cudaHostAlloc", "cudaMallocManaged", "cudaMallocAsync",
                 "cudaFreeAsync", "cudaGraphLaunch", "cudaLaunchKernel_ptsz"):  # fmt: skip
        assert name in targets, name
    assert not any(n.startswith(("cu", "hip")) and not n.startswith("cuda") for n in targets)
    systools.need("readelf")
    out = subprocess.run(
        ["readelf", "-W", "--dyn-syms", "-l", path], capture_output=True, text=True
    )
    loads = [ln.split() for ln in out.stdout.splitlines() if ln.strip().startswith("LOAD")]
    segs = [(int(f[2], 16), int(f[1], 16), int(f[4], 16)) for f in loads]  # vaddr, off, filesz
    for line in out.stdout.splitlines():
        f = line.split()
        if len(f) >= 8 and f[3] == "FUNC" and "@@" in f[7]:
            name = f[7].split("@")[0]
            if name in targets:
                vaddr = int(f[1], 16)
                off = next(vaddr - v + o for v, o, size in segs if v <= vaddr < v + size)
                assert targets[name] == off, name


def test_only_the_roles_asked_for_are_probed():
    path = wheel_libcudart()
    lib = GpuLibrary("cudart", path, path, 0, "")
    names = {APIS[i].name for i, _ in probe_targets(lib, MEMORY_ROLES)}
    assert "cudaMalloc" in names and "cudaFreeHost" in names
    assert all(APIS[API_INDEX[n]].role in MEMORY_ROLES for n in names)


def test_not_an_elf_file(tmp_path):
    bad = tmp_path / "libcudart.so.12"
    bad.write_bytes(b"not an ELF file at all")
    with pytest.raises(ElfError, match="not a 64-bit"):
        function_offsets(str(bad), {"cudaMalloc"})


def test_symbols_of_a_library_built_here_and_the_default_version_wins(tmp_path):
    systools.need("gcc")
    src = tmp_path / "v.c"
    src.write_text(
        "int old_impl(void) { return 1; }\n"
        "int new_impl(void) { return 2; }\n"
        "int cudaFree(void *p) { return p != 0; }\n"
        '__asm__(".symver old_impl,cudaMalloc@V1");\n'
        '__asm__(".symver new_impl,cudaMalloc@@V2");\n'
    )
    (tmp_path / "v.map").write_text(
        "V1 { global: cudaMalloc; }; V2 { global: cudaMalloc; cudaFree; } V1;\n"
    )
    so = tmp_path / "libcudart.so.12"
    script = f"-Wl,--version-script={tmp_path / 'v.map'}"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", so, src, script], check=True)
    offs = function_offsets(str(so), {"cudaMalloc", "cudaFree", "cudaMissing"})
    assert set(offs) == {"cudaMalloc", "cudaFree"}
    local = function_offsets(str(so), {"new_impl", "old_impl"})  # .symtab: local names
    assert offs["cudaMalloc"] == local["new_impl"] != local["old_impl"]


def test_cookies_say_what_the_bpf_program_needs():
    c = cookie(API_INDEX["cudaMalloc"], APIS[API_INDEX["cudaMalloc"]])
    assert c & 0xFFFF == API_INDEX["cudaMalloc"]
    assert (c >> 16) & 0xF == ApiClass.MEMORY
    assert (c >> 20) & 0xF == 0  # the out-parameter is the first argument
    assert (c >> 24) & 0xF == NO_ARG and (c >> 28) & 1 == 1 and (c >> 29) & 1 == 0
    c = cookie(API_INDEX["cudaLaunchKernel"], APIS[API_INDEX["cudaLaunchKernel"]])
    assert (c >> 16) & 0xF == ApiClass.LAUNCH and (c >> 28) & 1 == 0  # no return probe
    c = cookie(API_INDEX["cuModuleGetFunction"], APIS[API_INDEX["cuModuleGetFunction"]])
    assert (c >> 24) & 0xF == 2 and (c >> 16) & 0xF == ApiClass.NAMING
    c = cookie(API_INDEX["cudaMemcpy2D"], APIS[API_INDEX["cudaMemcpy2D"]])
    assert (c >> 29) & 1 == 1  # its direction is the 7th argument


def test_api_ids_are_unique_names_and_variants_share_arguments():
    assert len(API_INDEX) == len(APIS) < 1 << 16
    base, variant = APIS[API_INDEX["cudaLaunchKernel"]], APIS[API_INDEX["cudaLaunchKernel_ptsz"]]
    assert (base.func_arg, base.role) == (variant.func_arg, variant.role)
    assert "hipMalloc_spt" in API_INDEX and "cuModuleGetFunction_ptsz" not in API_INDEX
