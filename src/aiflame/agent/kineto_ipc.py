"""libkineto's IPC fabric, served as Dynolog serves it: on-demand traces of unmodified
PyTorch programs started with ``KINETO_USE_DAEMON=1``.

The wire format (dynolog ``dynolog/src/ipcfabric/``, kineto
``libkineto/src/IpcFabricConfigClient.cpp``): Unix datagram sockets. The daemon's endpoint
is named ``dynolog``: the abstract address ``"\\0dynolog\\0"`` (the trailing NUL is part of
the name, as the fabric builds it), or the file ``$KINETO_IPC_SOCKET_DIR/dynolog`` when the
process has that variable. Each process binds its own endpoint
(``dynoconfigclient<uuid>``, same rule) and sends from it; the daemon answers to the
sender's address. A datagram is a 40-byte header, ``size_t size`` (the payload's length)
and ``char type[32]`` (NUL-padded), then the payload, native-endian:

* ``ctxt`` from the process when its profiler starts: ``{int32 gpu; int32 pid; int64
  job_id}``; the answer is a ``ctxt`` message whose payload is an ``int32``, the number of
  processes of that job on that GPU registered so far.
* ``req`` every few seconds (libkineto's on-demand poll, 5 s by default): ``{int32 type;
  int32 n; int64 job_id; int32 pids[n]}``, ``type`` a bit mask (1 events, 2 activities),
  ``pids`` the process and its ancestors, leaf first, as the process's PID namespace
  numbers them. The answer is a ``req`` message whose payload is the config text (not
  NUL-terminated), empty when nothing is asked. The process waits about 90 ms for it
  (9 polls 10 ms apart), so answers come from a thread of their own.

``SO_PASSCRED`` gives the sender's PID as this (host) PID namespace sees it, so a process in
a container is matched to its host PID without trusting what it says. Abstract sockets
belong to a network namespace: with ``netns`` (the default of the agent) the fabric serves
``@dynolog`` in every network namespace of the host that a process runs in (every pod's:
:mod:`.netns`), found by a look at ``/proc`` every few seconds, so an unmodified pod is
traced with nothing mounted; a namespace whose processes are all gone is let go. A
directory socket (the same host path mounted in the pod and in the agent, named in the
pod's ``KINETO_IPC_SOCKET_DIR``) still serves hosts that use one.

The endpoint is world-writable, as Dynolog's is: anything may send to it. A process counts
as a PyTorch process (``processes()``, what traces are offered to and what the agent's
metric counts) only when it is one: the kernel names its PID (``SO_PASSCRED``), it sends
from an endpoint named as libkineto names its own, and it maps libkineto (in
``libtorch_cpu.so`` or a ``libkineto`` of its own).
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from aiflame.agent.netns import net_namespace, socket_in_namespace

ENDPOINT = "dynolog"
TYPE_SIZE = 32
HEADER = struct.Struct("=Q32s")  # struct Metadata { size_t size; char type[32]; }
CONTEXT = struct.Struct("=iiq")  # struct LibkinetoContext { int32 gpu; pid_t pid; int64 jobid; }
REQUEST = struct.Struct(
    "=iiq"
)  # struct LibkinetoRequest { int type; int n; int64 jobid; int32 pids[]; }
CONFIG_EVENTS, CONFIG_ACTIVITIES = 1, 2
MAX_DATAGRAM = 64 * 1024
MAX_SOCKET_PATH = 106  # sun_path is 108 bytes; the fabric keeps two for NULs
CLIENT_NAME = "dynoconfigclient" + "0" * 36  # libkineto's endpoint: a prefix and a UUID
_UCRED = struct.Struct("=iII")  # struct ucred { pid_t pid; uid_t uid; gid_t gid; }
# A process that has not polled for this long is no longer counted as running libkineto.
STALE_S = 60.0
NETNS_SCAN_S = 5.0  # how often /proc is looked at for new network namespaces
MAX_NAMESPACES = 1024  # endpoints in other namespaces at most (pods of one node: ~110)
LIBKINETO = (b"libkineto", b"libtorch_cpu.so", b"libtorch.so")  # one of them maps it


def encode(kind: str, payload: bytes) -> bytes:
    """One fabric message."""
    name = kind.encode()
    if len(name) >= TYPE_SIZE:
        raise ValueError(f"message type too long: {kind}")
    return HEADER.pack(len(payload), name) + payload


def decode(data: bytes) -> tuple[str, bytes] | None:
    """(type, payload) of a message, None when it is not one."""
    if len(data) < HEADER.size:
        return None
    size, raw_type = HEADER.unpack_from(data)
    payload = data[HEADER.size : HEADER.size + size]
    if len(payload) != size:
        return None
    return raw_type.split(b"\0", 1)[0].decode("ascii", "replace"), payload


@dataclass
class KinetoProcess:
    """A process that registered or polled."""

    pid: int  # as this agent sees it (host PID namespace)
    ns_pid: int  # as the process sees itself
    job_id: int
    address: bytes | str  # its endpoint, where answers go
    ancestors: tuple[int, ...] = ()  # namespace PIDs, leaf first
    gpu: int = -1
    last_poll: float = 0.0
    polls: int = 0
    pending: str = ""  # the config to hand out at its next poll
    handed_out: float = 0.0  # when the last config was handed out (monotonic)
    libkineto: bool = False  # verified to be a real libkineto client (module docstring)


@dataclass
class FabricStats:
    messages: int = 0
    malformed: int = 0
    configs_sent: int = 0
    send_failures: int = 0
    contexts: dict[tuple[int, int], set[int]] = field(default_factory=dict)  # (job, gpu) -> pids
    namespaces: int = 0  # network namespaces served besides the agent's own
    namespace_failures: int = 0  # namespaces that could not be entered or bound in


class KinetoFabric:
    """The daemon endpoint(s) and the registry of libkineto processes.

    ::

        fabric = KinetoFabric(abstract=True, directories=["/run/aiflame/kineto"], netns=True)
        fabric.start()                  # binds, answers on a thread of its own
        fabric.processes()              # who polls
        fabric.offer(pid, config)       # handed out at the process's next poll
        fabric.handed_out(pid)          # when it was (0: not yet)
        fabric.close()
    """

    def __init__(
        self,
        abstract: bool = True,
        directories: Iterable[str] = (),
        netns: bool = False,
        verify_clients: bool = True,
    ) -> None:
        self.abstract = abstract
        self.directories = [d for d in directories if d]
        self.netns = netns  # @dynolog in every other network namespace too
        self.verify_clients = verify_clients  # only real libkineto clients count
        self._own_ns = net_namespace("self")
        self._ns_sockets: dict[int, socket.socket] = {}  # namespace inode -> its endpoint
        self._ns_of_pid: dict[int, int] = {}  # pid -> its namespace (as last looked at)
        self._ns_failed: dict[int, str] = {}  # namespace -> why it is not served
        self._next_ns_scan = 0.0
        self.sockets: list[socket.socket] = []
        self.paths: list[str] = []
        self.stats = FabricStats()
        self.errors: list[str] = []
        self._procs: dict[int, KinetoProcess] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = -1, -1

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        if self.abstract:
            self._bind(b"\0" + ENDPOINT.encode() + b"\0", "abstract socket @dynolog")
        for directory in self.directories:
            path = os.path.join(directory, ENDPOINT)
            if len(os.path.join(directory, CLIENT_NAME).encode()) > MAX_SOCKET_PATH:
                self.errors.append(
                    f"libkineto endpoint {path}: the directory's name is too long for the "
                    f"processes' own sockets (at most {MAX_SOCKET_PATH} bytes in all)"
                )
                continue
            with contextlib.suppress(OSError):
                os.makedirs(directory, mode=0o755, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            if self._bind(path, path):
                os.chmod(path, 0o666)  # processes of any user poll it, as Dynolog allows
                self.paths.append(path)
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._serve, name="aiflame-kineto", daemon=True)
        self._thread.start()

    def _bind(self, address: bytes | str, what: str) -> bool:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            sock.bind(address)
        except OSError as e:
            sock.close()
            self.errors.append(f"libkineto endpoint {what}: {e.strerror or e}")
            return False
        sock.setblocking(False)
        self.sockets.append(sock)
        return True

    def close(self) -> None:
        self._stop.set()
        if self._wake_w >= 0:
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        for sock in self.sockets:
            sock.close()
        self.sockets.clear()
        self._ns_sockets.clear()
        for path in self.paths:
            with contextlib.suppress(OSError):
                os.unlink(path)
        self.paths.clear()
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r = self._wake_w = -1

    # -- registry ---------------------------------------------------------------------------
    def processes(self, max_age_s: float = STALE_S) -> dict[int, KinetoProcess]:
        """Real libkineto processes that polled within ``max_age_s``, by host PID."""
        now = time.monotonic()
        with self._lock:
            stale = [p for p, k in self._procs.items() if now - k.last_poll > 10 * max_age_s]
            for pid in stale:
                del self._procs[pid]
            return {
                p: k
                for p, k in self._procs.items()
                if now - k.last_poll <= max_age_s and (k.libkineto or not self.verify_clients)
            }

    def offer(self, pid: int, config: str) -> bool:
        """Hand ``config`` to process ``pid`` at its next poll; False if one is pending."""
        with self._lock:
            proc = self._procs.get(pid)
            if proc is None or proc.pending:
                return False
            proc.pending = config
            proc.handed_out = 0.0
            return True

    def withdraw(self, pid: int) -> None:
        with self._lock:
            proc = self._procs.get(pid)
            if proc is not None:
                proc.pending = ""

    def handed_out(self, pid: int) -> float:
        with self._lock:
            proc = self._procs.get(pid)
            return proc.handed_out if proc is not None and not proc.pending else 0.0

    # -- serving ----------------------------------------------------------------------------
    def _serve(self) -> None:
        while not self._stop.is_set():
            if self.netns and time.monotonic() >= self._next_ns_scan:
                self._next_ns_scan = time.monotonic() + NETNS_SCAN_S
                self._serve_namespaces()
            try:
                waits: list[socket.socket | int] = [*self.sockets, self._wake_r]
                ready, _, _ = select.select(waits, [], [], 1.0)
            except (OSError, ValueError):
                return
            for sock in ready:
                if isinstance(sock, socket.socket):
                    self._drain(sock)

    def _serve_namespaces(self, proc: str = "/proc") -> None:
        """An endpoint in each network namespace a process runs in (but the agent's own,
        served or not by ``abstract``); those of namespaces left by every process closed."""
        try:
            pids = {int(n) for n in os.listdir(proc) if n.isdigit()}
        except OSError:
            return
        for pid in self._ns_of_pid.keys() - pids:
            del self._ns_of_pid[pid]
        for pid in pids - self._ns_of_pid.keys():  # only new ones: a readlink each
            ns = net_namespace(pid, proc)
            if ns is not None:
                self._ns_of_pid[pid] = ns
        live: dict[int, int] = {}  # namespace -> a pid in it
        for pid, ns in self._ns_of_pid.items():
            live.setdefault(ns, pid)
        for ns in [ns for ns in self._ns_sockets if ns not in live]:
            sock = self._ns_sockets.pop(ns)
            self.sockets.remove(sock)
            sock.close()
        self._ns_failed = {ns: why for ns, why in self._ns_failed.items() if ns in live}
        for ns, pid in live.items():
            if ns == self._own_ns or ns in self._ns_sockets or ns in self._ns_failed:
                continue
            if len(self._ns_sockets) >= MAX_NAMESPACES:
                break
            try:
                sock = socket_in_namespace(pid)
            except OSError as e:
                self._ns_failed[ns] = str(e)
                self.stats.namespace_failures += 1
                continue
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
                sock.bind(b"\0" + ENDPOINT.encode() + b"\0")
            except OSError as e:  # a Dynolog of the pod's own holds it: it serves the pod
                sock.close()
                self._ns_failed[ns] = e.strerror or str(e)
                self.stats.namespace_failures += 1
                continue
            sock.setblocking(False)
            self._ns_sockets[ns] = sock
            self.sockets.append(sock)
        self.stats.namespaces = len(self._ns_sockets)

    def _drain(self, sock: socket.socket) -> None:
        for _ in range(256):  # bounded: a flood cannot keep this thread here forever
            try:
                data, ancillary, _flags, address = sock.recvmsg(
                    MAX_DATAGRAM, socket.CMSG_SPACE(_UCRED.size)
                )
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            self.stats.messages += 1
            sender = _sender_pid(ancillary)
            message = decode(data)
            if message is None or not address:
                self.stats.malformed += 1
                continue
            kind, payload = message
            reply = self._answer(kind, payload, sender, address)
            if reply is not None:
                try:
                    sock.sendto(reply, address)
                    if kind == "req" and len(reply) > HEADER.size:
                        self.stats.configs_sent += 1
                except OSError:
                    self.stats.send_failures += 1

    def _answer(self, kind: str, payload: bytes, sender: int, address: bytes | str) -> bytes | None:
        now = time.monotonic()
        if kind == "ctxt" and len(payload) >= CONTEXT.size:
            gpu, ns_pid, job = CONTEXT.unpack_from(payload)
            pid = sender or ns_pid
            with self._lock:
                proc = self._procs.get(pid)
                if proc is None:
                    proc = self._procs[pid] = self._new_process(sender, pid, ns_pid, job, address)
                proc.gpu, proc.address, proc.last_poll = gpu, address, now
                group = self.stats.contexts.setdefault((job, gpu), set())
                group.add(pid)
                count = len(group)
            return encode("ctxt", struct.pack("=i", count))
        if kind == "req" and len(payload) >= REQUEST.size:
            config_type, n, job = REQUEST.unpack_from(payload)
            n = max(0, min(n, (len(payload) - REQUEST.size) // 4))
            pids = struct.unpack_from(f"={n}i", payload, REQUEST.size) if n else ()
            if not pids:
                self.stats.malformed += 1
                return None
            pid = sender or pids[0]
            config = ""
            with self._lock:
                proc = self._procs.get(pid)
                if proc is None or proc.ns_pid != pids[0]:
                    proc = self._procs[pid] = self._new_process(sender, pid, pids[0], job, address)
                proc.address, proc.ancestors, proc.job_id = address, tuple(pids), job
                proc.last_poll, proc.polls = now, proc.polls + 1
                if proc.pending and config_type & CONFIG_ACTIVITIES:
                    config, proc.pending, proc.handed_out = proc.pending, "", now
            return encode("req", config.encode())
        self.stats.malformed += 1
        return None

    def _new_process(
        self, sender: int, pid: int, ns_pid: int, job: int, address: bytes | str
    ) -> KinetoProcess:
        proc = KinetoProcess(pid, ns_pid, job, address)
        proc.libkineto = bool(sender) and is_libkineto_client(sender, address)
        return proc


def is_libkineto_client(pid: int, address: bytes | str, proc: str = "/proc") -> bool:
    """Whether process ``pid`` (as the kernel named the sender) is a libkineto client: its
    endpoint is named as libkineto names its own, and it maps libkineto."""
    raw = address if isinstance(address, bytes) else os.fsencode(address)
    name = os.path.basename(raw.strip(b"\0"))
    if not (name.startswith(b"dynoconfigclient") and len(name) == len(CLIENT_NAME)):
        return False
    try:
        with open(f"{proc}/{pid}/maps", "rb") as f:
            maps = f.read()
    except OSError:
        return False
    return any(lib in maps for lib in LIBKINETO)


def _sender_pid(ancillary: list[tuple[int, int, bytes]]) -> int:
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(data) >= 12:
            return _UCRED.unpack_from(data)[0]
    return 0


def on_demand_config(
    log_file: str,
    duration_ms: int | None = None,
    iterations: int | None = None,
    start_time_s: float | None = None,
    with_stack: bool = True,
    input_shapes: bool = True,
    trace_id: str = "",
) -> str:
    """The config text libkineto parses (``KEY=value`` lines), as ``dyno gputrace`` sends
    it: a trace of ``duration_ms`` from now (or from ``start_time_s``), or of
    ``iterations`` steps, written to ``log_file`` in the process's file system."""
    lines = ["ACTIVITIES_ENABLED=true", f"ACTIVITIES_LOG_FILE={log_file}"]
    if iterations:
        lines.append(f"ACTIVITIES_ITERATIONS={int(iterations)}")
        lines.append("PROFILE_START_ITERATION=0")
    else:
        lines.append(f"ACTIVITIES_DURATION_MSECS={int(duration_ms or 500)}")
    if start_time_s:
        lines.append(f"PROFILE_START_TIME={int(start_time_s * 1000)}")
    lines.append(f"PROFILE_WITH_STACK={'true' if with_stack else 'false'}")
    lines.append(f"PROFILE_REPORT_INPUT_SHAPES={'true' if input_shapes else 'false'}")
    if trace_id:
        lines.append(f"REQUEST_TRACE_ID={trace_id}")
    return "\n".join(lines) + "\n"
