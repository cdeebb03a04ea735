"""Separate debug files: where a stripped binary's ``.symtab`` went.

Distributions strip binaries and ship the symbols apart (Debian's ``*-dbg``/``-dbgsym``,
Fedora's ``-debuginfo``), found the way gdb finds them:

- by build-id: ``<debug dir>/.build-id/ab/cdef....debug``;
- by ``.gnu_debuglink``: the named file next to the binary, in its ``.debug/`` folder, or
  under ``<debug dir>/<binary's folder>/``.

A candidate is accepted only if it is the same build (equal build-ids, or, when it has none,
the CRC-32 that the debuglink records), so a stale debug file never names the wrong code.
Each path is tried inside the target's root first (a container's own debug files), then as
the host sees it.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator, Sequence

from aiflame.symbolize.elf import ElfError, ElfImage, open_image

DEBUG_DIRS = ("/usr/lib/debug",)
_CRC_CHUNK = 1 << 22


def candidates(
    build_id: bytes | None,
    debuglink: str | None,
    binary_path: str,
    debug_dirs: Sequence[str] = DEBUG_DIRS,
) -> Iterator[tuple[str, bool]]:
    """``(path, found through the debuglink)`` to try for a binary at ``binary_path`` (as its
    process sees it), best first."""
    if build_id and len(build_id) >= 2:
        hexid = build_id.hex()
        for d in debug_dirs:
            yield os.path.join(d, ".build-id", hexid[:2], hexid[2:] + ".debug"), False
    if debuglink and "/" not in debuglink:
        folder = os.path.dirname(binary_path)
        yield os.path.join(folder, debuglink), True
        yield os.path.join(folder, ".debug", debuglink), True
        for d in debug_dirs:
            yield os.path.join(d, folder.lstrip("/"), debuglink), True


def _crc32(path: str) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CRC_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


def find_debug_image(
    image: ElfImage,
    binary_path: str,
    roots: Sequence[str] = ("",),
    debug_dirs: Sequence[str] = DEBUG_DIRS,
) -> ElfImage | None:
    """The debug file that belongs to ``image``, or None.

    ``binary_path`` is the binary's path as its process sees it; ``roots`` are prefixes to
    try each candidate under (``/proc/PID/root`` first for a container, then ``""``).
    """
    build_id = image.build_id()
    link = image.debuglink()
    link_name, link_crc = link if link else (None, 0)
    seen: set[str] = set()
    for path, via_link in candidates(build_id, link_name, binary_path, debug_dirs):
        for root in roots:
            full = root + path
            if full in seen:
                continue
            seen.add(full)
            try:
                debug, _ = open_image(full)
                if os.path.samefile(full, image.name):
                    continue  # a debuglink naming the binary itself
                if _same_build(debug, build_id, link_crc, full, via_link):
                    return debug
            except (OSError, ElfError, ValueError):
                continue
    return None


def _same_build(
    debug: ElfImage, build_id: bytes | None, crc: int, path: str, via_link: bool
) -> bool:
    theirs = debug.build_id()
    if build_id and theirs:
        return theirs == build_id
    if via_link and crc:
        return _crc32(path) == crc
    return False


def mini_debuginfo(image: ElfImage) -> ElfImage | None:
    """The ``.gnu_debugdata`` section (Fedora's MiniDebugInfo): an xz-compressed ELF file
    holding the ``.symtab`` of the functions that ``.dynsym`` leaves out."""
    i = image.section_index(".gnu_debugdata")
    if i is None:
        return None
    try:
        import lzma  # only needed here, and some minimal Pythons lack it

        return ElfImage(lzma.decompress(image.section_bytes(i)), image.name + ":.gnu_debugdata")
    except (ImportError, ElfError, ValueError, lzma.LZMAError):
        return None
