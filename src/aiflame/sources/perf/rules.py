"""The per-line rules of FlameGraph's ``stackcollapse-perf.pl`` (commit 41fee1f): how an
event line and a stack line are split, and how a function name becomes frames.

Each function here gives exactly the Perl script's answer, quirks included, on text decoded
as Latin-1 (one character per byte, as Perl sees its input). Regexes use ``re.ASCII`` so
that ``\\s``, ``\\w`` and ``\\d`` mean what they mean in Perl on bytes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# Perl's \s without Unicode rules (it reads bytes): space, \t, \n, \v, \f, \r.
WS = " \t\n\r\f\v"
_HEX = "0123456789abcdef"

# The event line: "comm [pid/]tid ..." (the Perl pattern ^(\S.+?)\s+(\d+)\/*(\d+)*\s+),
# rewritten to match the same lines with the same groups in linear time. Perl's lazy comm
# ends where a blank run followed by the pid starts (or at the second character, when the
# run starts at the first): only there is the rest tried, and the rest never backtracks
# (possessive quantifiers: a split of a blank or digit run cannot make it match). Perl's
# ambiguous (\d+)* is (\d+)?, which matches the same and captures the same.
EVENT = re.compile(r"(\S\s(?=\s)|\S.+?(?<!\s))\s++(\d++)/*+(\d++)?+\s++", re.ASCII)
# "...: PERIOD EVENT:" at the end of an event line; same rewrite of (\d+)*. Searched by
# _PeriodSearch, which tries it only from the one colon where it can match.
_PERIOD = re.compile(r":\s*(\d+)?\s+(\S+):\s*$", re.ASCII)
# The usual event line, "comm pid[/tid] [cpu] secs.usecs: [period] event: ", in one match.
# When it matches, EVENT and PERIOD give the same groups: EVENT's lazy comm stops at the
# first blank (comm has 2+ characters and no blank), and PERIOD can only match from the
# colon after the timestamp (from an earlier one, more than one token would follow).
HEADER = re.compile(
    r"(\S\S+) +(\d+)(?:/(\d+))? +(?:\[\d+\] +)?(\d+\.\d+): +(?:(\d+) +)?(\S+): *$", re.ASCII
)
# The "secs.usecs:" time of an event line that HEADER does not match (odd comm, extra fields).
TIME = re.compile(r"\s(\d+\.\d+):\s", re.ASCII)
_WORD = re.compile(r"\w*", re.ASCII)
_BLANKS = re.compile(r"\s*", re.ASCII)
_PERF_MAP = re.compile(r"/tmp/perf-\d+\.map", re.ASCII)
# perf inject --jit writes each jitted function into a jitted-PID-N.so of its own.
_JITTED_SO = re.compile(r"(?:^|/)jitted-\d+-\d+\.so$", re.ASCII)
# Bracketed modules perf names that are user space, not the kernel (perf report marks
# their symbols [.]); every other "[name]" is the kernel or a kernel module.
_USER_BRACKETS: tuple[str, ...] = (
    "[vdso]",
    "[vsyscall]",
    "[vectors]",
    "[sigpage]",
    "[uprobes]",
    "[heap]",
)
_USER_BRACKETS += ("[stack]", "[anon")

# With PerfOptions.kinds, a frame whose module tells its kind carries one of these marks at
# the end of its name: a newline can never be part of a name (input is split at newlines).
KERNEL_MARK = "\nk"
JIT_MARK = "\nj"


class _PeriodSearch:
    """``PERIOD.search(line)`` of the Perl pattern ``:\\s*(\\d+)*\\s+(\\S+):\\s*$``, in
    linear time. The event must be the last token of the line (it ends with the last
    colon, blanks after it only), and between the colon that starts the match and that
    token there are only blanks and digits: so the match can only start at the last colon
    before the token, and the pattern is tried there alone."""

    def search(self, line: str) -> re.Match[str] | None:
        text = line.rstrip(WS)
        if not text.endswith(":"):
            return None
        token = max(map(text.rfind, WS)) + 1  # start of the last token
        colon = text.rfind(":", 0, token)
        return _PERIOD.match(line, colon) if colon >= 0 else None


PERIOD = _PeriodSearch()


@dataclass(frozen=True)
class PerfOptions:
    """The options of ``stackcollapse-perf.pl`` (same names, ``all`` -> ``annotate_all``)."""

    pid: bool = False  # root frame "comm-PID"
    tid: bool = False  # root frame "comm-PID/TID" (wins over pid)
    kernel: bool = False  # "_[k]" on kernel frames
    jit: bool = False  # "_[j]" on frames from /tmp/perf-PID.map
    annotate_all: bool = False  # kernel and jit
    addrs: bool = False  # "[module <ADDR>]" instead of "[module]" for unknown symbols
    event_filter: str = ""  # keep this event; "" = the first one seen
    # Not a Perl option: mark kernel and JIT frames (KERNEL_MARK, JIT_MARK) for the Profile,
    # which carries them as kinds. The folded text of stackcollapse-perf.pl has no marks.
    kinds: bool = False
    # Not a Perl option either: keep each sample's time and thread, in input order, for a
    # timeline (``Collapser.timed``). Costs a tuple per sample, so only when asked.
    times: bool = False

    @property
    def annotate_kernel(self) -> bool:
        return self.kernel or self.annotate_all

    @property
    def annotate_jit(self) -> bool:
        return self.jit or self.annotate_all


def perl_split_arrow(s: str) -> list[str]:
    """``split /->/, s`` in Perl: trailing empty fields are dropped ("" gives no field)."""
    parts = s.split("->")
    while parts and not parts[-1]:
        parts.pop()
    return parts


def parse_stack_line(line: str) -> tuple[str, str, str] | None:
    """(address, raw function, module) of a stack line, as the Perl regex splits it."""
    s = line.lstrip(WS)
    pc, sep, rest = s.partition(" ")
    if sep and pc.isascii() and pc.isalnum():
        # \w+ took the whole address, \s* the blanks after it; (.+) \((.*)\) is then the
        # last " (" that has a ")" after it, up to the last ")".
        rest = rest.lstrip(WS)
        close = rest.rfind(")")
        if close < 0:
            return None  # the pattern needs a ")" and neither \s nor \w can be one
        p = rest.rfind(" (", 0, close)
        if p >= 1:
            return pc, rest[:p], rest[p + 2 : close]
    return _stack_match(line)  # unusual shapes


def _stack_match(line: str) -> tuple[str, str, str] | None:
    """The groups of Perl's ``/\\s*(\\w+)\\s*(.+) \\((.*)\\)/`` on ``line``, found in
    linear time rather than by backtracking (quadratic on long lines). The module is up to
    the last ")"; the function, the longest run before the last " (" that has a ")" after
    it, given the address (all of the word, then shorter) and the blanks after it (all of
    them, then fewer) that Perl tries first."""
    start = _BLANKS.match(line).end()  # type: ignore[union-attr]
    word_end = _WORD.match(line, start).end()  # type: ignore[union-attr]
    close = line.rfind(")")
    if word_end == start or close < 0:
        return None
    func = _BLANKS.match(line, word_end).end()  # type: ignore[union-attr]
    paren = line.rfind(" (", func + 1, close)
    if paren >= 0:  # the whole word, then all the blanks: the usual case
        return line[start:word_end], line[func:paren], line[paren + 2 : close]
    # Otherwise only a " (" whose blank ends those blanks can be reached: by leaving two
    # blanks to ".+ (" when there are two or more, else (one blank) by leaving the word's
    # last character to the function.
    paren = func - 1
    if line[paren : paren + 2] == " (" and paren + 2 <= close:
        if func - 2 >= word_end:
            return line[start:word_end], line[func - 2 : paren], line[paren + 2 : close]
        if word_end - start >= 2:
            return line[start : word_end - 1], line[word_end - 1 : paren], line[paren + 2 : close]
    return None


def strip_offset(rawfunc: str) -> str:
    """Drop a trailing ``+0x1a`` (Linux 4.8+ prints symbol offsets)."""
    head, sep, tail = rawfunc.rpartition("+0x")
    if sep and tail and not tail.strip(_HEX):
        return head
    return rawfunc


def tidy(func: str) -> str:
    """``;`` -> ``:``, no argument list (unless a Go method), no quotes."""
    if ";" in func:
        func = func.replace(";", ":")
    if "(" in func and not _go_method(func):
        # Cut at the first "(" that does not open "(anonymous namespace)".
        i = func.find("(")
        while i >= 0 and func.startswith("anonymous namespace)", i + 1):
            i = func.find("(", i + 1)
        if i >= 0:
            func = func[:i]
    if '"' in func or "'" in func:
        func = func.replace('"', "").replace("'", "")
    return func


def module_mark(mod: str) -> str:
    """KERNEL_MARK or JIT_MARK for a frame of module ``mod``, "" for other user space.

    Kernel: ``[kernel.kallsyms]`` and other bracketed names but user-space ones like
    ``[vdso]``, ``vmlinux`` (also versioned, ``vmlinux-6.1.0``), ``.ko`` modules and BPF
    programs (``bpf_prog_<tag>_<name>``). JIT:
    perf maps (``/tmp/perf-PID.map``), ``perf inject --jit``'s ``jitted-PID-N.so`` and perf's
    ``[JIT] tid N``. FlameGraph's ``--kernel``/``--jit`` annotate a narrower set (no ``.ko``
    nor versioned vmlinux; no jitted-*.so; ``[JIT] tid`` as kernel), which is kept as is.
    """
    if mod.startswith("[JIT]") or _PERF_MAP.search(mod) or _JITTED_SO.search(mod):
        return JIT_MARK
    if mod.startswith("["):
        return "" if "unknown" in mod or mod.startswith(_USER_BRACKETS) else KERNEL_MARK
    base = mod.rpartition("/")[2]
    if base.startswith(("vmlinux", "bpf_prog_")) or base.endswith(".ko") or ".ko." in base:
        return KERNEL_MARK
    return ""


def _go_method(func: str) -> bool:
    """Whether ``func`` matches ``/\\.\\(.*\\)\\./`` (a Go method such as
    ``main.(*T).f``): a ")." after the first ".(" (searched, not backtracked)."""
    start = func.find(".(")
    return start >= 0 and func.find(").", start + 2) >= 0


def frame_names(pc: str, func_raw: str, mod: str, java: bool, opts: PerfOptions) -> list[str]:
    """The frames one stack line stands for (several when perf shows inlined a->b).

    ``func_raw`` has its ``+0x..`` offset already stripped (:func:`strip_offset`).
    """
    if not func_raw or func_raw[0] == "(":  # nothing, or a process name
        return []
    out: list[str] = []
    for part in perl_split_arrow(func_raw) if "->" in func_raw else (func_raw,):
        func = part
        if func == "[unknown]":
            name = mod.rpartition("/")[2] if mod != "[unknown]" else "unknown"
            func = f"[{name} <{pc}>]" if opts.addrs else f"[{name}]"
        func = tidy(func)
        if java and "/" in func and func.startswith("L"):
            func = func[1:]
        if out:
            if "_[i]" not in func:
                func += "_[i]"
        elif (
            opts.annotate_kernel
            and (mod.startswith("[") or mod.endswith("vmlinux"))
            and "unknown" not in mod
        ):
            func += "_[k]"
        elif opts.annotate_jit and _PERF_MAP.search(mod) and "_[j]" not in func:
            func += "_[j]"
        out.append(func)
    if opts.kinds and out:
        mark = module_mark(mod)
        if mark:
            out = [f + mark for f in out]  # inlined frames are in the module too
    return out


def namer(opts: PerfOptions) -> Callable[[str, str, str, bool], str]:
    """A fast ``fragment(frame_names(...))`` for ``opts``: the usual single, known function
    is handled inline, the rest by :func:`frame_names`."""
    kernel, jit, kinds = opts.annotate_kernel, opts.annotate_jit, opts.kinds
    marks: dict[str, str] = {}  # module -> its mark (opts.kinds): a profile has few modules

    def name(pc: str, func: str, mod: str, java: bool) -> str:
        if not func or func[0] == "(" or "->" in func or func == "[unknown]":
            return fragment(frame_names(pc, func, mod, java, opts))
        if ";" in func or "(" in func or '"' in func or "'" in func:
            func = tidy(func)
        if java and "/" in func and func[0] == "L":
            func = func[1:]
        if kernel and (mod[:1] == "[" or mod.endswith("vmlinux")) and "unknown" not in mod:
            func += "_[k]"
        elif jit and "_[j]" not in func and _PERF_MAP.search(mod):
            func += "_[j]"
        if kinds:
            mark = marks.get(mod)
            if mark is None:
                mark = marks[mod] = module_mark(mod)
            func += mark
        return ";" + func

    return name


def event_fields(m: re.Match[str]) -> tuple[str, str, str]:
    """(comm, pid, tid) of an :data:`EVENT` match; pid is "?" when perf printed only a tid."""
    comm, pid, tid = m.group(1), m.group(2), m.group(3)
    if not tid or tid == "0":  # Perl: "if (not $tid)"
        return comm, "?", pid
    return comm, pid, tid


def root_frame(comm: str, pid: str, tid: str, opts: PerfOptions) -> str:
    """The first frame of a stack: the process name, with the pid (and tid) when asked."""
    if opts.tid:
        name = f"{comm}-{pid}/{tid}"
    elif opts.pid:
        name = f"{comm}-{pid}"
    else:
        name = comm
    return name.replace(" ", "_")


def fragment(names: list[str]) -> str:
    """Frames as they are kept per stack line: ";f1;f2" ("" when the line adds none)."""
    return ";" + ";".join(names) if names else ""
