"""Ring-buffer records of ``bpf/cuda.bpf.c`` built by hand, byte for byte as the BPF program
writes them (``struct call`` then the stack or the name), for tests without a kernel."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from aiflame.collectors.ebpf.cuda_apis import API_INDEX, APIS
from aiflame.collectors.ebpf.cuda_events import EV_CALL, EV_NAME, F_RETURNED

HDR = struct.Struct("<QQ7QQQqIIHBBI")


def record(
    api: str,
    ts: int,
    *,
    args: Sequence[int] = (),
    stack: Sequence[int] = (),
    caller: int | None = None,
    duration: int = 0,
    ret: int = 0,
    result: int = 0,
    pid: int = 100,
    tid: int = 100,
    name: bytes | None = None,
) -> bytes:
    """One record. Calls with a return probe get F_RETURNED; ``stack`` is what
    bpf_get_stack wrote (innermost first); ``caller`` defaults to its first frame."""
    api_id = API_INDEX[api]
    returned = APIS[api_id].needs_return
    full = [*args, *[0] * (7 - len(args))]
    if name is not None:
        payload = name + b"\0"
        typ = EV_NAME
    else:
        payload = struct.pack(f"<{len(stack)}Q", *stack)
        typ = EV_CALL
    head = HDR.pack(
        ts,
        duration if returned else 0,
        *full,
        stack[0] if caller is None and stack else (caller or 0),
        result,
        ret,
        pid,
        tid,
        api_id,
        typ,
        F_RETURNED if returned else 0,
        len(payload),
    )
    return head + payload
