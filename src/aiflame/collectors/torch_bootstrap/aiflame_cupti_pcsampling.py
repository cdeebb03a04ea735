"""GPU PC sampling inside the profiled program: CUPTI's PC Sampling API through ctypes.

Started by the bootstrap (``sitecustomize``) when ``aiflame record --gpu-pc-sampling`` sets
``AIFLAME_GPU_PC_SAMPLING``, before the program touches CUDA:

* a CUPTI subscriber gets the resource callbacks: on every CUDA context created, PC
  sampling is configured (every stall reason the device has, queried from it; the sampling
  period; kernel-serialized mode when a PyTorch window will give launch stacks to join by
  correlation id, continuous mode otherwise) and started; on every module loaded, the
  cubin is written to ``gpupc-<pid>.cubins/<n>.cubin`` (that is how samples get their SASS
  and lines later);
* samples are drained with ``cuptiPCSamplingGetData`` when the program synchronizes
  (``cuCtxSynchronize``, ``cuStreamSynchronize``, ``cuEventSynchronize``), when a context
  goes away and at exit, and written with NVIDIA's own PC Sampling Utility writer
  (``CuptiUtilPutPcSampData``) to ``gpupc-<pid>.dat``, the format the importer reads;
* problems go to ``gpupc-<pid>.error``, one line each, never to the program: in
  particular ``CUPTI_ERROR_INSUFFICIENT_PRIVILEGES`` with how to allow profiling.

Nothing the program computes changes: CUPTI only observes. Kernel-serialized mode runs
one kernel at a time (concurrent kernels are serialized while sampling), which changes
timing, not results. CUPTI allows one subscriber per process, so the PyTorch profiler's
own CUPTI callbacks are unavailable meanwhile (its activity tracing, which gives the
launch stacks and correlation ids, does not need them).

NOT YET RUN ON A GPU: written against CUPTI 12.x/13.x headers (structures checked by
tests/unit/test_cupti_structs.py); benchmarks/gpu/pc_sampling_check.sh is the first check
to run on a GPU machine. This file runs in the target's interpreter: standard library only.
"""

import atexit
import contextlib
import ctypes
import glob
import os
import sys
import threading

import aiflame_cupti_api as api

ENV = "AIFLAME_GPU_PC_SAMPLING"  # "continuous", "serialized" (or "1": continuous)
ENV_PERIOD = "AIFLAME_GPU_PC_PERIOD"  # exponent: one sample every 2**N cycles (5..31)
PCS_PER_BUFFER = 10000
SCRATCH_BUFFER = 64 << 20  # CUPTI's buffer of parsed records between two GetData calls

PRIVILEGES_HINT = (
    "GPU PC sampling is not permitted for this user (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES): "
    "run as root, or allow profiling for all users with "
    "'options nvidia NVreg_RestrictProfilingToAdminUsers=0' in /etc/modprobe.d/ and reload "
    "the nvidia driver (in a container: run it with --cap-add=SYS_ADMIN)"
)

_SYNC_CBIDS = (
    17,
    121,
    126,
    440,
    800,
)  # cuCtxSynchronize, cuEventSynchronize, cuStreamSynchronize(_ptsz), cuCtxSynchronize_v2


def _libcupti():
    """The libcupti that matches the program's CUDA: torch's wheel first, then the rest."""
    env = os.environ.get("AIFLAME_LIBCUPTI")
    candidates = [env] if env else []
    for p in sys.path:
        candidates += sorted(
            glob.glob(os.path.join(p, "nvidia", "cuda_cupti", "lib", "libcupti.so*"))
        )
        candidates += sorted(glob.glob(os.path.join(p, "nvidia", "cu1*", "lib", "libcupti.so*")))
    cuda = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    candidates += sorted(glob.glob(os.path.join(cuda, "extras", "CUPTI", "lib64", "libcupti.so*")))
    candidates.append("libcupti.so")
    for path in candidates:
        try:
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        util = None
        folder = os.path.dirname(path)
        with contextlib.suppress(OSError):  # NVIDIA ships it beside libcupti
            util = ctypes.CDLL(os.path.join(folder, "libpcsamplingutil.so"))
        return lib, util, path
    return None, None, None


class Collector:
    def __init__(self, directory, mode, period):
        self.dir = directory
        self.pid = os.getpid()
        self.mode = mode
        self.period = period
        self.lock = threading.RLock()
        self.contexts = {}  # ctx pointer -> _Context
        self.modules = 0
        self.errors = set()
        self.cupti, self.util, self.path = _libcupti()
        self.out = os.path.join(directory, f"gpupc-{self.pid}.dat")
        self.cubins = os.path.join(directory, f"gpupc-{self.pid}.cubins")
        self._callback = api.CALLBACK_FUNC(self._on_callback)  # kept alive: CUPTI calls it
        self.subscriber = ctypes.c_void_p()

    # -- reporting ----------------------------------------------------------------------
    def note(self, message):
        if message in self.errors:
            return
        self.errors.add(message)
        path = os.path.join(self.dir, f"gpupc-{self.pid}.error")
        with contextlib.suppress(OSError), open(path, "a") as f:
            f.write(message.replace("\n", " ") + "\n")

    def check(self, rc, what):
        if rc == api.CUPTI_SUCCESS:
            return True
        if rc == api.CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
            self.note(PRIVILEGES_HINT)
        else:
            text = ctypes.c_char_p()
            try:
                self.cupti.cuptiGetResultString(rc, ctypes.byref(text))
                name = (text.value or b"").decode("utf-8", "replace")
            except (AttributeError, OSError):
                name = ""
            self.note(f"{what} failed: CUPTI error {rc} {name}")
        return False

    # -- start --------------------------------------------------------------------------
    def start(self):
        if self.cupti is None:
            self.note("libcupti not found: no GPU PC samples (pip install nvidia-cuda-cupti-cu12)")
            return False
        if self.util is None:
            self.note(f"libpcsamplingutil not found beside {self.path}: no GPU PC samples")
            return False
        rc = self.cupti.cuptiSubscribe(ctypes.byref(self.subscriber), self._callback, None)
        if rc == 39:  # CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
            self.note("another CUPTI client (Nsight, a profiler) is attached: no GPU PC samples")
            return False
        if not self.check(rc, "cuptiSubscribe"):
            return False
        self.check(
            self.cupti.cuptiEnableDomain(1, self.subscriber, api.CB_DOMAIN_RESOURCE),
            "cuptiEnableDomain",
        )
        for cbid in _SYNC_CBIDS:
            self.cupti.cuptiEnableCallback(1, self.subscriber, api.CB_DOMAIN_DRIVER_API, cbid)
        atexit.register(self.stop)
        return True

    def _on_callback(self, userdata, domain, cbid, data):
        try:
            if domain == api.CB_DOMAIN_RESOURCE:
                res = ctypes.cast(data, ctypes.POINTER(api.ResourceData)).contents
                if cbid == api.CBID_RESOURCE_CONTEXT_CREATED:
                    self._context_created(res.context)
                elif cbid == api.CBID_RESOURCE_CONTEXT_DESTROY_STARTING:
                    self._drain(res.context, final=True)
                elif cbid == api.CBID_RESOURCE_MODULE_LOADED:
                    self._module_loaded(res)
            elif domain == api.CB_DOMAIN_DRIVER_API:
                cb = ctypes.cast(data, ctypes.POINTER(api.CallbackData)).contents
                if cb.callbackSite == 1:  # CUPTI_API_EXIT
                    self._drain(cb.context)
        except Exception as e:  # a collector bug must never reach the program
            self.note(f"PC sampling callback: {type(e).__name__}: {e}")

    # -- contexts -----------------------------------------------------------------------
    def _context_created(self, ctx):
        with self.lock:
            if ctx in self.contexts:
                return
            c = _Context(self, ctx)
            if c.configure():
                self.contexts[ctx] = c

    def _module_loaded(self, res):
        mod = ctypes.cast(res.resourceDescriptor, ctypes.POINTER(api.ModuleResourceData)).contents
        if not mod.pCubin or not mod.cubinSize:
            return
        data = ctypes.string_at(mod.pCubin, mod.cubinSize)
        if data[:4] != b"\x7fELF":
            return  # a PTX-only module: no SASS to name
        with self.lock:
            self.modules += 1
            os.makedirs(self.cubins, exist_ok=True)
            with open(os.path.join(self.cubins, f"{self.modules}.cubin"), "wb") as f:
                f.write(data)

    def _drain(self, ctx, final=False):
        with self.lock:
            c = self.contexts.get(ctx)
            if c is not None:
                c.drain()
                if final:
                    c.disable()
                    del self.contexts[ctx]

    def stop(self):
        with self.lock:
            for ctx in list(self.contexts):
                self._drain(ctx, final=True)
            if self.subscriber:
                self.cupti.cuptiUnsubscribe(self.subscriber)
                self.subscriber = ctypes.c_void_p()


class _Context:
    """PC sampling of one CUDA context: its configuration, buffers and stall reasons."""

    def __init__(self, owner, ctx):
        self.o = owner
        self.cupti = owner.cupti
        self.ctx = ctx
        self.names = None
        self.index = None
        self.nreasons = 0
        self.data = None
        self.keep = []

    def _params(self, cls, last):
        p = cls()
        p.size = api.struct_size(cls, last)
        p.ctx = self.ctx
        return p

    def configure(self):
        o = self.o
        if not o.check(
            self.cupti.cuptiPCSamplingEnable(
                ctypes.byref(self._params(api.PCSamplingCtxParams, "ctx"))
            ),
            "cuptiPCSamplingEnable",
        ):
            return False
        n = ctypes.c_size_t()
        p = self._params(api.PCSamplingGetNumStallReasonsParams, "numStallReasons")
        p.numStallReasons = ctypes.pointer(n)
        if not o.check(
            self.cupti.cuptiPCSamplingGetNumStallReasons(ctypes.byref(p)),
            "cuptiPCSamplingGetNumStallReasons",
        ):
            return False
        self.nreasons = n.value
        bufs = [ctypes.create_string_buffer(api.STALL_REASON_STRING_SIZE) for _ in range(n.value)]
        self.keep += bufs
        self.names = (ctypes.c_char_p * n.value)(*[ctypes.cast(b, ctypes.c_char_p) for b in bufs])
        self.index = (ctypes.c_uint32 * n.value)()
        q = self._params(api.PCSamplingGetStallReasonsParams, "stallReasons")
        q.numStallReasons = n.value
        q.stallReasonIndex = self.index
        q.stallReasons = self.names
        if not o.check(
            self.cupti.cuptiPCSamplingGetStallReasons(ctypes.byref(q)),
            "cuptiPCSamplingGetStallReasons",
        ):
            return False
        self.config_buffer = self._new_data()
        self.data = self._new_data()
        attrs = [
            (api.ATTR_STALL_REASON, None),
            (api.ATTR_COLLECTION_MODE, o.mode),
            (api.ATTR_OUTPUT_DATA_FORMAT, api.OUTPUT_DATA_FORMAT_PARSED),
            (api.ATTR_SCRATCH_BUFFER_SIZE, SCRATCH_BUFFER),
            (api.ATTR_SAMPLING_DATA_BUFFER, ctypes.addressof(self.config_buffer)),
        ]
        if o.period:
            attrs.append((api.ATTR_SAMPLING_PERIOD, o.period))
        self.config = (api.PCSamplingConfigurationInfo * len(attrs))()
        for i, (kind, value) in enumerate(attrs):
            info = self.config[i]
            info.attributeType = kind
            d = info.attributeData
            if kind == api.ATTR_STALL_REASON:
                d.stallReasonData.stallReasonCount = self.nreasons
                d.stallReasonData.pStallReasonIndex = self.index
            elif kind == api.ATTR_COLLECTION_MODE:
                d.collectionMode = value
            elif kind == api.ATTR_OUTPUT_DATA_FORMAT:
                d.outputDataFormat = value
            elif kind == api.ATTR_SCRATCH_BUFFER_SIZE:
                d.scratchBufferSize = value
            elif kind == api.ATTR_SAMPLING_DATA_BUFFER:
                d.samplingDataBuffer = value
            elif kind == api.ATTR_SAMPLING_PERIOD:
                d.samplingPeriod = value
        c = self._params(api.PCSamplingConfigurationInfoParams, "pPCSamplingConfigurationInfo")
        c.numAttributes = len(attrs)
        c.pPCSamplingConfigurationInfo = self.config
        if not o.check(
            self.cupti.cuptiPCSamplingSetConfigurationAttribute(ctypes.byref(c)),
            "cuptiPCSamplingSetConfigurationAttribute",
        ):
            return False
        self.table = api.PcSamplingStallReasons(self.nreasons, self.names, self.index)
        return True

    def _new_data(self):
        recs = (api.PCSamplingPCData * PCS_PER_BUFFER)()
        for r in recs:
            r.size = ctypes.sizeof(api.PCSamplingPCData)
            arr = (api.PCSamplingStallReason * max(self.nreasons, 1))()
            self.keep.append(arr)
            r.stallReason = ctypes.cast(arr, ctypes.POINTER(api.PCSamplingStallReason))
        self.keep.append(recs)
        d = api.PCSamplingData()
        d.size = ctypes.sizeof(api.PCSamplingData)
        d.collectNumPcs = PCS_PER_BUFFER
        d.pPcData = ctypes.cast(recs, ctypes.POINTER(api.PCSamplingPCData))
        return d

    def drain(self):
        """Get every PC record CUPTI holds for this context and append it to the dump."""
        o = self.o
        for _ in range(10000):  # bounded: CUPTI says how many remain
            p = self._params(api.PCSamplingGetDataParams, "pcSamplingData")
            p.pcSamplingData = ctypes.addressof(self.data)
            if not o.check(
                self.cupti.cuptiPCSamplingGetData(ctypes.byref(p)), "cuptiPCSamplingGetData"
            ):
                return
            if self.data.totalNumPcs:
                self._write()
            if not self.data.remainingNumPcs:
                return

    def _write(self):
        first = not os.path.exists(self.o.out)
        put = api.PutPcSampDataParams()
        put.size = api.struct_size(api.PutPcSampDataParams, "fileName")
        put.bufferType = api.PC_SAMPLING_BUFFER_PC_TO_COUNTER_DATA
        put.pSamplingData = ctypes.addressof(self.data)
        put.numAttributes = len(self.config)
        put.pPCSamplingConfigurationInfo = self.config
        put.pPcSamplingStallReasons = ctypes.pointer(self.table) if first else None
        put.fileName = self.o.out.encode()
        rc = self.o.util.CuptiUtilPutPcSampData(ctypes.byref(put))
        if rc != 0:
            self.o.note(f"CuptiUtilPutPcSampData failed: error {rc}")

    def disable(self):
        self.cupti.cuptiPCSamplingDisable(
            ctypes.byref(self._params(api.PCSamplingCtxParams, "ctx"))
        )


def mode_from_env(value):
    if value in ("serialized", "kernel-serialized"):
        return api.COLLECTION_MODE_KERNEL_SERIALIZED
    return api.COLLECTION_MODE_CONTINUOUS


def start_from_env(directory):
    """Start the collector if ``aiflame record --gpu-pc-sampling`` asked for it."""
    value = os.environ.get(ENV, "")
    if not value or value == "0":
        return None
    period = os.environ.get(ENV_PERIOD, "")
    c = Collector(directory, mode_from_env(value), int(period) if period.isdigit() else 0)
    return c if c.start() else None
