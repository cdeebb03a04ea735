#!/usr/bin/env python3
"""Build aiflame's BPF objects: src/aiflame/collectors/ebpf/bpf/*.bpf.c -> objects/<arch>/.

The objects are committed, so users need no compiler; tests/unit/test_ebpf_build.py
rebuilds them and checks they are byte-identical. The build is reproducible: sources are
compiled from their own directory under relative names, DWARF is stripped (BTF and its
line info stay: libbpf needs them), and objects/MANIFEST pins the compiler version.

    python tools/build_bpf.py            # rebuild in place
    python tools/build_bpf.py --out DIR  # build elsewhere (the test does this)
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EBPF = ROOT / "src" / "aiflame" / "collectors" / "ebpf"
SOURCES = EBPF / "bpf"
OBJECTS = EBPF / "objects"
# clang's -D__TARGET_ARCH_* per shipped architecture (pt_regs layouts differ)
ARCHES = {"x86_64": "x86", "aarch64": "arm64"}
CLANG_CANDIDATES = ("clang-14", "clang")
STRIP_CANDIDATES = ("llvm-strip-14", "llvm-strip")


class BuildError(Exception):
    pass


def find_tool(candidates: tuple[str, ...]) -> str:
    for name in candidates:
        path = shutil.which(name)
        if path:
            return path
    raise BuildError(f"none of {', '.join(candidates)} found (apt-get install clang llvm)")


def clang_version(clang: str) -> str:
    out = subprocess.run([clang, "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"clang version (\d+\.\d+\.\d+)", out)
    if not m:
        raise BuildError(f"cannot read the version of {clang}")
    return m.group(1)


def build_one(clang: str, strip: str, source: Path, arch: str, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp.o")
    cmd = [
        clang,
        "-target",
        "bpf",
        f"-D__TARGET_ARCH_{ARCHES[arch]}",
        "-O2",
        "-g",
        "-Wall",
        "-Werror",
        "-fno-ident",  # no compiler banner in .comment
        "-fdebug-compilation-dir=.",
        f"-fdebug-prefix-map={SOURCES}=.",
        "-c",
        source.name,  # relative: BTF line info names files as built
        "-o",
        str(tmp),
    ]
    proc = subprocess.run(cmd, cwd=SOURCES, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{source.name} ({arch}):\n{proc.stderr.strip()}")
    # DWARF holds nothing libbpf uses; BTF and .BTF.ext stay.
    subprocess.run([strip, "-g", str(tmp), "-o", str(out)], check=True)
    tmp.unlink()


def build(out_dir: Path) -> list[Path]:
    clang = find_tool(CLANG_CANDIDATES)
    strip = find_tool(STRIP_CANDIDATES)
    built = []
    for source in sorted(SOURCES.glob("*.bpf.c")):
        stem = source.name.removesuffix(".bpf.c")
        for arch in ARCHES:
            target = out_dir / arch / f"{stem}.bpf.o"
            build_one(clang, strip, source, arch, target)
            built.append(target)
    lines = [f"clang {clang_version(clang)}"]
    for path in built:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        lines.append(f"{digest}  {path.relative_to(out_dir)}")
    (out_dir / "MANIFEST").write_text("\n".join(lines) + "\n")
    return built


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OBJECTS, help="output directory")
    args = ap.parse_args()
    try:
        built = build(args.out)
    except BuildError as e:
        print(f"build_bpf: {e}", file=sys.stderr)
        return 1
    for path in built:
        print(f"{path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
