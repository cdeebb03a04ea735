#!/usr/bin/env python3
"""Run every aiflame command on mutants of real inputs of every format, and count how each
run ended.

    python tools/fuzz_commands.py --minutes 25 [--out fuzz-out] [--seed 1]

Mutants come from tools/fuzz_mutants.py (bit flips, truncation, numbers at the edges of
int64 and beyond, long lines and names, slices and stacks nested thousands deep, hostile
names, invalid UTF-8, corrupt gzip and gzip bombs, damaged SQLite in WAL mode or with
blobs for names, pickle opcode mutations and bombs, damaged HPCToolkit directories...).
Each mutant is given to a few of: ``flamegraph``, ``convert`` to folded / pprof /
speedscope / html / chrome (with a metric it may lack), ``info``,
``diff`` (against its seed), ``memory``, ``analyze`` (terminal, ``--json``, ``-o``),
sometimes onto an odd output path (a directory, /dev/null, /dev/full, a FIFO, symlinks, a
255+ byte name, an existing 0600 file) or with SIGINT / SIGTERM sent while it runs. Runs
are one at a time (the machine stays usable), each limited to 2 GiB of address space and
60 s.

Outcomes: ``ok``; ``error`` (exit 1 and one line ``aiflame: error: ...``); and the
failures: ``traceback``, ``internal`` (one line, but a bug), ``python-text`` (one line,
but a Python exception's text rather than a message for a person), ``hang`` (killed at
the timeout), ``memory`` (MemoryError or out of memory), ``crash`` (a signal), ``messy``
(a failure that is not one line), ``partial`` (a failed run left an output or a temporary
file), ``invalid`` (exit 0 but the output does not parse), ``clobbered`` (a device, FIFO or
symlink replaced, a file's mode changed), ``raw-control`` (an escape or bidi character
reached the terminal), ``beside`` (a file appeared beside the input, or the input
changed: SQLite's -wal/-shm files). Failing inputs are kept under OUT/failures/OUTCOME/,
the commands and messages in OUT/failures.jsonl; analyze's failures are also listed, with
tracebacks, in OUT/analyze-failures.txt. The table of counts per format and outcome is printed and
written to OUT/summary.json.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gzip
import hashlib
import json
import os
import random
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzz_mutants

ROOT = Path(__file__).resolve().parents[1]
FAILURES = ("traceback", "internal", "python-text", "hang", "memory", "crash", "messy",
            "partial", "invalid", "clobbered", "raw-control", "beside")  # fmt: skip
OUTCOMES = ("ok", "error", *FAILURES)
_RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\u202d", "\u2066", "\u2067", "\u2068")
TRACE_FORMATS = ("kineto", "trace-events", "nsys")
# Profiles that analyze reads too (its GPU stall report of PC samples).
ANALYZED_PROFILES = ("rocprofv3-pc", "iaprof", "nsight-compute", "hpctoolkit")
# A Python exception's own words in an error line: a message for a person names the field
# and what was wrong with it instead.
PYTHON_TEXT = re.compile(
    r"\b[A-Z][A-Za-z]*(?:Error|Exception)\b|int too (?:big|large) to convert|"
    r"invalid literal for|could not convert|not subscriptable|has no attribute|"
    r"unsupported operand|not JSON serializable|string pattern on a bytes|"
    r"index out of range|codec can't|object of type|NoneType|unhashable type|"
    r"is not iterable|must be (?:real number|str\b|an integer)|cannot convert float|"
    r"math domain error|division by zero|maximum recursion depth|negative dimensions|"
    r"expected (?:str|bytes)|argument must be|not enough values to unpack|"
    r"too many values to unpack|out of bounds for axis|in a way the reader does not name"
)


# -- commands -----------------------------------------------------------------------------


def commands_for(
    fmt: str, mutant: Path, seed: Path, out: Path
) -> list[tuple[str, list[str], Path | None]]:
    """(name, argv after 'aiflame', output file or None) of the commands to try."""
    m, s = str(mutant), str(seed)
    cmds: list[tuple[str, list[str], Path | None]] = [
        (
            "flamegraph",
            ["flamegraph", m, "-o", str(out.with_suffix(".html"))],
            out.with_suffix(".html"),
        ),
        ("info", ["info", m], None),
    ]
    for to, ext in (
        ("folded", ".folded"),
        ("pprof", ".pb.gz"),
        ("speedscope", ".json"),
        ("html", ".html"),
        ("chrome", ".json"),
    ):
        cmds.append(
            (
                f"convert-{to}",
                ["convert", m, "-f", to, "-o", str(out.with_suffix(ext))],
                out.with_suffix(ext),
            )
        )
    metric = "gpu-time" if fmt in TRACE_FORMATS else "peak-bytes"
    cmds.append(
        (
            "convert-chrome-metric",
            ["convert", m, "-f", "chrome", "--metric", metric, "-o", str(out.with_suffix(".json"))],
            out.with_suffix(".json"),
        )
    )
    cmds.append(
        ("diff-html", ["diff", s, m, "-o", str(out.with_suffix(".html"))], out.with_suffix(".html"))
    )
    cmds.append(
        (
            "diff-folded",
            ["diff", m, s, "-o", str(out.with_suffix(".folded"))],
            out.with_suffix(".folded"),
        )
    )
    if fmt == "torch-memory":
        cmds += [
            ("memory", ["memory", m, "-o", str(out.with_suffix(".html"))], out.with_suffix(".html"))
        ] * 4
    if fmt in TRACE_FORMATS or fmt in ANALYZED_PROFILES:
        cmds += [
            ("analyze", ["analyze", m], None),
            (
                "analyze-json",
                ["analyze", m, "--json", str(out.with_suffix(".json"))],
                out.with_suffix(".json"),
            ),
            (
                "analyze-html",
                ["analyze", m, "-o", str(out.with_suffix(".html"))],
                out.with_suffix(".html"),
            ),
        ] * 2
    return cmds


# -- odd outputs --------------------------------------------------------------------------


class OddOutput:
    """An output path that is not a plain new file, and how to check what became of it."""

    def __init__(self, kind: str, path: Path, work: Path) -> None:
        self.kind, self.path, self.work = kind, path, work
        self.reader: threading.Thread | None = None
        self.before: tuple[int, int] | None = None
        if kind == "dir":
            path.mkdir()
        elif kind == "fifo":
            os.mkfifo(path)
            self.reader = threading.Thread(target=self._drain, daemon=True)
            self.reader.start()
        elif kind == "link-dev-null":
            path.symlink_to(_device(work, "null"))
        elif kind == "link-file":
            target = work / "link-target"
            target.write_text("old\n")
            path.symlink_to(target)
        elif kind == "mode-0600":
            path.write_text("old\n")
            path.chmod(0o600)
        elif kind == "long-name":
            self.path = work / ("n" * 300 + path.suffix)
        elif kind == "no-dir":
            self.path = work / "missing" / path.name
        elif kind in ("dev-null", "dev-full"):
            self.path = _device(work, kind[4:])
        st = os.lstat(self.path) if os.path.lexists(self.path) else None
        self.before = (st.st_mode, st.st_ino) if st else None

    def _drain(self) -> None:
        with contextlib.suppress(OSError), open(self.path, "rb") as f:
            while f.read(1 << 20):
                pass

    def check(self) -> str | None:
        """What went wrong with the path, if anything."""
        if self.kind == "fifo":
            with contextlib.suppress(OSError), open(self.path, "wb", opener=_nonblock):
                pass  # lets the reader end if nothing opened it
            if not stat.S_ISFIFO(os.lstat(self.path).st_mode):
                return "the FIFO was replaced"
        if self.kind in ("dev-null", "dev-full") and not stat.S_ISCHR(os.stat(self.path).st_mode):
            return f"{self.path.name} (a copy of /dev/{self.path.name}) is no longer a device"
        if self.kind.startswith("link-") and not os.path.islink(self.path):
            return "the symbolic link was replaced by a file"
        if self.kind == "link-dev-null" and not stat.S_ISCHR(os.stat(self.path).st_mode):
            return "the device the link points to was replaced"
        if self.kind == "mode-0600" and stat.S_IMODE(os.stat(self.path).st_mode) != 0o600:
            return f"mode changed to {stat.S_IMODE(os.stat(self.path).st_mode):o}"
        return None


def _device(work: Path, name: str) -> Path:
    """A private node of /dev/null or /dev/full: code that renames over its output can
    only ever replace this one, never the system's."""
    path = work / f"dev-{name}"
    if not path.exists():
        numbers = {"null": (1, 3), "full": (1, 7)}[name]
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(*numbers))
    return path


def _nonblock(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NONBLOCK)


ODD_KINDS = ("dir", "fifo", "link-file", "mode-0600", "long-name", "no-dir")
if os.geteuid() == 0:  # device nodes of our own (mknod needs root)
    ODD_KINDS = (*ODD_KINDS, "link-dev-null", "dev-null", "dev-full")


# -- running and classifying ------------------------------------------------------------


def _limits(memory: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (4 << 30, 4 << 30))
    os.setsid()


def run_one(argv: list[str], timeout: float, memory: int, env: dict[str, str],
            signal_after: tuple[int, float] | None = None) -> dict:  # fmt: skip
    start = time.monotonic()
    p = subprocess.Popen(
        [sys.executable, "-m", "aiflame", *argv],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=lambda: _limits(memory), env=env, cwd=ROOT,
    )  # fmt: skip
    timer = None
    if signal_after:
        sig, delay = signal_after
        timer = threading.Timer(delay, lambda: _signal(p, sig))
        timer.start()
    try:
        out, err = p.communicate(timeout=timeout)
        hung = False
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        hung = True
    if timer:
        timer.cancel()
    return {
        "rc": p.returncode, "hung": hung, "seconds": round(time.monotonic() - start, 2),
        "stdout": out[-20000:].decode("utf-8", "replace"), "stdout_bytes": len(out),
        "stderr": err[-20000:].decode("utf-8", "replace"),
    }  # fmt: skip


def _signal(p: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        p.send_signal(sig)


def classify(r: dict, signalled: bool) -> str:
    err = r["stderr"]
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if r["hung"]:
        return "hang"
    if "Traceback (most recent call last)" in err:
        return "memory" if "MemoryError" in err else "traceback"
    if "out of memory" in err or "MemoryError" in err:
        return "memory"
    if r["rc"] < 0 and not signalled:
        return "crash"
    if any(ch in r["stdout"] or ch in err for ch in _RAW):
        return "raw-control"
    if "aiflame: internal error" in err:
        return "internal"
    if r["rc"] == 0:
        return "ok"
    if r["rc"] == 1 and len(lines) == 1 and PYTHON_TEXT.search(lines[0]):
        return "python-text"
    if signalled and r["rc"] in (130, 143, -signal.SIGINT, -signal.SIGTERM):
        return "error" if len(lines) <= 1 else "messy"
    if r["rc"] == 1 and len(lines) == 1 and lines[0].startswith("aiflame: error: "):
        return "error"
    return "messy"


def check_output(
    path: Path | None, existed: bytes | None, r: dict, outcome: str, signalled: bool
) -> tuple[str, str]:
    """(outcome, why) after looking at the output file and its directory."""
    if path is None or not path.parent.is_dir():
        return outcome, ""
    regular = path.is_file() and not path.is_symlink()
    if signalled and regular and existed is None and r["rc"] != 0:
        # The signal came after the output was complete (at exit): fine if it is whole.
        problem = validate(path)
        return (
            ("partial", f"signalled, and the output is cut: {problem}")
            if problem
            else (outcome, "")
        )
    if outcome not in ("ok",) and r["rc"] != 0:
        if regular and existed is None:
            return "partial", "a failed run left an output file"
        if regular and existed is not None and path.read_bytes() != existed:
            return "partial", "a failed run changed the existing output file"
        return outcome, ""
    if outcome == "ok" and regular and existed is None:
        problem = validate(path)
        if problem:
            return "invalid", problem
    return outcome, ""


def validate(path: Path) -> str | None:
    name = path.name
    data = path.read_bytes()
    try:
        if name.endswith(".html"):
            if not data.rstrip().endswith(b"</html>"):
                return "the page does not end with </html>"
            if b'id="aiflame-header"' in data:
                sys.path.insert(0, str(ROOT / "src"))
                from aiflame.render.flamedata import unpack
                from aiflame.render.html import extract_data

                unpack(*extract_data(data.decode("utf-8", "surrogateescape")))
        elif name.endswith(".json"):
            json.loads(data, parse_constant=_refuse_constant)
        elif name.endswith(".pb.gz"):
            sys.path.insert(0, str(ROOT / "src"))
            from aiflame.proto.pyroscope.google.v1 import profile_pb2

            profile_pb2.Profile().ParseFromString(gzip.decompress(data))
        elif name.endswith(".folded"):  # lines end at "\n" only, as folded readers see them
            for line in data.decode("utf-8", "surrogateescape").split("\n"):
                stack, _, count = line.rpartition(" ")
                if line and not count.replace(".", "", 1).lstrip("-").isdigit():
                    return f"not a folded line: {line[:80]!r}"
                if line and (not stack.strip() or stack.startswith("#")):
                    return f"a line a folded reader drops (no frame, or a comment): {line[:80]!r}"
    except Exception as e:
        return f"{type(e).__name__}: {str(e)[:200]}"
    return None


def _refuse_constant(token: str) -> object:
    raise ValueError(f"{token} is not JSON")


# -- the campaign -------------------------------------------------------------------------


class Campaign:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out).resolve()
        self.work = self.out / "work"
        self.out.mkdir(parents=True, exist_ok=True)
        self.rng = random.Random(args.seed)
        self.counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.commands: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.mutants = 0
        self.runs = 0
        self.failures = open(self.out / "failures.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        self.env = dict(os.environ, PYTHONPATH=str(Path(args.src).resolve()), COLUMNS="100")
        self.env.pop("AIFLAME_TRACEBACK", None)
        self.seeds = {**fuzz_mutants.seed_files(), **fuzz_mutants.directory_seeds()}
        self.directories = set(fuzz_mutants.directory_seeds())
        self.bombs = fuzz_mutants.bombs(self.out / "cache")
        if args.formats:
            self.seeds = {f: s for f, s in self.seeds.items() if f in args.formats}

    def mutant(self, case: Path) -> tuple[str, str, Path, Path]:
        """(format, mutation, mutant file, its seed)."""
        fmt = self.rng.choice(sorted(self.seeds))
        seed = self.rng.choice(self.seeds[fmt])
        if fmt in self.directories:
            path = case / f"mutant-{fmt}{seed.suffix}"
            return fmt, fuzz_mutants.mutate_directory(self.rng, seed, path), path, seed
        if self.rng.random() < 0.03:
            name, path = self.rng.choice(sorted(self.bombs.items()))
            return _bomb_format(name), "gzip-bomb", path, seed
        mutation, data = fuzz_mutants.mutate(self.rng, fmt, seed.read_bytes())
        suffix = ".gz" if data[:2] == b"\x1f\x8b" else ""
        path = case / f"mutant-{fmt}{suffix}"
        path.write_bytes(data)
        return fmt, mutation, path, seed

    def run(self) -> None:
        deadline = time.monotonic() + 60 * self.args.minutes
        while time.monotonic() < deadline and (
            not self.args.max_runs or self.runs < self.args.max_runs
        ):
            case = Path(tempfile.mkdtemp(dir=self.work if self.work.exists() else _mk(self.work)))
            try:
                self.one_mutant(case, deadline)
            finally:
                shutil.rmtree(case, ignore_errors=True)
        self.report()

    def one_mutant(self, case: Path, deadline: float) -> None:
        fmt, mutation, mutant, seed = self.mutant(case)
        self.mutants += 1
        cmds = commands_for(fmt, mutant, seed, case / "out" / "result")
        (case / "out").mkdir()
        for name, argv, output in self.rng.sample(cmds, min(len(cmds), self.args.per_mutant)):
            if time.monotonic() > deadline:
                return
            odd = None
            if output is not None and self.rng.random() < 0.12:
                odd = OddOutput(self.rng.choice(ODD_KINDS), output, case / "out")
                argv = [str(odd.path) if a == str(output) else a for a in argv]
                output = odd.path if odd.kind == "mode-0600" else None
            signalled = None
            if self.rng.random() < 0.03:
                signalled = (
                    self.rng.choice([signal.SIGINT, signal.SIGTERM]),
                    self.rng.uniform(0.2, 2.0),
                )
            existed = output.read_bytes() if output is not None and output.is_file() else None
            before = _listing(mutant)
            r = run_one(argv, self.args.timeout, self.args.memory_gib << 30, self.env, signalled)
            outcome = classify(r, signalled is not None)
            outcome, why = check_output(output, existed, r, outcome, signalled is not None)
            left = [p.name for p in (case / "out").iterdir() if p.name.endswith(".tmp")]
            if left:
                outcome, why = "partial", f"temporary files left: {left[:3]}"
            if odd is not None:
                problem = odd.check()
                if problem:
                    outcome, why = "clobbered", problem
            after = _listing(mutant)
            if after != before:
                outcome, why = "beside", f"beside the input: {sorted(set(after) ^ set(before))[:3]}"
            self.runs += 1
            if self.runs % 100 == 0:
                failed = sum(c[o] for c in self.counts.values() for o in FAILURES)
                print(
                    f"{self.runs:,} runs, {self.mutants:,} mutants, {failed} failures", flush=True
                )
            self.counts[fmt][outcome] += 1
            self.commands[name][outcome] += 1
            if outcome in FAILURES:
                self.keep(fmt, seed, mutation, mutant, name, argv, r, outcome, why, odd)
            for p in (case / "out").iterdir():
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        p.unlink()

    def keep(self, fmt: str, seed: Path, mutation: str, mutant: Path, name: str,
             argv: list[str], r: dict, outcome: str, why: str,
             odd: OddOutput | None) -> None:  # fmt: skip
        where = self.out / "failures" / outcome
        where.mkdir(parents=True, exist_ok=True)
        if mutant.is_dir():
            digest = hashlib.sha1(repr(sorted(_listing(mutant).items())).encode()).hexdigest()
            kept = where / f"{fmt}-{digest[:12]}{mutant.suffix}"
            if not kept.exists():
                shutil.copytree(mutant, kept)
        else:
            data = mutant.read_bytes()
            digest = hashlib.sha1(data).hexdigest()[:12]
            kept = where / f"{fmt}-{digest}{''.join(mutant.suffixes)}"
            if not kept.exists():
                kept.write_bytes(data)
        record = {
            "format": fmt, "seed": str(seed), "mutation": mutation, "command": name,
            "outcome": outcome, "why": why,
            "input": str(kept), "argv": argv, "rc": r["rc"], "seconds": r["seconds"],
            "odd_output": odd.kind if odd else None, "stderr": r["stderr"][-3000:],
        }  # fmt: skip
        if name.startswith("analyze"):
            env = dict(self.env, AIFLAME_TRACEBACK="1")
            again = run_one([str(kept) if a == str(mutant) else a for a in argv],
                            self.args.timeout, self.args.memory_gib << 30, env)  # fmt: skip
            record["traceback"] = again["stderr"][-4000:]
        self.failures.write(json.dumps(record) + "\n")
        self.failures.flush()

    def report(self) -> None:
        formats = sorted(self.counts)
        used = [o for o in OUTCOMES if any(self.counts[f][o] for f in formats)]
        width = max([len(f) for f in formats] + [12])
        lines = [f"{self.mutants:,} mutants, {self.runs:,} runs", ""]
        lines.append(f"{'format':<{width}} " + " ".join(f"{o:>10}" for o in used))
        for f in formats:
            lines.append(f"{f:<{width}} " + " ".join(f"{self.counts[f][o]:>10,}" for o in used))
        lines.append("")
        lines.append(f"{'command':<{width}} " + " ".join(f"{o:>10}" for o in used))
        for c in sorted(self.commands):
            lines.append(f"{c:<{width}} " + " ".join(f"{self.commands[c][o]:>10,}" for o in used))
        text = "\n".join(lines)
        print(text)
        summary = {"mutants": self.mutants, "runs": self.runs,
                   "by_format": {f: dict(self.counts[f]) for f in formats},
                   "by_command": {c: dict(v) for c, v in self.commands.items()}}  # fmt: skip
        (self.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        (self.out / "summary.txt").write_text(text + "\n")
        self.failures.close()
        self.write_analyze_list()

    def write_analyze_list(self) -> None:
        path = self.out / "failures.jsonl"
        rows = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
        rows = [r for r in rows if r["command"].startswith("analyze")]
        with open(self.out / "analyze-failures.txt", "w", encoding="utf-8") as f:
            for r in rows:
                f.write(f"== {r['outcome']} {r['format']} {r['mutation']} {r['input']}\n")
                f.write(f"   aiflame {' '.join(r['argv'])}\n")
                f.write((r.get("traceback") or r["stderr"]).strip()[-2500:] + "\n\n")


def _listing(mutant: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of the input and of every other file beside it (or in it, for a
    directory), the output folder left out."""
    where = mutant if mutant.is_dir() else mutant.parent
    out = {}
    for p in where.rglob("*"):
        if p.is_file() and "out" not in p.relative_to(where).parts[:1]:
            st = p.stat()
            out[str(p.relative_to(where))] = (st.st_size, st.st_mtime_ns)
    return out


def _mk(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _bomb_format(name: str) -> str:
    return {"folded": "folded", "perf": "perf-script", "kineto": "kineto",
            "speedscope": "speedscope", "pickle": "torch-memory"}[name.split("-")[0]]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--minutes", type=float, default=10.0, help="how long to run (10)")
    p.add_argument("--max-runs", type=int, default=0, help="stop after this many runs")
    p.add_argument("--out", default="fuzz-out", help="where results go (fuzz-out/)")
    p.add_argument("--seed", type=int, default=1, help="random seed (1)")
    p.add_argument("--per-mutant", type=int, default=3, help="commands run per mutant (3)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per run (60)")
    p.add_argument("--memory-gib", type=int, default=2, help="address space per run (2 GiB)")
    p.add_argument("--formats", nargs="*", help="only these input formats")
    p.add_argument("--src", default=str(ROOT / "src"), help="the aiflame sources to run (src/)")
    Campaign(p.parse_args(argv)).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
