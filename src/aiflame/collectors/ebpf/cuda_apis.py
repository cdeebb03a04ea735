"""The CUDA runtime, CUDA driver and HIP functions the eBPF collector probes, and their arguments.

The BPF program (``bpf/cuda.bpf.c``) is generic: at a function's entry it records the
first six integer arguments (the x86-64 registers) and the first argument passed on the
stack, and at its return (for the functions that need one) the return value and, where
an out-parameter is named here, the 8 bytes it points to (the allocated pointer, the
function handle). What the numbers mean is decided here, on the user side, per function.

Argument indices count from 0; index 6 is the 7th argument (on the stack). ``dim3``
arguments take two registers, which is why ``cudaLaunchKernel``'s ``args`` is index 5.
Variants for per-thread default streams (``_ptsz``, ``_ptds``, HIP's ``_spt``) take the
same arguments and are probed under their own names where the library has them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum


class ApiClass(IntEnum):
    """Rate-limit classes (the BPF program keeps one per-second budget per class)."""

    LAUNCH = 0
    MEMORY = 1
    COPY = 2
    SYNC = 3
    NAMING = 4  # kernel names at module load: never rate-limited (rare and needed)


N_CLASSES = len(ApiClass)
NO_ARG = 15  # "no such argument" in the probe cookie (4 bits)
MAX_ARG = 6  # the 7th argument, read from the stack at entry

# What a call is; the profile builder and the memory tracker read these.
LAUNCH, GRAPH, ALLOC, FREE, COPY, SYNC, NAME, ALIAS = (
    "launch",
    "graph",
    "alloc",
    "free",
    "copy",
    "sync",
    "name",
    "alias",
)

# cudaMemcpyKind / hipMemcpyKind (the same numbering)
COPY_KINDS = {0: "HtoH", 1: "HtoD", 2: "DtoH", 3: "DtoD", 4: "default"}


@dataclass(frozen=True, slots=True)
class Api:
    """One probed function.

    ``out_arg``: pointer argument read at return (the allocated address, the new handle);
    ``name_arg``: a C string read at return (the kernel name at module load).
    """

    name: str
    family: str  # "cudart", "cuda" (driver) or "hip"
    role: str
    size_arg: int = -1  # bytes allocated or copied
    size_arg2: int = -1  # second factor of the size (2D copies: width * height)
    ptr_arg: int = -1  # the pointer freed
    out_arg: int = -1
    func_arg: int = -1  # kernel: host stub address (runtime) or function handle (driver)
    kind_arg: int = -1  # cudaMemcpyKind
    direction: str = ""  # fixed copy direction
    handle_arg: int = -1  # naming: the other handle (cuKernelGetFunction's kernel)
    name_arg: int = -1
    memory: str = ""  # alloc/free: "device", "host" (pinned) or "managed"

    @property
    def api_class(self) -> ApiClass:
        return _CLASS_OF_ROLE[self.role]

    @property
    def needs_return(self) -> bool:
        """Return probes cost a second trap: only where a result or the time is needed."""
        return self.role in (ALLOC, FREE, SYNC, NAME, ALIAS)

    @property
    def driver(self) -> bool:
        """Functions that take driver handles (``CUfunction``) rather than host stubs."""
        return self.family == "cuda" or self.name.startswith("hipModule")


_CLASS_OF_ROLE = {
    LAUNCH: ApiClass.LAUNCH,
    GRAPH: ApiClass.LAUNCH,
    ALLOC: ApiClass.MEMORY,
    FREE: ApiClass.MEMORY,
    COPY: ApiClass.COPY,
    SYNC: ApiClass.SYNC,
    NAME: ApiClass.NAMING,
    ALIAS: ApiClass.NAMING,
}


def _alloc(name: str, family: str, memory: str = "device", out: int = 0, size: int = 1) -> Api:
    return Api(name, family, ALLOC, size_arg=size, out_arg=out, memory=memory)


def _free(name: str, family: str, memory: str = "device") -> Api:
    return Api(name, family, FREE, ptr_arg=0, memory=memory)


def _copy(name: str, family: str, size: int = 2, kind: int = -1, direction: str = "") -> Api:
    return Api(name, family, COPY, size_arg=size, kind_arg=kind, direction=direction)


def _copy2d(name: str, family: str) -> Api:
    # (dst, dpitch, src, spitch, width, height, kind[, stream]): bytes = width * height
    return Api(name, family, COPY, size_arg=4, size_arg2=5, kind_arg=6)


_BASE: tuple[Api, ...] = (
    # -- CUDA runtime (libcudart) ---------------------------------------------------------
    Api("cudaLaunchKernel", "cudart", LAUNCH, func_arg=0),
    Api("cudaLaunchCooperativeKernel", "cudart", LAUNCH, func_arg=0),
    Api("cudaLaunchKernelExC", "cudart", LAUNCH, func_arg=1),
    Api("cudaGraphLaunch", "cudart", GRAPH),
    _alloc("cudaMalloc", "cudart"),
    _alloc("cudaMallocAsync", "cudart"),
    _alloc("cudaMallocFromPoolAsync", "cudart"),
    _alloc("cudaMallocManaged", "cudart", "managed"),
    _alloc("cudaMallocHost", "cudart", "host"),
    _alloc("cudaHostAlloc", "cudart", "host"),
    _free("cudaFree", "cudart"),
    _free("cudaFreeAsync", "cudart"),
    _free("cudaFreeHost", "cudart", "host"),
    _copy("cudaMemcpy", "cudart", kind=3),
    _copy("cudaMemcpyAsync", "cudart", kind=3),
    _copy2d("cudaMemcpy2D", "cudart"),
    _copy2d("cudaMemcpy2DAsync", "cudart"),
    _copy("cudaMemcpyPeer", "cudart", size=4, direction="peer"),
    _copy("cudaMemcpyPeerAsync", "cudart", size=4, direction="peer"),
    Api("cudaDeviceSynchronize", "cudart", SYNC),
    Api("cudaStreamSynchronize", "cudart", SYNC),
    Api("cudaEventSynchronize", "cudart", SYNC),
    # -- CUDA driver (libcuda) ------------------------------------------------------------
    Api("cuLaunchKernel", "cuda", LAUNCH, func_arg=0),
    Api("cuLaunchCooperativeKernel", "cuda", LAUNCH, func_arg=0),
    Api("cuLaunchKernelEx", "cuda", LAUNCH, func_arg=1),
    Api("cuGraphLaunch", "cuda", GRAPH),
    _alloc("cuMemAlloc_v2", "cuda"),
    _alloc("cuMemAllocAsync", "cuda"),
    _alloc("cuMemAllocFromPoolAsync", "cuda"),
    _alloc("cuMemAllocManaged", "cuda", "managed"),
    _alloc("cuMemAllocHost_v2", "cuda", "host"),
    _alloc("cuMemHostAlloc", "cuda", "host"),
    _free("cuMemFree_v2", "cuda"),
    _free("cuMemFreeAsync", "cuda"),
    _free("cuMemFreeHost", "cuda", "host"),
    _copy("cuMemcpy", "cuda"),
    _copy("cuMemcpyAsync", "cuda"),
    _copy("cuMemcpyHtoD_v2", "cuda", direction="HtoD"),
    _copy("cuMemcpyDtoH_v2", "cuda", direction="DtoH"),
    _copy("cuMemcpyDtoD_v2", "cuda", direction="DtoD"),
    _copy("cuMemcpyHtoDAsync_v2", "cuda", direction="HtoD"),
    _copy("cuMemcpyDtoHAsync_v2", "cuda", direction="DtoH"),
    _copy("cuMemcpyDtoDAsync_v2", "cuda", direction="DtoD"),
    _copy("cuMemcpyPeer", "cuda", size=4, direction="peer"),
    _copy("cuMemcpyPeerAsync", "cuda", size=4, direction="peer"),
    Api("cuCtxSynchronize", "cuda", SYNC),
    Api("cuStreamSynchronize", "cuda", SYNC),
    Api("cuEventSynchronize", "cuda", SYNC),
    # kernel names: (CUfunction *out, CUmodule, const char *name)
    Api("cuModuleGetFunction", "cuda", NAME, out_arg=0, name_arg=2),
    Api("cuLibraryGetKernel", "cuda", NAME, out_arg=0, name_arg=2),
    # (CUfunction *out, CUkernel): the function of a kernel is named like the kernel
    Api("cuKernelGetFunction", "cuda", ALIAS, out_arg=0, handle_arg=1),
    # -- HIP (libamdhip64) ------------------------------------------------------------------
    Api("hipLaunchKernel", "hip", LAUNCH, func_arg=0),
    Api("hipLaunchCooperativeKernel", "hip", LAUNCH, func_arg=0),
    Api("hipExtLaunchKernel", "hip", LAUNCH, func_arg=0),
    Api("hipModuleLaunchKernel", "hip", LAUNCH, func_arg=0),
    Api("hipExtModuleLaunchKernel", "hip", LAUNCH, func_arg=0),
    Api("hipGraphLaunch", "hip", GRAPH),
    _alloc("hipMalloc", "hip"),
    _alloc("hipExtMallocWithFlags", "hip"),
    _alloc("hipMallocAsync", "hip"),
    _alloc("hipMallocFromPoolAsync", "hip"),
    _alloc("hipMallocManaged", "hip", "managed"),
    _alloc("hipHostMalloc", "hip", "host"),
    _alloc("hipMallocHost", "hip", "host"),
    _free("hipFree", "hip"),
    _free("hipFreeAsync", "hip"),
    _free("hipHostFree", "hip", "host"),
    _free("hipFreeHost", "hip", "host"),
    _copy("hipMemcpy", "hip", kind=3),
    _copy("hipMemcpyAsync", "hip", kind=3),
    _copy("hipMemcpyWithStream", "hip", kind=3),
    _copy("hipMemcpyHtoD", "hip", direction="HtoD"),
    _copy("hipMemcpyDtoH", "hip", direction="DtoH"),
    _copy("hipMemcpyDtoD", "hip", direction="DtoD"),
    _copy("hipMemcpyHtoDAsync", "hip", direction="HtoD"),
    _copy("hipMemcpyDtoHAsync", "hip", direction="DtoH"),
    _copy("hipMemcpyDtoDAsync", "hip", direction="DtoD"),
    _copy2d("hipMemcpy2D", "hip"),
    _copy2d("hipMemcpy2DAsync", "hip"),
    _copy("hipMemcpyPeer", "hip", size=4, direction="peer"),
    _copy("hipMemcpyPeerAsync", "hip", size=4, direction="peer"),
    Api("hipDeviceSynchronize", "hip", SYNC),
    Api("hipStreamSynchronize", "hip", SYNC),
    Api("hipEventSynchronize", "hip", SYNC),
    Api("hipCtxSynchronize", "hip", SYNC),
    Api("hipModuleGetFunction", "hip", NAME, out_arg=0, name_arg=2),
)

# Per-thread default stream variants, same arguments (CUDA: --default-stream per-thread).
_SUFFIXES = {"cudart": ("_ptsz", "_ptds"), "cuda": ("_ptsz", "_ptds"), "hip": ("_spt",)}


def _expand(base: tuple[Api, ...]) -> tuple[Api, ...]:
    out = list(base)
    for api in base:
        if api.role in (NAME, ALIAS):
            continue
        out.extend(replace(api, name=api.name + s) for s in _SUFFIXES[api.family])
    return tuple(out)


# The api id in events is the index in this tuple: append only, never reorder.
APIS: tuple[Api, ...] = _expand(_BASE)
API_INDEX = {a.name: i for i, a in enumerate(APIS)}
FAMILIES = ("cudart", "cuda", "hip")


def apis_of_family(family: str, roles: set[str] | None = None) -> list[tuple[int, Api]]:
    """(id, api) of one library family, optionally only some roles."""
    return [
        (i, a)
        for i, a in enumerate(APIS)
        if a.family == family and (roles is None or a.role in roles)
    ]


MEMORY_ROLES = {ALLOC, FREE}
ALL_ROLES = {LAUNCH, GRAPH, ALLOC, FREE, COPY, SYNC, NAME, ALIAS}


def cookie(api_id: int, api: Api) -> int:
    """The 64-bit BPF cookie of a probe: what the generic BPF program needs to know.

    bits 0-15 api id, 16-19 rate class, 20-23 out-parameter index, 24-27 C-string argument
    index (NO_ARG: none), bit 28 set when a return probe is attached (entry then stores the
    call instead of emitting it), bit 29 when the 7th argument is used (on x86-64 it is on
    the stack: reading it costs a user-memory read, so only where needed).
    """
    out = api.out_arg if api.out_arg >= 0 else NO_ARG
    name = api.name_arg if api.name_arg >= 0 else NO_ARG
    ret = 1 if api.needs_return else 0
    used = (api.size_arg, api.size_arg2, api.ptr_arg, api.func_arg, api.kind_arg)
    stack_arg = 1 if MAX_ARG in (*used, api.handle_arg, api.out_arg, api.name_arg) else 0
    return api_id | int(api.api_class) << 16 | out << 20 | name << 24 | ret << 28 | stack_arg << 29
