"""Whose work a process is: cgroup paths of every runtime, the kubelet's log links, Slurm
and torchrun variables, label mappings; on recorded cgroup lines of real hosts and on
processes of this machine (put, as root, into cgroups of each layout)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aiflame.agent.cgroup_ids import cgroup_path, parse_cgroup_path
from aiflame.agent.identity import (
    Identities,
    KubeletPods,
    KubeLogIndex,
    LabelRules,
    clip,
    parse_kube_log_name,
    service_name,
    start_time,
)
from aiflame.collectors.ebpf.cgroups import cgroup2_root
from aiflame.collectors.ebpf.sampler import FirstLook

DATA = Path(__file__).resolve().parents[1] / "data" / "cgroups"


def recorded_lines() -> list[list[str]]:
    rows = []
    for line in (DATA / "cgroup_lines.tsv").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            fields = line.split("\t")
            rows.append(fields + [""] * (7 - len(fields)))
    return rows


@pytest.mark.parametrize("row", recorded_lines(), ids=lambda r: f"{r[0]}:{r[1][-40:]}")
def test_recorded_cgroup_lines(row):
    _source, line, runtime, container, pod, qos, job = row
    # falco-libs records the path alone (the third field of the line)
    ident = parse_cgroup_path(line if line.startswith("/") else cgroup_path(line))
    assert (ident.runtime, ident.container_id, ident.pod_uid, ident.qos, ident.slurm_job_id) == (
        runtime,
        container,
        pod,
        qos,
        job,
    )


def test_every_layout_is_covered():
    rows = recorded_lines()
    runtimes = {r[2] for r in rows}
    assert {"containerd", "cri-o", "docker"} <= runtimes
    assert any(r[6] for r in rows)  # Slurm
    assert any(not r[2] and not r[3] and not r[6] for r in rows)  # a plain systemd session


def test_the_v1_file_picks_the_line_that_names_the_container():
    text = (
        "12:pids:/\n"
        "4:memory:/kubepods/besteffort/pod3d274242-8ee0-11e9-a8a6-1e68d864ef1a/"
        "3e74d3fd9db4c9dd921ae05c2502fb984d0cde1b36e581b13f79c639da4518a1\n"
        "0::/\n"
    )
    ident = parse_cgroup_path(cgroup_path(text))
    assert ident.pod_uid == "3d274242-8ee0-11e9-a8a6-1e68d864ef1a"
    assert ident.container_id.startswith("3e74d3fd")


def test_conmon_is_not_the_container():
    path = (
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b7632a2_a56e_4278_987a_"
        "22de18008dbe.slice/crio-conmon-0bc5eac79e3ae7a0c2651f14722aa10fa333eb2325c2ca97da33aa2"
        "84cda81b0.scope"
    )
    ident = parse_cgroup_path(path)
    assert ident.pod_uid == "0b7632a2-a56e-4278-987a-22de18008dbe"
    assert ident.container_id == ""


def test_kubelet_log_link_names():
    cid = "b4d6d161c62525d726fa394b27df30e14f8ea5646313ada576b390de70cfc8cc"
    got = parse_kube_log_name(f"train-7b-0_llm_trainer-{cid}.log")
    assert got is not None
    assert got[0] == cid
    assert (got[1].pod, got[1].namespace, got[1].container) == ("train-7b-0", "llm", "trainer")
    assert parse_kube_log_name("not-a-log.txt") is None
    assert parse_kube_log_name(f"only_two-{cid}.log") is None


def test_service_names():
    assert service_name({"pod": "web-7d4b9c8f6d-x2k9q", "namespace": "shop"}) == "shop/web"
    assert service_name({"pod": "train-job-x2k9q", "namespace": "ml"}) == "ml/train-job"
    assert service_name({"pod": "worker-3", "namespace": "ml"}) == "ml/worker-3"
    assert service_name({"job_name": "llama-pretrain", "comm": "python"}) == "llama-pretrain"
    assert service_name({"comm": "python3"}) == "python3"


def test_label_values_are_cut_on_a_character_boundary():
    value = "é" * 600  # 1,200 bytes of UTF-8
    cut = clip(value)
    assert len(cut.encode()) <= 1024 and cut == "é" * 512


def _spawn(env: dict[str, str], preexec=None) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"],
        env={"PATH": os.environ.get("PATH", "/usr/bin"), **env},
        preexec_fn=preexec,
    )
    # Popen returns once the child exists, maybe before its exec: until then /proc shows
    # the parent's command and environment
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if b"time.sleep(30)" in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
                break
        except OSError:
            pass
        time.sleep(0.01)
    return proc


def test_labels_of_a_process_of_this_machine():
    env = {
        "SLURM_JOB_ID": "8812",
        "SLURM_JOB_USER": "alice",
        "SLURM_JOB_NAME": "llama-pretrain",
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "16",
        "AIFLAME_TEAM": "search",
        "AIFLAME_MODEL": "llama-7b",
        "COST_CENTER": "cc-42",
    }
    proc = _spawn(env)
    try:
        rules = LabelRules()
        rules.env["cost_center"] = "COST_CENTER"
        rules.static["cluster"] = "lab"
        info = Identities(host="node-1", rules=rules).of(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert info is not None
    labels = info.labels
    assert labels["host"] == "node-1"
    assert labels["pid"] == str(proc.pid)
    assert labels["comm"].startswith("python")
    # the command line stays on the host: never a label by default, nor in the series
    assert info.command.endswith("import time; time.sleep(30)") and "command" not in labels
    assert info.series == {k: v for k, v in labels.items() if k != "pid"}
    assert labels["user"] == __import__("pwd").getpwuid(os.getuid()).pw_name
    assert (labels["job_id"], labels["job_user"], labels["job_name"]) == (
        "8812",
        "alice",
        "llama-pretrain",
    )
    assert (labels["rank"], labels["local_rank"], labels["world_size"]) == ("3", "1", "16")
    assert (labels["team"], labels["model"], labels["cost_center"]) == (
        "search",
        "llama-7b",
        "cc-42",
    )
    assert labels["cluster"] == "lab"
    assert labels["service_name"] == "llama-pretrain"


def test_what_the_sampler_just_read_is_not_read_again(tmp_path):
    """The CPU sampler reads a new process's start time, name and arguments at its first
    sample; its identity, read moments later, takes them as they are (the rest, such as
    its environment, it reads itself). Under another /proc it reads everything itself."""
    proc = _spawn({"SLURM_JOB_ID": "8812"})
    try:
        started = start_time(proc.pid)
        assert started is not None
        seen = FirstLook(time.monotonic(), started, "seen-name", ["trainer", "--lr", "3"])
        info = Identities(host="h").of(proc.pid, seen)
        (tmp_path / "proc").symlink_to("/proc")
        other = Identities(host="h", proc=str(tmp_path / "proc")).of(proc.pid, seen)
    finally:
        proc.kill()
        proc.wait()
    assert info is not None and other is not None
    assert (info.labels["comm"], info.command, info.started) == (
        "seen-name",
        "trainer --lr 3",
        started,
    )
    assert info.labels["job_id"] == "8812"  # its environment read as before
    assert other.labels["comm"].startswith("python") and other.command.endswith("time.sleep(30)")


def test_every_process_of_this_machine_is_named():
    """Whatever /proc holds (kernel threads, other users' processes, zombies): labels, never
    an exception."""
    ids = Identities(host="h")
    seen = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            labels = ids.labels(int(name))
            assert labels["host"] == "h" and labels["service_name"]
            seen += 1
    assert seen > 5


LAYOUTS = {
    "containerd-systemd": (
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice/"
        "cri-containerd-{cid}.scope",
        "containerd",
    ),
    "crio-systemd": (
        "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid_}.slice/"
        "crio-{cid}.scope",
        "cri-o",
    ),
    "containerd-cgroupfs": ("kubepods/burstable/pod{uid}/{cid}", ""),
    "docker-systemd": ("system.slice/docker-{cid}.scope", "docker"),
}


def _kubelet(pods: dict):
    """A stand-in kubelet on loopback answering /pods with ``pods`` (a PodList)."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            body = json.dumps(pods if self.path == "/pods" else {}).encode()
            self.send_response(200 if self.path == "/pods" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def cgroup2(tmp_path):
    root = cgroup2_root()
    if os.geteuid() != 0 or root is None or not os.access(root, os.W_OK):
        pytest.skip("needs root and a writable cgroup2 hierarchy")
    made: list[Path] = []
    yield Path(root), made
    for d in sorted(made, key=lambda p: len(p.parts), reverse=True):
        for _ in range(50):
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)  # its last process is still leaving


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_process_in_a_real_cgroup_of_each_layout(cgroup2, tmp_path, layout):
    root, made = cgroup2
    uid = "4c9f1974-5c46-44c2-b42f-3bbf0e98eef9"
    cid = "ab" * 32
    rel, runtime = LAYOUTS[layout]
    rel = (
        "aiflame-test-"
        + str(os.getpid())
        + "/"
        + rel.format(uid=uid, uid_=uid.replace("-", "_"), cid=cid)
    )
    path = root
    for part in rel.split("/"):
        path = path / part
        if not path.exists():
            path.mkdir()
            made.append(path)
    logs = tmp_path / "containers"
    logs.mkdir()
    (logs / f"train-7b-0_llm_trainer-{cid}.log").symlink_to("/dev/null")
    proc = _spawn({"HOSTNAME": "train-7b-0"})
    kubelet = _kubelet(
        {"items": [{"metadata": {"uid": uid, "labels": {"app.example/team": "search"}}}]}
    )
    try:
        (path / "cgroup.procs").write_text(str(proc.pid))
        text = Path(f"/proc/{proc.pid}/cgroup").read_text()
        assert f"0::/{rel}" in text  # as the kernel writes it
        rules = LabelRules(pod_labels={"team": "app.example/team"})
        pods = KubeletPods(f"http://127.0.0.1:{kubelet.server_address[1]}")
        ids = Identities(host="h", rules=rules, kube_logs=KubeLogIndex(str(logs)), pod_labels=pods)
        labels = ids.labels(proc.pid)
    finally:
        proc.kill()
        proc.wait()
        kubelet.shutdown()
        kubelet.server_close()
    assert labels["container_id"] == cid
    if layout != "docker-systemd":
        assert labels["pod_uid"] == uid
        assert (labels["namespace"], labels["pod"], labels["container"]) == (
            "llm",
            "train-7b-0",
            "trainer",
        )
        assert labels["service_name"] == "llm/train-7b-0"
        assert labels["team"] == "search"  # a pod label, from the kubelet
    assert parse_cgroup_path("/" + rel).runtime == runtime


def test_an_exec_in_the_same_process_is_read_again():
    """A shell that execs the real program keeps its PID and start time: its labels must
    be those of the program, not of the shell seen first."""
    proc = subprocess.Popen(
        ["/bin/sh", "-c", 'read _; exec "$0" -c "import time; time.sleep(30)"', sys.executable],
        stdin=subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", "/usr/bin"), "AIFLAME_TEAM": "search"},
    )
    exe = sys.executable.encode()
    try:
        ids = Identities(host="node-1")
        first = ids.labels(proc.pid)
        assert first["comm"] == "sh"
        assert proc.stdin is not None
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the shell's own command line names it too
            if Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(b"%s\0-c" % exe):
                break
            time.sleep(0.01)
        then = ids.labels(proc.pid)
        command = ids.of(proc.pid).command  # type: ignore[union-attr]
    finally:
        proc.kill()
        proc.wait()
    assert then["comm"].startswith("python")
    assert command.endswith("import time; time.sleep(30)")
    assert then["team"] == "search"


def test_a_process_gone_before_it_was_read_joins_its_programs_series():
    """Short-lived processes of one program make one series, whether or not the agent read
    them before they exited; a program run in a job is not guessed at."""
    ids = Identities(host="node-1")
    proc = _spawn({})
    try:
        read = ids.of(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert read is not None and read.series is not None and "user" in read.series
    # another process of the same name that exited before it could be read
    assert ids.gone_series(read.name) == read.series
    # a name never read: its name is all there is
    assert ids.gone_series("never-read") == {
        "host": "node-1",
        "service_name": "never-read",
        "comm": "never-read",
    }
    in_a_job = _spawn({"SLURM_JOB_ID": "77", "SLURM_JOB_NAME": "train"})
    try:
        job = ids.of(in_a_job.pid)
    finally:
        in_a_job.kill()
        in_a_job.wait()
    assert job is not None and job.series is not None and job.series["job_id"] == "77"
    # the last process of that name ran in a job: a gone one is not put there
    assert ids.gone_series(job.name) == {
        "host": "node-1",
        "service_name": job.name,
        "comm": job.name,
    }
