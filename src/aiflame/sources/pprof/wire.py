"""Recognise a pprof ``Profile`` message from its first bytes, without decoding it all.

Protobuf has no magic number, so the sniffer walks the wire format and accepts only what
``profile.proto`` allows: known field numbers with their wire types, nested messages that
parse as their own types, UTF-8 strings. Text (folded stacks, perf script, JSON) fails
within a few bytes; a tiny text that happens to parse is still refused because a real
profile always starts with a sample type or carries a string table.
"""

from __future__ import annotations

VARINT, I64, LEN, I32 = 0, 1, 2, 5

# field number -> (allowed wire types, schema of the nested message or "str" or None)
_VALUE_TYPE = {1: ({VARINT}, None), 2: ({VARINT}, None)}
_LABEL = {n: ({VARINT}, None) for n in range(1, 5)}
_SAMPLE = {1: ({VARINT, LEN}, None), 2: ({VARINT, LEN}, None), 3: ({LEN}, _LABEL)}
_MAPPING = {n: ({VARINT}, None) for n in range(1, 11)}
_LINE = {n: ({VARINT}, None) for n in range(1, 4)}
_LOCATION: dict[int, tuple[set[int], object]] = {1: ({VARINT}, None), 2: ({VARINT}, None)}
_LOCATION |= {3: ({VARINT}, None)}
_LOCATION |= {4: ({LEN}, _LINE), 5: ({VARINT}, None)}
_FUNCTION = {n: ({VARINT}, None) for n in range(1, 6)}
_PROFILE: dict[int, tuple[set[int], object]] = {
    1: ({LEN}, _VALUE_TYPE),
    2: ({LEN}, _SAMPLE),
    3: ({LEN}, _MAPPING),
    4: ({LEN}, _LOCATION),
    5: ({LEN}, _FUNCTION),
    6: ({LEN}, "str"),
    11: ({LEN}, _VALUE_TYPE),
    13: ({VARINT, LEN}, None),
}
_PROFILE |= {n: ({VARINT}, None) for n in (7, 8, 9, 10, 12, 14, 15)}


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int] | None:
    result = shift = 0
    while pos < end and shift < 70:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    return None


def _message_ok(buf: bytes, pos: int, end: int, schema: dict) -> bool:
    """Whether ``buf[pos:end]`` is a complete message of ``schema`` (nested ones checked)."""
    while pos < end:
        tag = _varint(buf, pos, end)
        if tag is None:
            return False
        key, pos = tag
        field, wire = key >> 3, key & 7
        rule = schema.get(field)
        if rule is None or wire not in rule[0]:
            return False
        if wire == VARINT:
            value = _varint(buf, pos, end)
            if value is None:
                return False
            pos = value[1]
            continue
        size = _varint(buf, pos, end)
        if size is None or size[1] + size[0] > end:
            return False
        start, pos = size[1], size[1] + size[0]
        if not _field_ok(buf, start, pos, rule):
            return False
    return True


def looks_like_profile(head: bytes, complete: bool) -> bool:
    """Whether ``head`` starts a serialized pprof Profile; ``complete`` if it is all of it.

    When the head is cut short, its last, partial field is not judged.
    """
    end = len(head)
    pos = 0
    seen: set[int] = set()
    while pos < end:
        tag = _varint(head, pos, end)
        if tag is None:
            if complete:
                return False
            break
        key, pos = tag
        field, wire = key >> 3, key & 7
        rule = _PROFILE.get(field)
        if rule is None or wire not in rule[0]:
            return False
        if wire == VARINT:
            value = _varint(head, pos, end)
            if value is None:
                if complete:
                    return False
                break
            pos = value[1]
        else:
            size = _varint(head, pos, end)
            if size is None or size[1] + size[0] > end:
                if complete:
                    return False
                break  # runs past the cut: not judged
            start, pos = size[1], size[1] + size[0]
            if not _field_ok(head, start, pos, rule):
                return False
        seen.add(field)
    return 1 in seen or 6 in seen


def _field_ok(buf: bytes, start: int, end: int, rule: tuple[set[int], object]) -> bool:
    nested = rule[1]
    if nested == "str":
        try:
            buf[start:end].decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True
    if isinstance(nested, dict):
        return _message_ok(buf, start, end, nested)
    return True  # packed varints (comment ids): judged by the decoder
