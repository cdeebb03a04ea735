"""cgroup v2 ids (what ``bpf_get_current_cgroup_id`` returns) -> cgroup paths.

A cgroup v2 id is the inode number of the cgroup's directory in the cgroup2 file system,
so walking that tree once names every id; containers show as their cgroup
(``/system.slice/docker-1a2b....scope``, ``/kubepods/.../cri-containerd-....scope``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable


def cgroup2_root(mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """Where the cgroup2 hierarchy is mounted (``/sys/fs/cgroup``, or ``.../unified``)."""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                pre, sep, post = line.partition(" - ")
                if sep and post.split(" ", 1)[0] == "cgroup2":
                    return pre.split()[4].replace("\\040", " ")
    except OSError:
        pass
    return None


def cgroup_paths(ids: Iterable[int], root: str | None = None) -> dict[int, str]:
    """Path (relative to the hierarchy, ``/`` for its root) of each id found."""
    wanted = set(ids)
    root = root or cgroup2_root()
    found: dict[int, str] = {}
    if not root or not wanted:
        return found
    stack = [root]
    while stack and len(found) < len(wanted):
        path = stack.pop()
        try:
            ino = os.stat(path).st_ino
            entries = list(os.scandir(path))
        except OSError:
            continue
        if ino in wanted:
            found[ino] = "/" + os.path.relpath(path, root).removeprefix(".")
        stack.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))
    return found
