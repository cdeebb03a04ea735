"""Records the command lines of real programs given credentials the ways their users give
them, as the kernel shows them to every process of the host (``/proc/PID/cmdline``):
``python3 record.py`` rewrites ``cmdlines.json``. Each program is started for real against
a local listener that accepts connections and never answers (so it stays blocked, its
command line readable), or given work that lasts; its arguments are read while it runs,
then it is killed. ``secrets`` are the values the recording put in; ``kept`` are words of
the same command line that are no secret."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OUT = Path(__file__).with_name("cmdlines.json")
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0cmFpbmVyIn0.c2lnbmF0dXJlLW9mLXRoZS10b2tlbg"


def cases(port: int, tmp: str) -> list[dict]:
    url = f"127.0.0.1:{port}"
    return [
        {
            "program": "curl",
            "secrets": ["S3cr3tPassw0rd", JWT],
            "kept": [f"http://{url}/metrics"],
            "argv": [
                "curl",
                "-sS",
                "-u",
                "alice:S3cr3tPassw0rd",
                "-H",
                f"Authorization: Bearer {JWT}",
                f"http://{url}/metrics",
            ],
        },
        {
            "program": "curl",
            "secrets": ["hunter2"],
            "kept": ["--max-time", "30"],
            "argv": ["curl", "--max-time", "30", f"https://ops:hunter2@{url}/api"],
        },
        {
            "program": "git",
            "secrets": ["ghp_4Qx7Ld2Vn9Rb1Kc8Tz5Wm3Hy6Jf0Ps1Ea2Ug"],
            "kept": ["clone", "--depth"],
            "argv": [
                "git",
                "clone",
                "--depth",
                "1",
                f"http://bob:ghp_4Qx7Ld2Vn9Rb1Kc8Tz5Wm3Hy6Jf0Ps1Ea2Ug@{url}/team/model.git",
                os.path.join(tmp, "clone"),
            ],
        },
        {
            "program": "wget",
            "secrets": ["W1ldWestPass"],
            "kept": ["--user=carol", "--tries=1"],
            "argv": [
                "wget",
                "-q",
                "--tries=1",
                "--user=carol",
                "--password=W1ldWestPass",
                f"http://{url}/data.tar",
            ],
        },
        {
            "program": "psql",
            "secrets": ["pg_Secret_42"],
            "kept": ["-c", "select"],
            "argv": ["psql", f"postgresql://mlflow:pg_Secret_42@{url}/mlflow", "-c", "select 1"],
        },
        {
            "program": "openssl",
            "secrets": ["opensslPhrase"],
            "kept": ["enc", "-aes-256-cbc"],
            "argv": [
                "openssl",
                "enc",
                "-aes-256-cbc",
                "-pbkdf2",
                "-pass",
                "pass:opensslPhrase",
                "-in",
                "/dev/zero",
                "-out",
                "/dev/null",
            ],
        },
        {
            "program": "python3",
            "secrets": ["hunter2", "hf_kLmNoPqRsTuVwXyZaBcDeFgHiJkLmN"],
            "kept": ["--db-user", "app", "--port", "8080"],
            "argv": [
                sys.executable,
                "-c",
                "import time; time.sleep(60)",
                "--db-user",
                "app",
                "--db-password=hunter2",
                "--hf-token",
                "hf_kLmNoPqRsTuVwXyZaBcDeFgHiJkLmN",
                "--port",
                "8080",
            ],
        },
        {
            "program": "python3",
            "secrets": ["wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"],
            "kept": ["train.py", "--epochs", "3"],
            "argv": [
                sys.executable,
                "-c",
                "import time; time.sleep(60)",
                "train.py",
                "--epochs",
                "3",
                "--aws-secret-access-key",
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            ],
        },
        {
            "program": "sh",
            "secrets": ["pgPass9", "s3Secret8"],
            "kept": ["sleep", "60"],
            "argv": [
                "sh",
                "-c",
                "PGPASSWORD=pgPass9 AWS_SECRET_ACCESS_KEY=s3Secret8 sleep 60; true",
            ],
        },
        {
            "program": "bash exec -a",
            "secrets": ["RedisPass7", "tok-123-abc"],
            "kept": ["worker:", "--queue", "default"],
            "argv": [
                "bash",
                "-c",
                'exec -a "worker: --queue default --redis-password=RedisPass7 token tok-123-abc" '
                "sleep 60",
            ],
        },
        {
            "program": "java-style python3",
            "secrets": ["changeit"],
            "kept": ["-Xmx4g", "-Dlog.level=info"],
            "argv": [
                sys.executable,
                "-c",
                "import time; time.sleep(60)",
                "-Xmx4g",
                "-Djavax.net.ssl.keyStorePassword=changeit",
                "-Dlog.level=info",
            ],
        },
        {
            "program": "python3",
            "secrets": [],
            "kept": ["--nproc-per-node=8", "--lr", "3e-4", "--data=/mnt/shards/train-*.tar"],
            "argv": [
                sys.executable,
                "-c",
                "import time; time.sleep(60)",
                "--nproc-per-node=8",
                "--lr",
                "3e-4",
                "--data=/mnt/shards/train-*.tar",
            ],
        },
    ]


def read_argv(pid: int, expect: str, timeout: float = 10.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            raw = b""
        args = [a.decode() for a in raw.split(b"\0") if a]
        if args and expect in " ".join(args):
            return args
        time.sleep(0.02)
    raise SystemExit(f"PID {pid}: its command line never showed {expect!r}")


def main() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)  # accepted by the kernel, never answered
    port = listener.getsockname()[1]
    tmp = tempfile.mkdtemp()
    out = []
    try:
        for case in cases(port, tmp):
            argv = case["argv"]
            if not shutil.which(argv[0]):
                raise SystemExit(f"{argv[0]} is not installed")
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            try:
                expect = case["kept"][0]
                seen = read_argv(proc.pid, expect)
                time.sleep(0.3)
                if proc.poll() is not None:
                    raise SystemExit(f"{argv[0]} exited before it was recorded")
                seen = read_argv(proc.pid, expect)
            finally:
                proc.kill()
                proc.wait()
            if seen[0] == sys.executable:
                seen[0] = "python3"  # not this machine's path
            out.append(
                {
                    "program": case["program"],
                    "argv": seen,
                    "secrets": case["secrets"],
                    "kept": case["kept"],
                }
            )
    finally:
        listener.close()
        shutil.rmtree(tmp, ignore_errors=True)
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{len(out)} command lines recorded in {OUT}")


if __name__ == "__main__":
    main()
