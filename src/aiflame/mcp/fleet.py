"""The tools over an ``aiflame server``: GPU hours by label, fleet findings, a workload's
profile over a time range, the labels and profile types to ask about.

Each is one request to the server's own API (docs/server.md) with a token of the ``read``
scope; the answer keeps the server's numbers, cut to a model's size, and says which server,
endpoint, query and time range they are (the range as the server resolved it).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import ssl
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from aiflame.analysis.hotspots import top_functions
from aiflame.errors import AiflameError
from aiflame.mcp import bounds

TIMEOUT_S = 120.0
MAX_PROFILE_BYTES = 256 << 20
CPU_TYPE = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"


class FleetTools:
    def __init__(self, url: str, token: str = "", tenant: str = "", ca_file: str = "") -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise AiflameError(f"--server {url!r}: expected http(s)://HOST[:PORT]")
        self.url = urllib.parse.urlunsplit(parts._replace(netloc=parts.hostname + (
            f":{parts.port}" if parts.port else ""), path=parts.path.rstrip("/")))  # fmt: skip
        self.token, self.tenant = token, tenant
        self.context = ssl.create_default_context(cafile=ca_file or None)

    # -- the one request ------------------------------------------------------------------------
    def get(self, path: str, params: dict[str, Any]) -> bytes:
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v not in (None, "")})
        req = urllib.request.Request(f"{self.url}{path}?{query}")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        if self.tenant:
            req.add_header("X-Scope-OrgID", self.tenant)
        try:
            ctx = self.context if self.url.startswith("https:") else None
            with urllib.request.urlopen(req, timeout=TIMEOUT_S, context=ctx) as resp:
                data: bytes = resp.read(MAX_PROFILE_BYTES + 1)
        except urllib.error.HTTPError as e:
            raise AiflameError(
                f"the server answered {e.code} to {path}: {_error_text(e)}"
            ) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise AiflameError(f"cannot reach the server at {self.url}: {reason}") from None
        if len(data) > MAX_PROFILE_BYTES:
            raise AiflameError(f"the server's answer to {path} is larger than 256 MiB")
        return data

    def get_json(self, path: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            out = json.loads(self.get(path, params))
        except ValueError:
            raise AiflameError(f"the server's answer to {path} is not JSON") from None
        return out if isinstance(out, dict) else {"value": out}

    def _provenance(self, path: str, params: dict[str, Any], answered: dict[str, Any], **more: Any):  # type: ignore[no-untyped-def]
        rng = {}
        if isinstance(answered.get("from"), int | float) and isinstance(
            answered.get("to"), int | float
        ):
            rng = {
                "from_ms": answered["from"],
                "to_ms": answered["to"],
                "from": _iso_ms(answered["from"]),
                "to": _iso_ms(answered["to"]),
            }
        return bounds.provenance(
            server=self.url,
            tenant=self.tenant or "anonymous",
            endpoint=path,
            query={k: v for k, v in params.items() if v not in (None, "")},
            range=rng or {"from": params.get("from"), "to": params.get("to")},
            **more,
        )

    # -- tools ----------------------------------------------------------------------------------
    def gpu_hours(
        self,
        group_by: str = "job_id",
        start: str = "now-7d",
        end: str = "now",
        selector: str = "",
        limit: int | None = None,
    ) -> dict[str, Any]:
        n = bounds.rows(limit)
        params = {"group_by": group_by, "from": start, "to": end, "selector": selector, "top": n}
        a = self.get_json("/api/v1/attribution", params)
        groups = [_group(g) for g in a.get("groups", [])[:n]]
        answer = {
            "group_by": a.get("group_by", group_by),
            "fleet": _group(a["fleet"]) if a.get("fleet") else None,
            "groups": groups,
            "groups_total": a.get("groups_total"),
            "provenance": self._provenance(
                "/api/v1/attribution",
                params,
                a,
                metric={"name": "allocated, busy and useful GPU time", "unit": "GPU hours"},
                step_s=a.get("step_s"),
                resolution=a.get("resolution"),
            ),
        }
        return bounds.bounded(answer)

    def fleet_findings(
        self,
        start: str = "now-7d",
        end: str = "now",
        workload_label: str = "job_id",
        selector: str = "",
        limit: int | None = None,
    ) -> dict[str, Any]:
        n = bounds.rows(limit)
        params = {"from": start, "to": end, "workload_label": workload_label, "selector": selector}
        f = self.get_json("/api/v1/findings", params)
        rules = []
        for r in f.get("rules", [])[:n]:
            rules.append(
                {
                    "rule": r.get("rule"),
                    "severity": r.get("severity"),
                    "title": bounds.text(str(r.get("title", ""))),
                    "fix": bounds.text(str(r.get("fix", ""))),
                    "gpu_hours": r.get("gpu_hours"),
                    "workloads": [
                        {
                            k: w.get(k)
                            for k in ("key", "gpu_hours", "share", "basis", "traces", "trace_id")
                        }
                        for w in r.get("workloads", [])[:5]
                    ],
                    "workloads_total": len(r.get("workloads", [])),
                }
            )
        answer = {
            "workload_label": f.get("workload_label", workload_label),
            "rules": rules,
            "rules_total": len(f.get("rules", [])),
            "provenance": self._provenance(
                "/api/v1/findings",
                params,
                f,
                metric={"name": "GPU time the finding costs", "unit": "GPU hours"},
                samples={
                    "traces": sum(
                        int(w.get("traces") or 0)
                        for r in f.get("rules", [])
                        for w in r.get("workloads", [])
                    )
                },
            ),
        }
        return bounds.bounded(answer)

    def workload_profile(
        self,
        selector: str,
        profile_type: str = CPU_TYPE,
        start: str = "now-1h",
        end: str = "now",
        by: str = "self",
        limit: int | None = None,
    ) -> dict[str, Any]:
        from aiflame.sources import load

        n = bounds.rows(limit)
        params = {
            "profile_type": profile_type,
            "selector": selector,
            "from": start,
            "to": end,
            "format": "pprof",
        }
        data = self.get("/api/v1/flamegraph", params)
        with tempfile.TemporaryDirectory(prefix="aiflame-mcp-") as tmp:
            path = os.path.join(tmp, "workload.pb.gz")
            with open(path, "wb") as f:
                f.write(data)
            profile = load(path, "pprof")
        if profile.is_empty():
            raise AiflameError(f"no {profile_type} samples match {selector or '{}'} in that range")
        h = top_functions(profile, None, by, n)
        table = h.to_json()
        answer = {
            "functions": [
                {**row, "name": bounds.name(str(row["name"]))} for row in table["functions"]
            ],
            "functions_with_value": table["functions_with_value"],
            "total": h.total,
            "by": by,
            "provenance": self._provenance(
                "/api/v1/flamegraph",
                params,
                {},
                profile_type=profile_type,
                metric={"name": h.metric, "unit": h.unit},
                samples=h.samples,
                querier="querier.v1.QuerierService/SelectMergeProfile (the same merge)",
            ),
        }
        return bounds.bounded(answer)

    def labels(
        self, name: str = "", selector: str = "", start: str = "now-24h", end: str = "now"
    ) -> dict[str, Any]:
        params = {"name": name, "selector": selector, "from": start, "to": end}
        got = self.get_json("/api/v1/labels", params)
        values = got.get("values") or got.get("names") or []
        answer: dict[str, Any] = {
            ("values" if name else "names"): [
                bounds.name(str(v)) for v in values[: bounds.MAX_ROWS]
            ],
            "count": len(values),
            "provenance": self._provenance("/api/v1/labels", params, {}),
        }
        if not name:
            answer["profile_types"] = got.get("profile_types", [])
        return bounds.bounded(answer)


def _group(g: dict[str, Any]) -> dict[str, Any]:
    metrics = {}
    for k, m in (g.get("metrics") or {}).items():
        if isinstance(m, dict):
            metrics[k] = {"value": m.get("value"), "basis": bounds.text(str(m.get("basis", "")))}
    keep = ("key", "allocated_gpu_hours", "busy_gpu_hours", "useful_gpu_hours", "share")
    return {**{k: g.get(k) for k in keep}, "metrics": metrics}


def _iso_ms(ms: float) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="seconds")


def _error_text(e: urllib.error.HTTPError) -> str:
    try:
        body = e.read(4096)
        doc = json.loads(body)
        return str(doc.get("error") or doc.get("message") or body[:300])
    except (ValueError, OSError, AttributeError):
        return str(e.reason)
