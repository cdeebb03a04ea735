"""What leaves the host: no command line in any label by default, credentials redacted from
it where an operator asks for it (on command lines recorded from real programs,
tests/data/cmdlines), series keyed by the workload rather than the process, Prometheus-style
relabel rules and process filters."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aiflame.agent.config import ConfigError, load_file, validate
from aiflame.agent.identity import Identities, LabelRules
from aiflame.agent.redact import REDACTED, redact_command, secret_name, single_line
from aiflame.agent.relabel import ProcessMatcher, RelabelRule, RuleError, relabel, selected

DATA = Path(__file__).resolve().parents[1] / "data" / "cmdlines"
RECORDED = json.loads((DATA / "cmdlines.json").read_text())


@pytest.mark.parametrize("case", RECORDED, ids=[c["program"] for c in RECORDED])
def test_recorded_command_lines_lose_their_credentials_only(case):
    text = redact_command(case["argv"])
    for secret in case["secrets"]:
        assert secret not in text, text
    for word in case["kept"]:
        assert word in text, text  # the rest of the command line is still there
    if any(s in " ".join(case["argv"]) for s in case["secrets"]):
        assert REDACTED in text
    assert "\n" not in text and text == text.strip()


def test_the_recordings_hold_what_the_programs_were_given():
    """The data is what the kernel showed, curl's own blanking included."""
    curl = RECORDED[0]
    assert curl["argv"][2] == "-u" and not curl["argv"][3].strip()  # curl hid it itself
    shown = [s for c in RECORDED for s in c["secrets"] if s in " ".join(c["argv"])]
    assert len(shown) >= 12


def test_redaction_rules():
    assert redact_command(["x", "--api-key", "k", "--key-file=/etc/k"]) == (
        f"x --api-key {REDACTED} --key-file={REDACTED}"
    )
    assert redact_command(["x", "--token", "--verbose"]) == "x --token --verbose"
    assert redact_command(["x", "--password=", "-v"]) == "x --password= -v"
    assert redact_command(["curl", "--user=bob:pw", "u"]) == f"curl --user=bob:{REDACTED} u"
    assert redact_command(["a\nb", "c\td\x1b[31m"]) == "a b c d [31m"
    for name in ("--db-password", "MY_SECRET", "-Dssl.keyStorePassword", "requirepass",
                 "apiKey", "--hf_token", "AWS_SECRET_ACCESS_KEY"):  # fmt: skip
        assert secret_name(name), name
    for name in ("--port", "--epochs", "--user", "-Xmx4g", "--compass", "--bypass-cache"):
        assert not secret_name(name), name
    assert single_line(" x\r\ny ") == "x y"


def _spawn(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", *args],
        env={"PATH": os.environ.get("PATH", "/usr/bin"), **(env or {})},
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # until its exec: before, /proc shows the parent
        if b"time.sleep(30)" in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
            break
        time.sleep(0.01)
    return proc


def test_a_password_on_the_command_line_never_becomes_a_label():
    proc = _spawn("--db-user", "app", "--db-password=hunter2")
    try:
        default = Identities(host="h").of(proc.pid)
        opted = Identities(host="h", rules=LabelRules(command=True)).of(proc.pid)
        rules = LabelRules(relabel=[RelabelRule.from_config(
            {"action": "replace", "source_labels": ["__meta_process_commandline"],
             "target_label": "cmd"})])  # fmt: skip
        relabeled = Identities(host="h", rules=rules).of(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert default is not None and opted is not None and relabeled is not None
    assert "hunter2" in default.command  # kept on the host, for the process filters alone
    for info in (default, opted, relabeled):
        assert all("hunter2" not in v for v in info.labels.values()), info.labels
        assert info.series is not None and "pid" not in info.series
    assert "command" not in default.labels
    assert opted.labels["command"].endswith(f"--db-user app --db-password={REDACTED}")
    assert relabeled.labels["cmd"].endswith(f"--db-password={REDACTED}")
    assert not any(k.startswith("__") for k in relabeled.labels)


def test_series_follow_workloads_not_processes():
    """Twelve processes of three workloads: three series (a series per process, with pid
    as a series label, only where configured)."""
    procs = [_spawn(f"--shard={i}", env={"AIFLAME_TEAM": team}) for i in range(4)
             for team in ("search", "ads", "infra")]  # fmt: skip
    try:
        ids = Identities(host="h")
        per_pid = Identities(host="h", rules=LabelRules(pid=True))
        infos = [ids.of(p.pid) for p in procs]
        pid_infos = [per_pid.of(p.pid) for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    series = {tuple(sorted(i.series.items())) for i in infos if i and i.series}
    with_pid = {tuple(sorted(i.series.items())) for i in pid_infos if i and i.series}
    assert len(series) == 3 and len(with_pid) == 12
    assert {dict(s)["team"] for s in series} == {"search", "ads", "infra"}


def test_otel_service_name_names_the_service():
    proc = _spawn(env={"OTEL_SERVICE_NAME": "checkout"})
    try:
        info = Identities(host="h").of(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert info is not None and info.labels["service_name"] == "checkout"


def _rules(*tables: dict) -> list[RelabelRule]:
    return [RelabelRule.from_config(t) for t in tables]


def test_relabel_actions_as_prometheus():
    labels = {"host": "h", "namespace": "ml", "pod": "train-0", "comm": "python3",
              "container_id": "abc", "pod_uid": "u-1", "team": ""}  # fmt: skip
    out, kept = relabel(labels, _rules(
        {"action": "replace", "source_labels": ["team", "namespace"], "regex": ";(.+)",
         "target_label": "team", "replacement": "ns-$1"},
        {"action": "labeldrop", "regex": "container_id|pod_uid"},
        {"action": "labelmap", "regex": "(pod)", "replacement": "k8s_${1}"},
        {"action": "replace", "source_labels": ["comm"], "regex": "python.*",
         "target_label": "runtime", "replacement": "python"},
    ))  # fmt: skip
    assert kept
    assert out == {"host": "h", "namespace": "ml", "pod": "train-0", "k8s_pod": "train-0",
                   "comm": "python3", "team": "ns-ml", "runtime": "python"}  # fmt: skip
    drop = {"action": "drop", "source_labels": ["comm"], "regex": "python.*"}
    assert relabel(labels, _rules(drop))[1] is False
    keep = {"action": "keep", "source_labels": ["namespace"], "regex": "prod|staging"}
    assert relabel(labels, _rules(keep))[1] is False
    assert relabel(labels, _rules({**keep, "regex": "m."}))[1] is True
    kept_only, _ = relabel(labels, _rules({"action": "labelkeep", "regex": "host|pod"}))
    assert kept_only == {"host": "h", "pod": "train-0"}
    # the regex is anchored at both ends; an empty replacement removes the label
    replace = {"action": "replace", "source_labels": ["comm"], "target_label": "comm"}
    out, _ = relabel(labels, _rules({**replace, "regex": "python"}))
    assert out["comm"] == "python3"
    out, _ = relabel(labels, _rules({**replace, "regex": "python3", "replacement": ""}))
    assert "comm" not in out


def test_process_filters():
    inc = [ProcessMatcher.from_config({"namespace": "ml|research"})]
    exc = [ProcessMatcher.from_config({"comm": "sshd", "user": "root"})]
    assert selected({"namespace": "ml", "comm": "python3"}, inc, exc)
    assert not selected({"namespace": "web", "comm": "python3"}, inc, exc)
    assert not selected({"namespace": "ml", "comm": "sshd", "user": "root"}, inc, exc)
    assert selected({"namespace": "ml", "comm": "sshd", "user": "bob"}, inc, exc)
    assert selected({}, [], [])


def test_excluded_and_dropped_processes_have_no_series():
    proc = _spawn("--role=sidecar")
    sidecars = {"__meta_process_commandline": ".*--role=sidecar.*"}
    try:
        excluded = Identities(
            host="h", rules=LabelRules(exclude=[ProcessMatcher.from_config(sidecars)])
        ).of(proc.pid)
        drop = {"action": "drop", "source_labels": ["comm"], "regex": "python.*"}
        dropped = Identities(host="h", rules=LabelRules(relabel=_rules(drop))).of(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert excluded is not None and excluded.series is None
    assert dropped is not None and dropped.series is None
    assert dropped.labels["comm"].startswith("python")  # still named, for on-demand traces


def test_the_rules_in_the_configuration(tmp_path):
    conf = tmp_path / "agent.toml"
    conf.write_text(
        """
[labels]
pid = true
command = true
[[relabel]]
action = "drop"
source_labels = ["comm"]
regex = "sh|bash"
[[relabel]]
action = "labeldrop"
regex = "container_id"
[processes]
exclude = [{ comm = "sshd" }, { user = "nobody", comm = "cron" }]
"""
    )
    rules = validate(load_file(str(conf))).label_rules()
    assert rules.pid and rules.command and len(rules.relabel) == 2 and len(rules.exclude) == 2
    assert rules.relabel[0].action == "drop" and not rules.include
    for bad, why in (
        ('[[relabel]]\naction = "explode"\n', "relabel rule 1: action 'explode'"),
        ('[[relabel]]\naction = "replace"\nsource_labels = ["a"]\n', "needs a target_label"),
        ('[[relabel]]\naction = "drop"\n', "drop needs source_labels"),
        ('[[relabel]]\naction = "keep"\nsource_labels = ["a"]\nregex = "("\n', "regex '('"),
        ("[[relabel]]\nsurprise = 1\n", "unknown key 'surprise'"),
        ("[processes]\nexclude = [{}]\n", "an empty table matches every process"),
        ('[processes]\ninclude = ["x"]\n', "expected a list of tables"),
        ('relabel = "x"\n', "relabel must be an array of tables"),
        (
            '[[relabel]]\naction = "replace"\nsource_labels = ["a"]\ntarget_label = "a-b"\n',
            "not a valid label name",
        ),
        ('dcgm_metrics = "twice"\n', "dcgm_metrics 'twice'"),
    ):
        conf.write_text(bad)
        with pytest.raises(ConfigError, match=re.escape(why)):
            validate(load_file(str(conf)))
    with pytest.raises(RuleError):
        ProcessMatcher.from_config({"comm": 3})
