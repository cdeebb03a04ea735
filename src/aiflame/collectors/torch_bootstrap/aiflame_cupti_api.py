"""ctypes declarations of CUPTI's PC Sampling API (``cupti_pcsampling.h``) and of the PC
Sampling Utility (``cupti_pcsampling_util.h``), as CUPTI 12.x/13.x define them.

No Python binding exposes these calls (``cupti-python`` has no PC sampling), so the
structures are written out here; ``tests/unit/test_cupti_structs.py`` compiles a C program
against the headers of the ``nvidia-cuda-cupti`` wheel and checks every size and offset.
This module runs inside the profiled program (it is imported by the bootstrap), so it
imports nothing of aiflame and only the standard library.
"""

import ctypes

CUPTI_SUCCESS = 0
CUPTI_ERROR_NOT_INITIALIZED = 15
CUPTI_ERROR_INSUFFICIENT_PRIVILEGES = 35
CUPTI_ERROR_NOT_SUPPORTED = 27
CUPTI_ERROR_NOT_COMPATIBLE = 28
CUPTI_ERROR_OUT_OF_MEMORY = 12

# CUpti_PCSamplingCollectionMode
COLLECTION_MODE_CONTINUOUS = 1
COLLECTION_MODE_KERNEL_SERIALIZED = 2

# CUpti_PCSamplingConfigurationAttributeType
ATTR_SAMPLING_PERIOD = 1
ATTR_STALL_REASON = 2
ATTR_SCRATCH_BUFFER_SIZE = 3
ATTR_HARDWARE_BUFFER_SIZE = 4
ATTR_COLLECTION_MODE = 5
ATTR_ENABLE_START_STOP_CONTROL = 6
ATTR_OUTPUT_DATA_FORMAT = 7
ATTR_SAMPLING_DATA_BUFFER = 8
ATTR_WORKER_THREAD_PERIODIC_SLEEP_SPAN = 9

OUTPUT_DATA_FORMAT_PARSED = 1
STALL_REASON_STRING_SIZE = 128  # CUPTI_STALL_REASON_STRING_SIZE

# CUpti_CallbackDomain / ids used by the collector
CB_DOMAIN_DRIVER_API = 1
CB_DOMAIN_RESOURCE = 3
CBID_RESOURCE_CONTEXT_CREATED = 1
CBID_RESOURCE_CONTEXT_DESTROY_STARTING = 2
CBID_RESOURCE_MODULE_LOADED = 6
CBID_RESOURCE_MODULE_UNLOAD_STARTING = 7


class PCSamplingStallReason(ctypes.Structure):
    _fields_ = [("pcSamplingStallReasonIndex", ctypes.c_uint32), ("samples", ctypes.c_uint32)]


class PCSamplingPCData(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("cubinCrc", ctypes.c_uint64),
        ("pcOffset", ctypes.c_uint64),
        ("functionIndex", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
        ("functionName", ctypes.c_char_p),
        ("stallReasonCount", ctypes.c_size_t),
        ("stallReason", ctypes.POINTER(PCSamplingStallReason)),
        ("correlationId", ctypes.c_uint32),
    ]


class PCSamplingData(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("collectNumPcs", ctypes.c_size_t),
        ("totalSamples", ctypes.c_uint64),
        ("droppedSamples", ctypes.c_uint64),
        ("totalNumPcs", ctypes.c_size_t),
        ("remainingNumPcs", ctypes.c_size_t),
        ("rangeId", ctypes.c_uint64),
        ("pPcData", ctypes.POINTER(PCSamplingPCData)),
        ("nonUsrKernelsTotalSamples", ctypes.c_uint64),
        ("hardwareBufferFull", ctypes.c_uint8),
    ]


class _StallReasonData(ctypes.Structure):
    _fields_ = [
        ("stallReasonCount", ctypes.c_size_t),
        ("pStallReasonIndex", ctypes.POINTER(ctypes.c_uint32)),
    ]


class _AttributeData(ctypes.Union):
    _fields_ = [
        ("invalidData", ctypes.c_uint64 * 3),
        ("samplingPeriod", ctypes.c_uint32),
        ("stallReasonData", _StallReasonData),
        ("scratchBufferSize", ctypes.c_size_t),
        ("hardwareBufferSize", ctypes.c_size_t),
        ("collectionMode", ctypes.c_int),
        ("enableStartStopControl", ctypes.c_uint32),
        ("outputDataFormat", ctypes.c_int),
        ("samplingDataBuffer", ctypes.c_void_p),
        ("workerThreadPeriodicSleepSpan", ctypes.c_uint32),
    ]


class PCSamplingConfigurationInfo(ctypes.Structure):
    _fields_ = [
        ("attributeType", ctypes.c_int),
        ("attributeStatus", ctypes.c_int),
        ("attributeData", _AttributeData),
    ]


class PCSamplingConfigurationInfoParams(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("pPriv", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
        ("numAttributes", ctypes.c_size_t),
        ("pPCSamplingConfigurationInfo", ctypes.POINTER(PCSamplingConfigurationInfo)),
    ]


class PCSamplingGetDataParams(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("pPriv", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
        ("pcSamplingData", ctypes.c_void_p),
    ]


class PCSamplingCtxParams(ctypes.Structure):
    """CUpti_PCSamplingEnableParams / DisableParams / StartParams / StopParams."""

    _fields_ = [("size", ctypes.c_size_t), ("pPriv", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


class PCSamplingGetNumStallReasonsParams(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("pPriv", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
        ("numStallReasons", ctypes.POINTER(ctypes.c_size_t)),
    ]


class PCSamplingGetStallReasonsParams(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("pPriv", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
        ("numStallReasons", ctypes.c_size_t),
        ("stallReasonIndex", ctypes.POINTER(ctypes.c_uint32)),
        ("stallReasons", ctypes.POINTER(ctypes.c_char_p)),
    ]


class GetCubinCrcParams(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("cubinSize", ctypes.c_size_t),
        ("cubin", ctypes.c_void_p),
        ("cubinCrc", ctypes.c_uint64),
    ]


class ResourceData(ctypes.Structure):
    """CUpti_ResourceData: the callback payload of the resource domain."""

    _fields_ = [
        ("context", ctypes.c_void_p),
        ("resourceHandle", ctypes.c_void_p),
        ("resourceDescriptor", ctypes.c_void_p),
    ]


class ModuleResourceData(ctypes.Structure):
    """CUpti_ModuleResourceData: what CUPTI passes on module load (the cubin bytes)."""

    _fields_ = [
        ("moduleId", ctypes.c_uint32),
        ("cubinSize", ctypes.c_size_t),
        ("pCubin", ctypes.c_void_p),
    ]


class CallbackData(ctypes.Structure):
    """CUpti_CallbackData (driver/runtime API domains)."""

    _fields_ = [
        ("callbackSite", ctypes.c_int),
        ("functionName", ctypes.c_char_p),
        ("functionParams", ctypes.c_void_p),
        ("functionReturnValue", ctypes.c_void_p),
        ("symbolName", ctypes.c_char_p),
        ("context", ctypes.c_void_p),
        ("contextUid", ctypes.c_uint32),
        ("correlationData", ctypes.POINTER(ctypes.c_uint64)),
        ("correlationId", ctypes.c_uint32),
    ]


# CUpti_CallbackFunc(void *userdata, CUpti_CallbackDomain, CUpti_CallbackId, const void *)
CALLBACK_FUNC = ctypes.CFUNCTYPE(
    None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p
)


# -- PC Sampling Utility (libpcsamplingutil) ----------------------------------------------

PC_SAMPLING_BUFFER_PC_TO_COUNTER_DATA = 1


class PcSamplingStallReasons(ctypes.Structure):
    _fields_ = [
        ("numStallReasons", ctypes.c_size_t),
        ("stallReasons", ctypes.POINTER(ctypes.c_char_p)),
        ("stallReasonIndex", ctypes.POINTER(ctypes.c_uint32)),
    ]


class PutPcSampDataParams(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("bufferType", ctypes.c_int),
        ("pSamplingData", ctypes.c_void_p),
        ("numAttributes", ctypes.c_size_t),
        ("pPCSamplingConfigurationInfo", ctypes.POINTER(PCSamplingConfigurationInfo)),
        ("pPcSamplingStallReasons", ctypes.POINTER(PcSamplingStallReasons)),
        ("fileName", ctypes.c_char_p),
    ]


class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("totalBuffers", ctypes.c_uint32)]


class BufferInfo(ctypes.Structure):
    _fields_ = [
        ("recordCount", ctypes.c_uint64),
        ("numStallReasons", ctypes.c_size_t),
        ("numSelectedStallReasons", ctypes.c_uint64),
        ("bufferByteSize", ctypes.c_uint64),
    ]


class GetHeaderDataParams(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("fileHandle", ctypes.c_void_p), ("headerInfo", Header)]


class GetBufferInfoParams(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("fileHandle", ctypes.c_void_p),
        ("bufferInfoData", BufferInfo),
    ]


class GetPcSampDataParams(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("fileHandle", ctypes.c_void_p),
        ("bufferType", ctypes.c_int),
        ("pBufferInfoData", ctypes.POINTER(BufferInfo)),
        ("pSamplingData", ctypes.c_void_p),
        ("numAttributes", ctypes.c_size_t),
        ("pPCSamplingConfigurationInfo", ctypes.POINTER(PCSamplingConfigurationInfo)),
        ("pPcSamplingStallReasons", ctypes.POINTER(PcSamplingStallReasons)),
    ]


def struct_size(struct, last_field):
    """CUPTI's ``*ParamsSize`` macros: offsetof(last field) + its size."""
    f = getattr(struct, last_field)
    return f.offset + f.size
