"""The Connect protocol's unary calls (what Grafana and Pyroscope clients speak), over
Starlette: ``POST /package.Service/Method`` with a protobuf (``application/proto``) or JSON
(``application/json``) body, answered in the same codec; errors as Connect's JSON error
``{"code", "message"}`` with the matching HTTP status.
"""

from __future__ import annotations

import json

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from starlette.requests import Request
from starlette.responses import Response

from aiflame.server.errors import BadRequest, RequestError, UnsupportedMediaType

PROTO_TYPES = ("application/proto", "application/x-protobuf", "application/protobuf")
JSON_TYPES = ("application/json",)


def codec_of(request: Request) -> str:
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype in PROTO_TYPES or ctype.startswith("application/grpc"):
        return "proto"
    if ctype in JSON_TYPES or ctype == "":
        return "json"
    raise UnsupportedMediaType(
        f"unsupported content type {ctype!r}: use application/proto or application/json"
    )


def parse(message_type: type[Message], body: bytes, codec: str) -> Message:
    msg = message_type()
    try:
        if codec == "proto":
            msg.ParseFromString(body)
        else:
            json_format.Parse(
                body.decode("utf-8") if body else "{}", msg, ignore_unknown_fields=True
            )
    except (DecodeError, json_format.ParseError, UnicodeDecodeError, ValueError) as e:
        what = "protobuf" if codec == "proto" else "JSON"
        raise BadRequest(f"the body is not a valid {what} {msg.DESCRIPTOR.name}: {e}") from None
    return msg


def respond(message: Message, codec: str) -> Response:
    if codec == "proto":
        return Response(message.SerializeToString(), media_type="application/proto")
    text = json_format.MessageToJson(message, preserving_proto_field_name=False, indent=None)
    return Response(text, media_type="application/json")


def error_response(e: RequestError) -> Response:
    headers = {}
    if e.retry_after is not None:
        headers["Retry-After"] = str(max(1, round(e.retry_after)))
    body = json.dumps({"code": e.connect_code, "message": e.message})
    return Response(body, status_code=e.status, media_type="application/json", headers=headers)
