"""aiflame record's bootstrap, loaded by every Python process that ``aiflame record`` starts.

``aiflame record`` puts this directory first on PYTHONPATH, so Python imports this file at
startup as ``sitecustomize``. It then:

1. writes ``proc-<pid>.json`` (pid, parent, argv, torchrun rank) into $AIFLAME_RECORD_DIR,
   which tells the recorder that the interpreter is up and which rank a process is;
2. only if the program imports ``torch``: runs the PyTorch profiler (CPU, plus CUDA where
   available, ``with_stack=True``) for $AIFLAME_TORCH_WINDOW seconds, from
   $AIFLAME_TORCH_DELAY seconds after the program's first ``nn.Module`` call (or
   $AIFLAME_TORCH_FALLBACK seconds after the import if it calls none), and exports its
   trace to ``torch-<pid>.json``;
3. with ``AIFLAME_SNAPSHOT=1`` (set by hand or by a deployment, for ``aiflame agent``):
   serves GPU memory snapshots on request (``aiflame_snapshot.py``), whether or not
   ``aiflame record`` started the program;
4. runs the ``sitecustomize`` this one shadows, if there is one.

The profiler must be started and stopped on the same thread (stopping it from another
thread crashes PyTorch), so a timer thread asks the main thread to do it:
``_thread.interrupt_main(signum)`` runs a Python signal handler on the main thread at its
next bytecode, without sending an OS signal that could interrupt a system call. The handler
is installed on an unused real-time signal and only tripped while it is still ours.

It never changes what the program computes: nothing here touches the program's modules
except ``torch`` being profiled, a program that starts its own profiler first stops ours,
and every failure is reported in ``torch-<pid>.error`` instead of being raised. The code
runs in the target's interpreter (any Python 3.7+), so it imports nothing from aiflame.
"""

import contextlib
import os
import re
import sys

_ENV_DIR = "AIFLAME_RECORD_DIR"


def _write_json(directory, name, data):
    import json

    path = os.path.join(directory, name)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def _note_error(directory, pid, message):
    try:
        with open(os.path.join(directory, f"torch-{pid}.error"), "a") as f:
            f.write(message.replace("\n", " ") + "\n")
    except OSError:
        pass


# Kineto prints these on every profiler start/stop, whatever KINETO_LOG_LEVEL says.
_KINETO_LOG = re.compile(rb"^(?:USDT|STAGE):\d{4}-\d\d-\d\d [\d:]+ \d+:\d+ \S+\.cpp:\d+\] ")


@contextlib.contextmanager
def _without_kineto_lines():
    """Keep PyTorch's profiler chatter out of the program's stderr, and nothing else.

    fd 2 goes to a temporary file while the profiler starts or stops; afterwards every line
    that is not a Kineto log line is written to the real stderr.
    """
    import tempfile

    try:
        sys.stderr.flush()
        saved = os.dup(2)
        tmp = tempfile.TemporaryFile()  # noqa: SIM115 (closed after the block)
        os.dup2(tmp.fileno(), 2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        tmp.seek(0)
        kept = [ln for ln in tmp.read().splitlines(True) if not _KINETO_LOG.match(ln)]
        tmp.close()
        if kept:
            with contextlib.suppress(OSError):
                os.write(2, b"".join(kept))


def _path_prefixes():
    """The directories the profiler strips from file names (its ``sys.path``), so that
    aiflame can name py-spy's frames the same way and find the sources."""
    try:
        from torch.profiler.python_tracer import _prefix_regex

        return [p.rstrip(os.sep) for p in _prefix_regex()]
    except Exception:
        return [os.path.abspath(p) for p in sys.path if isinstance(p, str)]


def _startup_prefixes():
    """sys.path as it will be once the script runs: its directory comes first."""
    paths = [os.path.abspath(p) for p in sys.path if isinstance(p, str) and p]
    script = (getattr(sys, "argv", None) or [""])[0]
    if script and os.path.isfile(script):
        paths.insert(0, os.path.dirname(os.path.abspath(script)))
    return paths


def _new_profiler():
    """The profiler behind ``torch.profiler.profile``, with Python stacks.

    ``torch.profiler.profile.start()`` would first evaluate ``hasattr(torch, "_inductor")``,
    which imports torch._inductor and torch._dynamo into the program: seconds of CPU and
    modules the program never asked for. Its lower layer records the same trace.
    """
    from torch.autograd import profiler as autograd_profiler
    from torch.profiler import ProfilerActivity, supported_activities

    cuda = getattr(ProfilerActivity, "CUDA", None) in supported_activities()
    prof = autograd_profiler.profile(
        use_kineto=True, with_stack=True, use_cpu=True, use_device="cuda" if cuda else None
    )
    return prof, ["CPU", "CUDA"] if cuda else ["CPU"]


def _cuda_initialized():
    torch = sys.modules.get("torch")
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:
        return False


class _TorchWindow:
    """Starts and stops one profiler window on the main thread.

    The window opens ``delay`` seconds after the program's first ``nn.Module`` call: what
    comes before (imports, building the model and optimizer, which imports torch._dynamo and
    sympy) is rarely what a user wants to see and makes a huge trace. A program that calls
    no module gets its window ``fallback`` seconds after ``import torch``.
    """

    def __init__(self, directory, window, delay, fallback):
        self.directory = directory
        self.window = window
        self.delay = delay
        self.fallback = fallback
        self.pid = os.getpid()
        self.prof = None
        self.state = "waiting"  # -> running -> done
        self.signum = None
        self.wanted = None  # what the main thread is asked to do: "start" or "stop"
        self.hook = None
        self.timers = []  # a cancel event per timer thread still waiting
        self.timings = {}

    # -- triggers -----------------------------------------------------------------------------
    def on_torch_imported(self):
        import threading

        if threading.current_thread() is not threading.main_thread():
            _note_error(self.directory, self.pid, "torch was imported off the main thread")
            return
        self.signum = self._install_handler()
        if self.signum is None:
            _note_error(self.directory, self.pid, "no free real-time signal for the window")
            return
        import atexit

        from torch.nn.modules import module

        atexit.register(self.finish)
        self._guard_user_profilers()
        os.register_at_fork(after_in_child=self._forked)
        self.hook = module.register_module_forward_pre_hook(self._on_first_forward)
        self._request_after(self.fallback, "start")

    def _on_first_forward(self, module, args):
        self._remove_hook()
        if self.delay > 0:
            self._request_after(self.delay, "start")
        else:
            self._request("start")
        return None  # the module's inputs are left as they are

    def _remove_hook(self):
        hook, self.hook = self.hook, None
        if hook is not None:
            hook.remove()

    def _install_handler(self):
        import signal

        if not hasattr(signal, "SIGRTMIN"):
            return None
        for signum in range(int(signal.SIGRTMIN) + 4, int(signal.SIGRTMAX)):
            if signal.getsignal(signum) in (signal.SIG_DFL, None):
                signal.signal(signum, self._on_signal)
                return signum
        return None

    def _request_after(self, seconds, action):
        import threading

        cancel = threading.Event()
        self.timers.append(cancel)
        thread = threading.Thread(
            target=self._after, args=(seconds, action, cancel), name=f"aiflame-{action}-timer"
        )
        thread.daemon = True
        thread.start()

    def _after(self, seconds, action, cancel):
        """A timer thread of ours. It runs this file's code only (threading.Timer would run
        threading's), which is how aiflame recognises the thread and leaves it out."""
        if not cancel.wait(seconds):
            self._request(action)

    def _cancel_timers(self):
        for cancel in self.timers:
            cancel.set()
        self.timers = []

    def _request(self, action):
        """Have the main thread ``start`` or ``stop`` the profiler (at once if we are it)."""
        import threading

        if threading.current_thread() is threading.main_thread():
            self._act(action)
            return
        import _thread
        import signal

        # Only while the handler is still ours: the program may have taken the signal since.
        if self.signum is None or signal.getsignal(self.signum) != self._on_signal:
            return
        self.wanted = action
        try:
            _thread.interrupt_main(self.signum)
        except TypeError:  # Python < 3.10: a real signal to the main thread
            signal.pthread_kill(threading.main_thread().ident, self.signum)

    def _on_signal(self, signum, frame):
        action, self.wanted = self.wanted, None
        if action is not None:
            self._act(action)

    def _act(self, action):
        if action == "start" and self.state == "waiting":
            self._remove_hook()
            self.start()
        elif action == "stop" and self.state == "running":
            self.finish()

    def _forked(self):
        self.state = "forked"  # the child is not ours to export: its parent will

    # -- the profiler -------------------------------------------------------------------------
    def start(self):
        import time

        if self.state != "waiting":
            return
        self._cancel_timers()  # the fallback start is not needed any more
        try:
            self.prof, activities = _new_profiler()
            _write_json(self.directory, f"torch-{self.pid}.pending", {"window": self.window})
            t0 = time.perf_counter()
            with _without_kineto_lines():
                self.prof._prepare_trace()
                self.prof._start_trace()
            self.timings["start_s"] = time.perf_counter() - t0
            self.timings["activities"] = activities
            self.state = "running"
            self._request_after(self.window, "stop")
        except Exception as e:  # profiling must never break the program
            self.state = "done"
            self._failed("start", e)

    def finish(self):
        import time

        if self.state != "running" or os.getpid() != self.pid:
            return
        self.state = "done"
        self._cancel_timers()  # ended before the window did (exit, or a user's profiler)
        path = os.path.join(self.directory, f"torch-{self.pid}.json")
        try:
            t0 = time.perf_counter()
            if self.prof.use_device == "cuda" and not _cuda_initialized():
                self.prof.use_device = None  # no torch.cuda.synchronize() in a CPU-only run
            with _without_kineto_lines():
                self.prof.__exit__(None, None, None)
            t1 = time.perf_counter()
            self.prof.export_chrome_trace(path + ".tmp")
            os.replace(path + ".tmp", path)
            self.timings["stop_s"] = t1 - t0
            self.timings["export_s"] = time.perf_counter() - t1
            self.timings["sys_path"] = _path_prefixes()
            _write_json(self.directory, f"torch-{self.pid}.meta.json", self.timings)
        except Exception as e:
            self._failed("stop", e)
        finally:
            self.prof = None
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.directory, f"torch-{self.pid}.pending"))

    def _failed(self, what, error):
        _note_error(self.directory, self.pid, f"{what}: {type(error).__name__}: {error}")
        with contextlib.suppress(OSError):
            os.remove(os.path.join(self.directory, f"torch-{self.pid}.pending"))

    def _guard_user_profilers(self):
        """A program that starts its own profiler gets it: ours stops first."""
        try:
            from torch.autograd import profiler as autograd_profiler
        except Exception:
            return
        cls = autograd_profiler.profile
        original = getattr(cls, "_prepare_trace", None)
        if original is None:
            return
        window = self

        def _prepare_trace(prof_self, *args, **kwargs):
            ours = prof_self is window.prof
            if window.state == "running" and not ours:
                window.finish()
            return original(prof_self, *args, **kwargs)

        cls._prepare_trace = _prepare_trace


class _TorchFinder:
    """A meta-path finder that only notices the import of ``torch`` and then steps aside."""

    def __init__(self, on_imported):
        self.on_imported = on_imported

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if find is not None:
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module
        hook = self.on_imported

        def exec_module(module):
            with contextlib.suppress(AttributeError):
                del loader.exec_module  # back to the loader's own method
            original(module)
            hook()

        loader.exec_module = exec_module
        return spec


def _start_snapshots():
    """GPU memory snapshots on request of aiflame agent (aiflame_snapshot.py)."""
    import aiflame_snapshot

    def when_torch_imported(fn):
        if "torch" in sys.modules:
            fn()
        else:
            sys.meta_path.insert(0, _TorchFinder(fn))

    aiflame_snapshot.start(when_torch_imported)


def _bootstrap():
    directory = os.environ.get(_ENV_DIR)
    if not directory or not os.path.isdir(directory):
        return
    pid = os.getpid()
    info = {
        "pid": pid,
        "ppid": os.getppid(),
        "argv": list(getattr(sys, "argv", [])),
        "python": sys.version.split()[0],
        "sys_path": _startup_prefixes(),
    }
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        if key in os.environ:
            info[key.lower()] = os.environ[key]
    _write_json(directory, f"proc-{pid}.json", info)
    if os.environ.get("AIFLAME_GPU_PC_SAMPLING"):
        _start_gpu_pc_sampling(directory, pid)
    try:
        window = float(os.environ.get("AIFLAME_TORCH_WINDOW") or 0)
        delay = float(os.environ.get("AIFLAME_TORCH_DELAY") or 0)
        fallback = float(os.environ.get("AIFLAME_TORCH_FALLBACK") or 10)
    except ValueError:
        window = 0.0
    if window <= 0:
        return
    torch_window = _TorchWindow(directory, window, delay, fallback)

    def on_imported():
        try:
            torch_window.on_torch_imported()
        except Exception as e:
            _note_error(directory, pid, f"hook: {type(e).__name__}: {e}")

    if "torch" in sys.modules:
        on_imported()
    else:
        sys.meta_path.insert(0, _TorchFinder(on_imported))


def _start_gpu_pc_sampling(directory, pid):
    """CUPTI PC sampling (aiflame_cupti_pcsampling.py), before the program touches CUDA."""
    try:
        import aiflame_cupti_pcsampling

        aiflame_cupti_pcsampling.start_from_env(directory)
    except Exception as e:
        try:
            with open(os.path.join(directory, f"gpupc-{pid}.error"), "a") as f:
                f.write(f"GPU PC sampling could not start: {type(e).__name__}: {e}\n")
        except OSError:
            pass


def _chain():
    """Run the sitecustomize module that this one shadows on sys.path, if any."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if os.environ.get("AIFLAME_SNAPSHOT"):
    with contextlib.suppress(Exception):  # never in the program's way
        _start_snapshots()
try:
    _bootstrap()
except Exception as _e:  # never let profiling stop the program from starting
    if os.environ.get(_ENV_DIR):
        _note_error(os.environ[_ENV_DIR], os.getpid(), f"bootstrap: {_e!r}")
_chain()
