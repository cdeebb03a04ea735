"""Regenerate aiflame/proto/pyroscope from Grafana Pyroscope's public API protos and pprof's
``profile.proto``.

Usage (see src/aiflame/proto/pyroscope/README.md for the pinned versions):

    python -m venv /tmp/gen && /tmp/gen/bin/pip install grpcio-tools==1.62.3
    /tmp/gen/bin/python tools/gen_pyroscope_protos.py PYROSCOPE_CHECKOUT PPROF_CHECKOUT

The protos are Apache-2.0 (``api/LICENSE`` of the Pyroscope repository, pprof's ``LICENSE``).
``google/v1/profile.proto`` is the one definition of the pprof messages in aiflame (its
importer, its exporters and the server use it): Pyroscope's copy of pprof's
``proto/profile.proto`` with the proto package renamed ``google.v1``, made here from pprof's
own file, so that it has pprof's newer fields too (``Profile.doc_url``, ``Line.column``,
which Pyroscope keeps as unknown fields); field numbers are pprof's, so the bytes are any
pprof's. Two edits are made to Pyroscope's files, neither of which changes a message or its
wire/JSON form:

- the ``gnostic.openapi`` annotations (documentation for Pyroscope's OpenAPI generator) are
  removed, so the gnostic protos are not needed;
- imports are re-rooted under ``aiflame/proto/pyroscope/``: the generated Python module of
  ``types/v1/types.proto`` would otherwise be imported as ``types.v1``, which is the standard
  library's ``types`` module. Proto package names (``push.v1``, ``querier.v1``, ``types.v1``,
  ``google.v1``, ``settings.v1``) are unchanged, so RPC paths such as
  ``/push.v1.PusherService/Push`` and message full names are Pyroscope's own.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

FILES = [
    "types/v1/types.proto",
    "push/v1/push.proto",
    "querier/v1/querier.proto",
    "settings/v1/setting.proto",
    "settings/v1/recording_rules.proto",
]
PPROF = "google/v1/profile.proto"  # made from pprof's proto/profile.proto
ROOT = Path(__file__).resolve().parents[1] / "src"
PREFIX = "aiflame/proto/pyroscope"


def strip_annotations(text: str) -> str:
    """Drop gnostic imports, ``option (gnostic...)`` statements and field options."""
    text = re.sub(r'^import "gnostic/[^"]+";\n', "", text, flags=re.M)
    # `option (gnostic.openapi.v3.operation).tags = "...";` and multi-line option blocks
    text = re.sub(r"^\s*option \(gnostic\.[^;]*?;\n", "", text, flags=re.M | re.S)
    # field options: `[(gnostic.openapi.v3.property).example = {yaml: "..."}]`
    quoted = r'"(?:[^"\\]|\\.)*"'
    text = re.sub(rf"\s*\[\(gnostic\.(?:[^\]\"]|{quoted})*\]", "", text, flags=re.S)
    # rpc blocks left empty by the removal: `rpc X(A) returns (B) {\n  }` -> `{}`
    text = re.sub(r"\{\s*\}", "{}", text)
    return text


def reroot_imports(text: str) -> str:
    return re.sub(
        r'^import "((?:types|push|querier|google|settings)/v1/[^"]+)";',
        rf'import "{PREFIX}/\1";',
        text,
        flags=re.M,
    )


def pprof_as_google_v1(text: str) -> str:
    """pprof's profile.proto under the proto package Pyroscope's API imports it by."""
    text, n = re.subn(r"^package perftools\.profiles;$", "package google.v1;", text, flags=re.M)
    if n != 1:
        raise SystemExit("pprof's profile.proto: no 'package perftools.profiles;' line")
    return text


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    api = Path(argv[0]) / "api"
    out = ROOT / PREFIX
    pprof = (Path(argv[1]) / "proto" / "profile.proto").read_text(encoding="utf-8")
    (out / PPROF).parent.mkdir(parents=True, exist_ok=True)
    (out / PPROF).write_text(pprof_as_google_v1(pprof), encoding="utf-8")
    for rel in FILES:
        text = (api / rel).read_text(encoding="utf-8")
        text = reroot_imports(strip_annotations(text))
        if "gnostic" in text:
            raise SystemExit(f"{rel}: a gnostic annotation survived the edit")
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    protos = [f"{PREFIX}/{rel}" for rel in [*FILES, PPROF]]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{ROOT}",
            f"--python_out={ROOT}",
            f"--pyi_out={ROOT}",
            *protos,
        ],
        check=True,
    )
    # packages for the generated modules
    packages = {(out / rel).parent for rel in [*FILES, PPROF]}
    for directory in packages | {package.parent for package in packages}:
        (directory / "__init__.py").touch()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
