"""Random ``perf script``-like inputs with the shapes that trip parsers, and their expected
collapsed output from FlameGraph's stackcollapse-perf.pl (run by hand, see ``main``).

The inputs mix real-looking event and stack lines with odd ones: right-aligned or blank-led
names, pid/tid forms, missing or zero periods, several event types, offsets, argument
lists with " (", Go methods, (anonymous namespace), inlined a->b frames, [unknown] symbols,
quotes and semicolons, Java names, CR line ends, Latin-1 and UTF-8 bytes, comments inside
stacks, missing or repeated blank lines, and files that end inside a sample.

Regenerate the corpus in tests/data/perf/fuzz (needs perl and a FlameGraph checkout):

    python tests/golden/perf_fuzz.py /path/to/FlameGraph
"""

from __future__ import annotations

import gzip
import random
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).parent.parent / "data" / "perf" / "fuzz"
SEEDS = range(12)
SAMPLES = 60
# stackcollapse-perf.pl flag -> PerfOptions keyword arguments
OPTIONS: dict[str, dict[str, object]] = {
    "": {},
    "pid": {"pid": True},
    "tid": {"tid": True},
    "kernel": {"kernel": True},
    "jit": {"jit": True},
    "all": {"annotate_all": True},
    "addrs": {"addrs": True},
    "event-filter=instructions": {"event_filter": "instructions"},
}

_COMMS = (
    "java",
    "python3",
    "V8 WorkerThread",
    "kworker/0:1",
    "ab",
    "x y z",
    "swapper",
    "java-thread",
    "0x",
    "perf",
    "a:b",
    "co mm",
    "\xe9t\xe9",
    "\xc3\xa9x",
    "12",
    "7f",
)
_PIDS = (
    "123",
    "123/456",
    "123//456",
    "0",
    "12/0",
    "3309145/3309367",
    "5/",
    "007/0",
    "99999999999999999999",
)
_FUNCS = (
    "main",
    "foo+0x1f",
    "foo+0x1F",
    "bar+0x+0x12",
    "baz+0x1+0x2",
    "std::function<void (int)>::operator()(int) const+0x12",
    "util::Slab::release(unsigned long)+0x315",
    "(anonymous namespace)::run()",
    "ns::(anonymous namespace)::f(int)",
    "net/http.(*Client).Do",
    "net/http.(*Client).Do+0x5",
    "[unknown]",
    "[unknown]",
    "a->b",
    "a->b->c",
    "->a",
    "a->",
    "->",
    'say "hi"',
    "it's",
    "semi;colon",
    "Lorg/mozilla/javascript/ContextFactory;.call(Lorg/mozilla/C;)Ljava/lang/Object;",
    "Ljava/io/PrintStream;::print",
    "LazyCompile:~foo /tmp/x.js:1",
    "_[i]thing",
    "jitted_[j]",
    "(process)",
    "(x",
    "",
    "+0x1f",
    " lead",
    "trail ",
    "x (y) z",
    "f+0x1 (g)",
    "RegExp:[&<>\\\"\\']",
    "\xe9l\xe8ve",
    "fn\x01",
    "a\x02b",
    "operator new(unsigned long)",
    "__x64_sys_futex+0x249",
    "ops[]",
    "tab\there",
    "f(",
    "g)",
    "h (",
)
_MODS = (
    "[kernel.kallsyms]",
    "/lib/x86_64-linux-gnu/libc.so.6",
    "/tmp/perf-1234.map",
    "/tmp/perf-x.map",
    "[unknown]",
    "/usr/lib/debug/boot/vmlinux",
    "/boot/vmlinux-5.4.14",
    "[vdso]",
    "",
    "lib(with)parens",
    "a) (b",
    "/opt/unknown/lib.so",
    "[nf_conntrack_ipv4]",
    "/tmp/jitted-123-4.so",
    "m\xe9",
)


def _header(r: random.Random) -> str:
    parts = [r.choice(_COMMS), " " * r.randint(1, 3), r.choice(_PIDS)]
    if r.random() < 0.7:
        parts.append(f" [{r.randint(0, 40):03d}]")
    parts.append(f" {r.randint(0, 999999)}.{r.randint(0, 999999):06d}:")
    parts.append(r.choice(("", " 1", " 250000", " 0", " 00", "     337724", " 12a")))
    parts.append(
        " "
        + r.choice(
            ("cycles", "cycles", "cycles:P", "instructions", "cpu-clock", "cycles:u:", "faults")
        )
        + ":"
    )
    parts.append(r.choice(("", " ", "  ", "\t", " extra", "\r")))
    if r.random() < 0.05:
        parts.append(" 7f12 inline_frame (/lib/x.so)")
    return "".join(parts)


def _stack_line(r: random.Random) -> str:
    lead = r.choice(("\t    ", "\t", "\t\t", "        ", "", " ", "\t\r", "\t "))
    pc = r.choice(
        (
            "7f1e214c24d9",
            "ffffffff8103ce3b",
            "0",
            "ABCDEF",
            "abc_def",
            "",
            "7f12 34",
            "g00d",
            f"{r.getrandbits(48):x}",
        )
    )
    sep = r.choice((" ", " ", " ", "  ", "\t", ""))
    func = r.choice(_FUNCS)
    if r.random() < 0.3 and "+0x" not in func and func:
        func += f"+0x{r.getrandbits(12):x}"
    tail = r.choice((")", ")", ")", ") ", ")\r", "", "))"))
    return f"{lead}{pc}{sep}{func} ({r.choice(_MODS)}{tail}"


def _sample(r: random.Random) -> list[str]:
    out = [_header(r)] if r.random() < 0.95 else []
    for _ in range(r.randint(0, 8)):
        x = r.random()
        if x < 0.02:
            out.append("# comment +0x1 (x)")
        elif x < 0.03:
            out.append(_header(r))
        elif x < 0.04:
            out.append("garbage line")
        elif x < 0.045:
            out.append("\x01weird 12 (x)")
        else:
            out.append(_stack_line(r))
    return out


def generate(seed: int, samples: int = SAMPLES) -> bytes:
    """The input for ``seed`` (Latin-1 bytes; some are UTF-8 sequences)."""
    r = random.Random(seed)
    lines: list[str] = []
    if r.random() < 0.5:
        lines += ["# ========", "# cmdline : /usr/bin/perf record -g ./prog", "#"]
    for _ in range(samples):
        lines += _sample(r)
        lines += [""] * r.choice((1, 1, 1, 1, 0, 2))
    text = "\n".join(lines)
    if r.random() < 0.7:
        text += "\n"
    return text.encode("latin-1")


def expected_name(seed: int, flag: str) -> str:
    suffix = f"-{flag.replace('=', '-')}" if flag else ""
    return f"fuzz-{seed:02d}-collapsed{suffix}.txt.gz"


def main(flamegraph: str) -> None:
    script = Path(flamegraph) / "stackcollapse-perf.pl"
    OUT.mkdir(parents=True, exist_ok=True)
    for seed in SEEDS:
        data = generate(seed)
        src = OUT / f"fuzz-{seed:02d}.txt.gz"
        src.write_bytes(gzip.compress(data, 9, mtime=0))
        for flag in OPTIONS:
            args = ["perl", str(script), *([f"--{flag}"] if flag else [])]
            out = subprocess.run(args, input=data, capture_output=True, check=True).stdout
            (OUT / expected_name(seed, flag)).write_bytes(gzip.compress(out, 9, mtime=0))


if __name__ == "__main__":
    main(sys.argv[1])
