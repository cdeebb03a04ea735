"""Native programs built with gcc at test time, for the symbolizer tests.

The program prints the run-time address of each of its functions (and of a function of the
shared library it links), then waits for stdin to close, so a test can read its maps and
symbolize those addresses while it runs. Expected names and addresses come from ``nm``,
``readelf`` and the program itself, never from the code under test.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

LIB_C = r"""
__attribute__((noinline)) int lib_visible(int x) { return x * 3 + 1; }
__attribute__((noinline)) static int lib_hidden_static(int x) { return x ^ 0x55; }
int lib_entry(int x) { return lib_hidden_static(lib_visible(x)); }
/* A non-PIE program's &lib_visible is its own PLT stub; a local function has no stub. */
unsigned long lib_static_address(void) { return (unsigned long)&lib_hidden_static; }
"""

PROG_C = r"""
#include <stdio.h>
#include <unistd.h>

int lib_entry(int x);
int lib_visible(int x);
unsigned long lib_static_address(void);

__attribute__((noinline)) int hot_alpha(int x) { return x * 7 + 3; }
__attribute__((noinline)) static int hot_static(int x) { return hot_alpha(x) ^ 0x2a; }
/* A C++-mangled name, as g++ would give aiflm::demo::compute(int). */
__attribute__((noinline)) int cpp_named(int x) __asm__("_ZN5aiflm4demo7computeEi");
__attribute__((noinline)) int cpp_named(int x) { return x + 11; }

/* Hand-written code: a function without .size, an untyped label, and a function nested in
   a longer one. */
__asm__(
    ".text\n"
    ".globl asm_nosize\n.type asm_nosize,@function\nasm_nosize:\n"
    "  nop\n  nop\n  nop\n  nop\n  ret\n"
    ".globl notype_label\nnotype_label:\n"
    "  nop\n  nop\n  nop\n  nop\n  ret\n"
    ".globl outer_fn\n.type outer_fn,@function\nouter_fn:\n"
    "  .fill 16,1,0x90\n"
    ".globl inner_fn\n.type inner_fn,@function\ninner_fn:\n"
    "  .fill 8,1,0x90\n"
    ".size inner_fn,8\n"
    "  .fill 40,1,0x90\n  ret\n"
    ".size outer_fn,.-outer_fn\n");
void asm_nosize(void);
void notype_label(void);
void outer_fn(void);
void inner_fn(void);

int main(void) {
    printf("hot_alpha %lx\n", (unsigned long)&hot_alpha);
    printf("hot_static %lx\n", (unsigned long)&hot_static);
    printf("cpp_named %lx\n", (unsigned long)&cpp_named);
    printf("asm_nosize %lx\n", (unsigned long)&asm_nosize);
    printf("notype_label %lx\n", (unsigned long)&notype_label);
    printf("outer_fn %lx\n", (unsigned long)&outer_fn);
    printf("inner_fn %lx\n", (unsigned long)&inner_fn);
    printf("main %lx\n", (unsigned long)&main);
    printf("lib_hidden_static %lx\n", lib_static_address());
    printf("ready %d\n", hot_static(1) + cpp_named(2) + lib_entry(3));
    fflush(stdout);
    char buf[16];
    while (read(0, buf, sizeof buf) > 0) {}
    return 0;
}
"""


def sh(*argv: str | Path) -> str:
    return subprocess.run([str(a) for a in argv], check=True, capture_output=True, text=True).stdout


@dataclass
class Built:
    dir: Path
    lib: Path  # libdemo.so
    pie: Path
    nopie: Path


def build(out: Path) -> Built:
    """libdemo.so, and the program as a PIE and a non-PIE executable linking it."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "lib.c").write_text(LIB_C)
    (out / "prog.c").write_text(PROG_C)
    lib = out / "libdemo.so"
    sh("gcc", "-O1", "-g", "-fPIC", "-shared", "-Wl,--build-id", "-o", lib, out / "lib.c")
    common = ["-O1", "-g", "-Wl,--build-id", f"-L{out}", "-ldemo", "-Wl,-rpath,$ORIGIN"]
    pie, nopie = out / "prog-pie", out / "prog-nopie"
    sh("gcc", "-fPIE", "-pie", "-o", pie, out / "prog.c", *common)
    sh("gcc", "-fno-pie", "-no-pie", "-o", nopie, out / "prog.c", *common)
    return Built(out, lib, pie, nopie)


def nm_functions(path: Path, dynamic: bool = False) -> dict[str, tuple[int, int]]:
    """``{name: (value, size)}`` of the text symbols ``nm`` lists (size 0 when it has none;
    symbol versions dropped)."""
    argv = ["nm", "-S", "--defined-only", *(["-D"] if dynamic else []), str(path)]
    found = {}
    for line in sh(*argv).splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tTwW":
            found[parts[3].split("@")[0]] = (int(parts[0], 16), int(parts[1], 16))
        elif len(parts) == 3 and parts[1] in "tTwW":
            found[parts[2].split("@")[0]] = (int(parts[0], 16), 0)
    return found


def build_id(path: Path) -> str:
    for line in sh("readelf", "-n", path).splitlines():
        if "Build ID:" in line:
            return line.split("Build ID:")[1].strip()
    raise AssertionError(f"{path} has no build-id")


def maps_for(path: Path, base: int, shown_as: str | None = None) -> str:
    """``/proc/PID/maps`` lines for ``path`` mapped at ``base`` the way the kernel maps an
    ELF file's PT_LOAD segments (from ``readelf -lW``)."""
    page = 0x1000
    lines = []
    inode = os.stat(path).st_ino
    for line in sh("readelf", "-lW", path).splitlines():
        parts = line.split()
        if not parts or parts[0] != "LOAD":
            continue
        off, vaddr, memsz = int(parts[1], 16), int(parts[2], 16), int(parts[5], 16)
        flags = "".join(parts[6:-1])
        start = base + (vaddr & ~(page - 1))
        end = base + ((vaddr + memsz + page - 1) & ~(page - 1))
        perms = ("r" if "R" in flags else "-") + ("w" if "W" in flags else "-")
        perms += ("x" if "E" in flags else "-") + "p"
        off = off & ~(page - 1)
        lines.append(f"{start:x}-{end:x} {perms} {off:08x} 08:01 {inode} {shown_as or path}")
    return "\n".join(lines) + "\n"


class Running:
    """A started program: its pid and the addresses it printed; closes it on exit."""

    def __init__(self, argv: list[str], **popen) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, **popen
        )
        self.addrs: dict[str, int] = {}
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            name, value = line.split()
            if name == "ready":
                break
            self.addrs[name] = int(value, 16)
        else:
            raise AssertionError(f"{argv} exited before it was ready")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def maps(self) -> str:
        with open(f"/proc/{self.pid}/maps") as f:
            return f.read()

    def __enter__(self) -> Running:
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
