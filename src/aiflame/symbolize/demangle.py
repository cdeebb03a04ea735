"""C++ demangling of many names at once, through the system's ``c++filt``.

Names are demangled in one batch (one process for the whole profile, not one per name).
Only names that look mangled (Itanium ABI ``_Z...``) are sent; when ``c++filt`` is not
installed, or fails, names are returned unchanged: a mangled name is ugly, not wrong.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable

# Itanium C++ ABI manglings (Linux, also CUDA device code), with the macOS extra underscore.
_MANGLED = re.compile(r"^_{1,2}Z[A-Za-z0-9_.$]+$")
TIMEOUT_S = 30


def is_mangled(name: str) -> bool:
    return bool(_MANGLED.match(name))


def demangle_many(names: Iterable[str], tool: str | None = None) -> dict[str, str]:
    """``{mangled: demangled}`` for the names that look mangled (others are left out)."""
    todo = sorted({n for n in names if is_mangled(n)})
    if not todo:
        return {}
    exe = tool or shutil.which("c++filt")
    if exe is None:
        return {}
    try:
        done = subprocess.run(
            [exe],
            input="\n".join(todo) + "\n",
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return {}
    if len(done) != len(todo):  # c++filt answers line for line; anything else is unusable
        return {}
    return {m: d for m, d in zip(todo, done, strict=True) if d and d != m}
