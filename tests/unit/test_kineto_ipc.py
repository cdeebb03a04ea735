"""libkineto's IPC fabric as the agent serves it: the datagrams libkineto sends (built here
byte for byte as ``IpcFabricConfigClient.cpp`` builds them), on a directory socket and on
the abstract one, and the answers it reads back. The real libkineto of the PyTorch wheel
is exercised in tests/agent/test_agent_trace.py."""

from __future__ import annotations

import os
import shutil
import socket
import struct
import time
import uuid

import pytest

from aiflame.agent.kineto_ipc import (
    HEADER,
    KinetoFabric,
    decode,
    encode,
    on_demand_config,
)


@pytest.fixture
def short_dir():
    """Unix socket paths are limited to 107 bytes: libkineto's client name takes 52."""
    import tempfile

    d = tempfile.mkdtemp(prefix="akt", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _client(address_dir: str | None) -> tuple[socket.socket, bytes | str]:
    """A client endpoint named as libkineto names its own, bound the same way."""
    name = "dynoconfigclient" + str(uuid.uuid4())
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if address_dir:
        addr: bytes | str = os.path.join(address_dir, name)
    else:
        addr = b"\0" + name.encode() + b"\0"
    sock.bind(addr)
    sock.settimeout(2.0)
    return sock, addr


def _daemon(address_dir: str | None) -> bytes | str:
    return os.path.join(address_dir, "dynolog") if address_dir else b"\0dynolog\0"


def _req(pids: list[int], job: int = 0, kind: int = 2) -> bytes:
    payload = struct.pack("=iiq", kind, len(pids), job) + struct.pack(f"={len(pids)}i", *pids)
    return encode("req", payload)


def test_message_codec():
    msg = encode("req", b"abc")
    assert len(msg) == HEADER.size + 3 == 43
    size, raw_type = struct.unpack_from("=Q32s", msg)
    assert size == 3 and raw_type.rstrip(b"\0") == b"req"
    assert decode(msg) == ("req", b"abc")
    assert decode(msg[:-1]) is None  # a payload shorter than its header says
    assert decode(b"short") is None


def test_config_text():
    text = on_demand_config("/tmp/t.json", duration_ms=1500, start_time_s=1700000000.5)
    lines = dict(line.split("=", 1) for line in text.splitlines())
    assert lines["ACTIVITIES_LOG_FILE"] == "/tmp/t.json"
    assert lines["ACTIVITIES_DURATION_MSECS"] == "1500"
    assert lines["PROFILE_START_TIME"] == "1700000000500"  # ms since the epoch
    assert lines["PROFILE_WITH_STACK"] == lines["PROFILE_REPORT_INPUT_SHAPES"] == "true"
    steps = dict(
        line.split("=", 1) for line in on_demand_config("/tmp/t.json", iterations=5).splitlines()
    )
    assert steps["ACTIVITIES_ITERATIONS"] == "5" and "ACTIVITIES_DURATION_MSECS" not in steps


@pytest.mark.parametrize("where", ["directory", "abstract"])
def test_register_poll_and_hand_out_a_config(short_dir, where):
    directory = short_dir if where == "directory" else None
    # the protocol alone: this test's process is no real libkineto client (that the agent
    # checks is tested with one, tests/agent/test_agent_trace.py)
    fabric = KinetoFabric(
        abstract=where == "abstract",
        directories=[directory] if directory else [],
        verify_clients=False,
    )
    fabric.start()
    if where == "abstract" and fabric.errors:
        fabric.close()
        pytest.skip(f"abstract socket in use on this machine: {fabric.errors[0]}")
    client, _ = _client(directory)
    try:
        if directory:
            assert os.stat(os.path.join(directory, "dynolog")).st_mode & 0o777 == 0o666
        me = os.getpid()
        # ctxt: {int32 gpu; int32 pid; int64 job} -> the number of processes of the job on it
        client.sendto(encode("ctxt", struct.pack("=iiq", 0, me, 77)), _daemon(directory))
        kind, payload = decode(client.recv(4096))
        assert kind == "ctxt" and struct.unpack("=i", payload) == (1,)
        # req: nothing asked yet -> an empty config
        client.sendto(_req([me, os.getppid()], job=77), _daemon(directory))
        assert decode(client.recv(4096)) == ("req", b"")
        procs = fabric.processes()
        assert me in procs  # by the sender's PID, from SO_PASSCRED
        assert procs[me].ancestors == (me, os.getppid()) and procs[me].job_id == 77
        assert fabric.offer(me, "ACTIVITIES_DURATION_MSECS=10\n")
        assert not fabric.offer(me, "another")  # one pending config per process
        assert fabric.handed_out(me) == 0.0
        # an events-only poll (type 1) does not take an activities config
        client.sendto(_req([me], kind=1), _daemon(directory))
        assert decode(client.recv(4096)) == ("req", b"")
        client.sendto(_req([me]), _daemon(directory))
        assert decode(client.recv(4096)) == ("req", b"ACTIVITIES_DURATION_MSECS=10\n")
        assert fabric.handed_out(me) > 0
        client.sendto(_req([me]), _daemon(directory))
        assert decode(client.recv(4096)) == ("req", b"")  # handed out once
        # garbage is counted, never answered, and does not stop the endpoint
        client.sendto(b"garbage", _daemon(directory))
        client.sendto(encode("what", b""), _daemon(directory))
        client.sendto(_req([me]), _daemon(directory))
        assert decode(client.recv(4096)) == ("req", b"")
        assert fabric.stats.malformed == 2
    finally:
        client.close()
        fabric.close()
    if directory:
        assert not os.path.exists(os.path.join(directory, "dynolog"))


def test_answers_come_within_libkinetos_wait(short_dir):
    """libkineto waits 9 x 10 ms for the answer: a hundred polls each answered in time."""
    fabric = KinetoFabric(abstract=False, directories=[short_dir])
    fabric.start()
    client, _ = _client(short_dir)
    worst = 0.0
    try:
        for _ in range(100):
            t = time.perf_counter()
            client.sendto(_req([os.getpid()]), _daemon(short_dir))
            client.recv(4096)
            worst = max(worst, time.perf_counter() - t)
    finally:
        client.close()
        fabric.close()
    assert worst < 0.09


def test_a_libkineto_client_is_named_as_libkineto_names_it_and_maps_it(tmp_path):
    from aiflame.agent.kineto_ipc import CLIENT_NAME, is_libkineto_client

    proc = tmp_path / "proc" / "42"
    proc.mkdir(parents=True)
    name = "dynoconfigclient" + str(uuid.uuid4())
    assert len(name) == len(CLIENT_NAME)
    (proc / "maps").write_text(
        "7f0000000000-7f0000100000 r-xp 00000000 08:01 1234 /opt/torch/lib/libtorch_cpu.so\n"
    )
    root = str(tmp_path / "proc")
    assert is_libkineto_client(42, b"\0" + name.encode() + b"\0", root)
    assert is_libkineto_client(42, f"/run/aiflame/kineto/{name}", root)
    assert not is_libkineto_client(42, b"\0somethingelse\0", root)
    assert not is_libkineto_client(43, b"\0" + name.encode() + b"\0", root)  # no such process
    (proc / "maps").write_text(
        "7f0000000000-7f0000100000 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\n"
    )
    assert not is_libkineto_client(42, b"\0" + name.encode() + b"\0", root)
