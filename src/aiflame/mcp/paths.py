"""File inputs of the tools, confined to the directories the MCP server was given.

A model names files; the server reads only what lies under its roots (``--root``, the
working directory by default) once links are resolved, and only regular files and
directories (no devices, no FIFOs that would block a read). A relative path is taken
relative to the first root.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from aiflame.errors import AiflameError


class PathRefused(AiflameError):
    """A path outside the roots, missing, or not a file or directory."""


@dataclass(frozen=True)
class Roots:
    dirs: tuple[Path, ...]

    @classmethod
    def of(cls, dirs: list[str] | None) -> Roots:
        chosen = [Path(d).expanduser().resolve() for d in (dirs or [os.getcwd()])]
        for d in chosen:
            if not d.is_dir():
                raise AiflameError(f"--root {d}: not a directory")
        return cls(tuple(chosen))

    def resolve(self, path: str) -> str:
        """The real path of ``path`` if it is under a root (PathRefused otherwise)."""
        if not path or "\x00" in path:
            raise PathRefused("an empty or invalid path")
        p = Path(path).expanduser()
        if not p.is_absolute():
            p = self.dirs[0] / p
        real = p.resolve()
        if not any(real == d or d in real.parents for d in self.dirs):
            where = ", ".join(str(d) for d in self.dirs)
            raise PathRefused(f"{path}: outside the directories this server may read ({where})")
        try:
            mode = real.stat().st_mode
        except OSError as e:
            raise PathRefused(f"{path}: {e.strerror or e}") from None
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise PathRefused(f"{path}: not a regular file or a directory")
        return str(real)
