"""Thread states read back from stacks: real py-spy recordings and the rules' edge cases."""

from __future__ import annotations

from collections import Counter

import pytest

from aiflame.collectors.pyspy import convert_frame, read_speedscope
from aiflame.collectors.threadstate import ACTIVE, GIL_WAIT, IDLE, classify, normalize
from aiflame.model import Frame, FrameKind


def _states(path):
    data = read_speedscope(str(path))
    out = {}
    for t in data.threads:
        out[t.name] = Counter(
            classify([convert_frame(data.frames[i]) for i in s]) for s in t.samples
        )
    return out


def test_gil_fight_sleep_and_event_wait(data_dir):
    states = _states(data_dir / "record" / "pyspy-gil.speedscope.json")
    # Two spinning threads take turns: each is seen running and seen waiting for the GIL.
    for name in ("spin0", "spin1"):
        assert states[name][ACTIVE] > 0 and states[name][GIL_WAIT] > 0, states[name]
        assert states[name][IDLE] == 0
    # time.sleep, Event.wait and Thread.join are plain waits.
    for name in ("sleeper", "waiter", "MainThread"):
        assert set(states[name]) == {IDLE}, (name, states[name])


def test_torch_main_thread_active_sleeper_idle(data_dir):
    states = _states(data_dir / "record" / "pyspy-native.speedscope.json")
    assert set(states["MainThread"]) == {ACTIVE}
    assert set(states["sleeper"]) == {IDLE}


def py(name, file="app.py", line=1):
    return Frame(name, FrameKind.PYTHON, file, line)


def nat(name, module="libc.so.6"):
    return Frame(name, FrameKind.NATIVE, module=module)


@pytest.mark.parametrize(
    ("stack", "state"),
    [
        ([py("main"), py("work")], ACTIVE),
        ([py("main"), py("Condition.wait", "/usr/lib/python3.11/threading.py")], IDLE),
        ([py("main"), py("BaseSelector.select", "/x/selectors.py")], IDLE),
        # GIL: a condition-variable wait right under Python code (take_gil is hidden)
        ([py("main"), nat("pthread_cond_timedwait"), nat("[libc.so.6]")], GIL_WAIT),
        # ... or under libpython (PyGilState_Ensure from a C thread)
        ([nat("PyGilState_Ensure", "libpython3.11.so.1.0"), nat("___pthread_cond_wait")], GIL_WAIT),
        # a condition variable of a C++ library is just a wait
        ([py("main"), nat("c10::ThreadPool::run", "libc10.so"), nat("pthread_cond_wait")], IDLE),
        ([py("main"), nat("time_sleep", "libpython3.11.so.1.0"), nat("clock_nanosleep")], IDLE),
        (
            [
                py("acquire"),
                nat("lock_PyThread_acquire_lock", "libpython3.11.so.1.0"),
                nat("PyThread_acquire_lock_timed", "libpython3.11.so.1.0"),
                nat("[libc.so.6]"),
            ],
            IDLE,
        ),
        ([py("main"), nat("__GI___poll")], IDLE),
        ([py("main"), nat("epoll_wait")], IDLE),
        ([py("f"), nat("std::condition_variable::wait", "libstdc++.so.6")], IDLE),
        ([py("main"), nat("at::native::add_kernel", "libtorch_cpu.so")], ACTIVE),
        ([py("main"), Frame("jit_avx2_conv_fwd_kernel_f32_t", FrameKind.JIT)], ACTIVE),
        ([py("main"), nat("memcpy")], ACTIVE),
        ([], ACTIVE),
    ],
)
def test_rules(stack, state):
    assert classify(stack) == state


def test_normalize_glibc_aliases():
    assert normalize("___pthread_cond_timedwait64") == "pthread_cond_timedwait"
    assert normalize("__GI___clock_nanosleep") == "clock_nanosleep"
    assert normalize("__futex_abstimed_wait_common64") == "futex_abstimed_wait_common"
    assert normalize("epoll_wait@@GLIBC_2.3.2") == "epoll_wait"
    assert normalize("memcpy64") == "memcpy64"  # not a wait: left alone
