"""Request bodies within limits: a declared or streamed size over the limit, or a gzip that
inflates past it (a gzip bomb), is a 413 before anything is parsed."""

from __future__ import annotations

import zlib

from starlette.requests import Request

from aiflame.server.errors import BadRequest, PayloadTooLarge

GZIP_MAGIC = b"\x1f\x8b"


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise PayloadTooLarge(f"the body is larger than the limit of {limit:,} bytes")
        except ValueError:
            raise BadRequest("invalid Content-Length") from None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"the body is larger than the limit of {limit:,} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def gunzip(data: bytes, limit: int, what: str = "the body") -> bytes:
    """Inflate gzip data (several members allowed), refusing output over ``limit`` bytes."""
    out: list[bytes] = []
    size = 0
    rest = data
    while rest:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            part = d.decompress(rest, limit - size + 1)
        except zlib.error as e:
            raise BadRequest(f"{what} is not valid gzip data ({e})") from None
        size += len(part)
        if size > limit or d.unconsumed_tail:
            raise PayloadTooLarge(f"{what} inflates to more than the limit of {limit:,} bytes")
        if not d.eof:
            raise BadRequest(f"{what} is truncated gzip data")
        out.append(part)
        rest = d.unused_data
        if rest and not rest.startswith(GZIP_MAGIC):
            break  # trailing garbage after the last member: ignored, as gzip(1) does
    return b"".join(out)


def content_decoded(request: Request, body: bytes, limit: int) -> bytes:
    """The body with its ``Content-Encoding`` (gzip or identity) undone."""
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding in ("gzip", "x-gzip"):
        return gunzip(body, limit)
    raise BadRequest(f"unsupported Content-Encoding {encoding!r} (use gzip or none)")
