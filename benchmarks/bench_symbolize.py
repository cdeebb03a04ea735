"""aiflame's native symbolizer against ``addr2line -f -C`` (and ``llvm-addr2line``).

    python benchmarks/bench_symbolize.py [--lib PATH] [--count 100000] [--repeat 3]
        [--peer-count N] [--seed 5]

Addresses: ``--count`` function symbols of the library's ``.symtab`` (FUNC, size > 0, as
``readelf -sW`` lists them, so the choice does not depend on aiflame's parser), drawn with a
fixed seed, each with a random offset inside the function. aiflame resolves them as
runtime addresses of a process that maps the library at 0x7f0000000000 (a maps snapshot built
from ``readelf -lW``'s PT_LOAD segments the way the kernel maps them): the whole public path,
maps -> file offset -> ELF address -> symbol -> demangled name, starting from an empty
:class:`SymbolResolver` in a fresh process (ELF loading included). ``addr2line`` and
``llvm-addr2line`` get the library's own addresses on stdin. Every command is a fresh process,
timed wall-clock and CPU (user + sys: steadier on a shared machine); aiflame's child also
reports its time after imports. Names are compared address by address; differences are
sorted into alias choices (another symbol at the same address), demangler spelling, and others.

GNU addr2line scans the symbol table for every address (about 8 ms per address on
libtorch_cpu.so, so 100k addresses take some 15 minutes); ``--peer-count`` gives it only
the first N addresses and scales its time up, which the output says.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BASE = 0x7F0000000000
PAGE = 0x1000
SHOW = int(os.environ.get("BENCH_SHOW", "3"))  # examples of each kind of difference

CHILD = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
from aiflame.symbolize.process import SymbolResolver
t1 = time.perf_counter()
addrs = np.array([int(x, 16) for x in open(sys.argv[1]).read().split()], dtype=np.uint64)
maps_text = open(sys.argv[2]).read()
t2 = time.perf_counter()
resolver = SymbolResolver()
syms = resolver.process(int(sys.argv[3]), maps_text).symbolize(addrs)
t3 = time.perf_counter()
# again, as a collector would for its next batch: files and names are cached by then
resolver.process(int(sys.argv[3]), maps_text).symbolize(addrs)
t4 = time.perf_counter()
with open(sys.argv[4], "w") as f:
    f.write("\\n".join(s.name for s in syms) + "\\n")
times = {"import": t1 - t0, "read": t2 - t1, "symbolize": t3 - t2, "again": t4 - t3}
print(json.dumps(times), file=sys.stderr)
"""


def default_lib() -> str:
    import torch

    return os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")


def run(
    argv: list[str], stdin: str | None = None, stdout: str | None = None
) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + sys) and stderr of one command."""
    fin = open(stdin, "rb") if stdin else subprocess.DEVNULL  # noqa: SIM115
    fout = open(stdout, "wb") if stdout else subprocess.DEVNULL  # noqa: SIM115
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=fin, stdout=fout, stderr=subprocess.PIPE)
    err = proc.stderr.read() if proc.stderr else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    for f in (fin, fout):
        if f is not subprocess.DEVNULL:
            f.close()
    if os.waitstatus_to_exitcode(status):
        sys.exit(f"failed: {argv}\n{err.decode(errors='replace')}")
    return wall, usage.ru_utime + usage.ru_stime, err.decode(errors="replace")


def function_symbols(lib: str) -> list[tuple[int, int, str]]:
    """``(value, size, mangled name)`` of the sized FUNC symbols of ``.symtab`` (readelf)."""
    out = subprocess.run(["readelf", "-sW", lib], capture_output=True, text=True, check=True).stdout
    syms, in_symtab = [], False
    for line in out.splitlines():
        if line.startswith("Symbol table"):
            in_symtab = "'.symtab'" in line
            continue
        parts = line.split()
        if in_symtab and len(parts) >= 8 and parts[3] == "FUNC" and parts[6] != "UND":
            size = int(parts[2], 0) if parts[2].startswith("0x") else int(parts[2])
            if size > 0:
                syms.append((int(parts[1], 16), size, parts[7]))
    return syms


def maps_snapshot(lib: str) -> str:
    """``/proc/PID/maps`` lines for ``lib`` mapped at BASE, one per PT_LOAD segment."""
    out = subprocess.run(["readelf", "-lW", lib], capture_output=True, text=True, check=True).stdout
    lines = []
    for line in out.splitlines():
        parts = line.split()
        if not parts or parts[0] != "LOAD":
            continue
        off, vaddr, memsz = int(parts[1], 16), int(parts[2], 16), int(parts[5], 16)
        flags = "".join(parts[6:-1])
        start = BASE + (vaddr & ~(PAGE - 1))
        end = BASE + ((vaddr + memsz + PAGE - 1) & ~(PAGE - 1))
        perms = ("r" if "R" in flags else "-") + ("w" if "W" in flags else "-")
        perms += ("x" if "E" in flags else "-") + "p"
        inode = os.stat(lib).st_ino
        lines.append(f"{start:x}-{end:x} {perms} {off & ~(PAGE - 1):08x} 00:00 {inode} {lib}")
    return "\n".join(lines) + "\n"


def pick(syms: list[tuple[int, int, str]], count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    distinct = sorted({(v, s) for v, s, _ in syms})
    chosen = rng.choice(len(distinct), size=count, replace=count > len(distinct))
    starts = np.array([distinct[i][0] for i in chosen], dtype=np.uint64)
    sizes = np.array([distinct[i][1] for i in chosen], dtype=np.uint64)
    return starts + (rng.random(count) * sizes).astype(np.uint64)


def addr2line_names(path: str) -> list[str]:
    lines = Path(path).read_text(errors="replace").splitlines()
    return lines[0::2]  # -f: function, then file:line


def classify(ours: list[str], peer: list[str], vaddrs: np.ndarray, syms, demangle) -> dict:
    """Count disagreements by cause, with examples."""
    names_at: dict[int, set[str]] = {}
    starts = np.array(sorted({v for v, _, _ in syms}), dtype=np.uint64)
    for v, _, n in syms:
        names_at.setdefault(v, set()).add(n)
    out: dict[str, list] = {"alias": [], "spelling": [], "other": []}
    for i, (a, b) in enumerate(zip(ours, peer, strict=True)):
        if a == b:
            continue
        j = int(np.searchsorted(starts, vaddrs[i], side="right")) - 1
        aliases = {demangle(n) for n in names_at.get(int(starts[j]), ())} if j >= 0 else set()
        if a in aliases and b in aliases:
            out["alias"].append((hex(int(vaddrs[i])), a, b))
        elif _spelling(a) == _spelling(b):
            out["spelling"].append((hex(int(vaddrs[i])), a, b))
        else:
            out["other"].append((hex(int(vaddrs[i])), a, b))
    return out


def _spelling(name: str) -> str:
    """The name with GCC's long spellings of std:: typedefs shortened and LLVM's clone
    notation (``f() (.cold)``) in GCC's (``f() [clone .cold]``)."""
    name = _LLVM_CLONE.sub(r" [clone \1]", name)
    for long, short in (
        ("std::basic_ostream<char, std::char_traits<char> >", "std::ostream"),
        ("std::basic_istream<char, std::char_traits<char> >", "std::istream"),
        ("std::basic_iostream<char, std::char_traits<char> >", "std::iostream"),
        ("std::basic_string<char, std::char_traits<char>, std::allocator<char> >", "std::string"),
    ):
        name = name.replace(long, short)
    return name


_LLVM_CLONE = re.compile(r" \((\.[A-Za-z0-9_.]+)\)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default=None)
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--peer-count", type=int, default=0, help="addresses for GNU addr2line (0: all)"
    )
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--keep", action="store_true", help="keep the inputs and outputs")
    args = ap.parse_args()
    lib = args.lib or default_lib()
    tmp = Path(tempfile.mkdtemp(prefix="bench-symbolize-"))
    syms = function_symbols(lib)
    vaddrs = pick(syms, args.count, args.seed)
    (tmp / "vaddrs.txt").write_text("".join(f"0x{v:x}\n" for v in vaddrs.tolist()))
    (tmp / "runtime.txt").write_text("".join(f"{BASE + v:x}\n" for v in vaddrs.tolist()))
    (tmp / "maps.txt").write_text(maps_snapshot(lib))
    with open("/proc/sys/kernel/pid_max") as f:
        no_such_pid = int(f.read()) + 1  # a pid no process has: only the snapshot is used
    print(
        f"library: {lib} ({os.path.getsize(lib) / 2**20:.0f} MiB, {len(syms)} sized FUNC symbols)"
    )
    print(f"addresses: {args.count} (seed {args.seed})\n")

    ours_argv = [sys.executable, "-c", CHILD, str(tmp / "runtime.txt"), str(tmp / "maps.txt")]
    ours_argv += [str(no_such_pid), str(tmp / "ours.txt")]
    runs, inner = [], []
    for _ in range(args.repeat):
        wall, cpu, err = run(ours_argv)
        runs.append((wall, cpu))
        inner.append(json.loads(err.strip().splitlines()[-1]))
    ours = Path(tmp / "ours.txt").read_text().splitlines()
    o_wall = statistics.median(r[0] for r in runs)
    o_cpu = statistics.median(r[1] for r in runs)
    o_inner = statistics.median(t["symbolize"] for t in inner)
    o_again = statistics.median(t["again"] for t in inner)

    peer_n = args.peer_count or args.count
    (tmp / "peer_vaddrs.txt").write_text("".join(f"0x{v:x}\n" for v in vaddrs[:peer_n].tolist()))
    rows = [("aiflame (fresh process)", o_wall, o_cpu, args.count, args.repeat)]
    results = {}
    peers = [("addr2line -f -C", ["addr2line", "-f", "-C", "-e", lib], peer_n, 1)]
    if shutil.which("llvm-addr2line"):
        cmd = ["llvm-addr2line", "-f", "-C", "-e", lib]
        peers.append(("llvm-addr2line -f -C", cmd, args.count, args.repeat))
    for label, argv, n, repeat in peers:
        src = tmp / ("peer_vaddrs.txt" if n < args.count else "vaddrs.txt")
        out = tmp / f"{argv[0]}.txt"
        pr = [run(argv, stdin=str(src), stdout=str(out)) for _ in range(repeat)]
        scale = args.count / n
        wall = statistics.median(r[0] for r in pr) * scale
        cpu = statistics.median(r[1] for r in pr) * scale
        rows.append(
            (
                label + (f" ({n} addresses, time x{scale:.0f})" if n < args.count else ""),
                wall,
                cpu,
                n,
                repeat,
            )
        )
        results[label] = addr2line_names(str(out))

    print(f"{'tool':58} {'wall s':>9} {'CPU s':>9} {'runs':>5} {'vs aiflame (CPU)':>17}")
    for label, wall, cpu, _, repeat in rows:
        print(f"{label:58} {wall:9.2f} {cpu:9.2f} {repeat:5} {cpu / o_cpu:16.1f}x")
    print(
        f"aiflame after imports (median): {o_inner:.2f} s symbolizing {args.count} addresses"
        f" from an empty resolver, {o_again:.2f} s again with the same resolver\n"
    )

    from aiflame.symbolize.cxa import Demangler

    demangle = Demangler()
    for label, names in results.items():
        n = len(names)
        same = sum(a == b for a, b in zip(ours[:n], names, strict=True))
        print(f"names equal to {label}: {same}/{n} ({100 * same / n:.3f}%)")
        diff = classify(ours[:n], names, vaddrs[:n], syms, demangle)
        for cause, items in diff.items():
            if items:
                print(f"  {cause}: {len(items)}")
                for addr, a, b in items[:SHOW]:
                    pad = " " * len(addr)
                    print(f"    {addr}: aiflame {a[:110]!r}\n    {pad}  peer    {b[:110]!r}")
    if args.keep:
        print(f"\ninputs and outputs kept in {tmp}")
    else:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
