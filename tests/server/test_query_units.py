"""Pure parts of the queries: workload identities, Pyroscope's truncation on random trees,
the heatmap's buckets and slots, span ids as Pyroscope stores them, the labels of profile
types, the render timeline's step."""

from __future__ import annotations

import heapq
import random

import numpy as np
import pytest

from aiflame.server.errors import BadRequest
from aiflame.server.ingest.profiles import span_id_text, span_id_value
from aiflame.server.query import heatmap
from aiflame.server.query.flame import build_tree, levels, min_value, truncate
from aiflame.server.query.identity import identity
from aiflame.server.query.type_labels import selector_sql, type_labels
from aiflame.server.routes_drilldown import parse_query, timeline_step_s


def test_identities_most_specific_first():
    job = identity({"job_id": "8812", "pod": "p", "host": "h", "pid": "1", "rank": "3"})
    assert (job.basis, job.key, job.match) == ("job_id", "8812", (("job_id", "8812"),))
    pod = identity({"namespace": "serving", "pod": "infer-7c9-x2", "service_name": "serving/infer"})
    assert (pod.basis, pod.key) == ("pod", "serving/infer-7c9-x2")
    assert pod.matches({"namespace": "serving", "pod": "infer-7c9-x2", "container": "c"})
    assert pod.matches({"pod": "infer-7c9-x2"})  # a workload without its namespace
    assert not pod.matches({"namespace": "other", "pod": "infer-7c9-x2"})
    assert pod.link == ("pod", "infer-7c9-x2")
    svc = identity({"service_name": "checkout", "comm": "python3", "host": "h"})
    assert (svc.basis, svc.key) == ("service_name", "checkout")
    # a service named after the command is no service: the process's workload on its host
    nb = identity({"service_name": "python3", "comm": "python3", "host": "ws-1", "user": "alice",
                   "pid": "9100", "gpu_model": "x"})  # fmt: skip
    assert (nb.basis, nb.key) == ("process", "ws-1/python3")
    assert dict(nb.match) == {"service_name": "python3", "host": "ws-1", "user": "alice"}
    assert nb.matches(
        {"service_name": "python3", "host": "ws-1", "user": "alice", "gpu_model": "H"}
    )
    assert not nb.matches({"service_name": "python3", "host": "ws-2", "user": "alice"})
    assert nb.link is None
    assert identity({"job_id": "", "pod": "p"}).basis == "pod"  # empty is absent


def _pyroscope_min_value(totals: list[int], max_nodes: int) -> int:
    """pkg/model/tree.go minValue, written again from its description."""
    if max_nodes < 1 or len(totals) <= max_nodes:
        return 0
    return heapq.nlargest(max_nodes, totals)[-1]


@pytest.mark.parametrize("seed", range(8))
def test_truncation_is_pyroscopes_on_random_trees(seed):
    rng = random.Random(seed)
    names = [f"f{i}" for i in range(12)]
    stacks = [[rng.choice(names) for _ in range(rng.randint(1, 6))] for _ in range(200)]
    values = np.array([[rng.choice([1, 2, 3, 5, 8, 100])] for _ in stacks], dtype=np.int64)
    all_names = ["total", *names]
    flat = np.array([all_names.index(n) for s in stacks for n in s])
    tree = build_tree(flat, np.array([len(s) for s in stacks]), values, all_names)
    for max_nodes in (1, 5, 16, 50, 10_000):
        cut = truncate(tree, max_nodes)
        floor = _pyroscope_min_value(tree.total[1:, 0].tolist(), max_nodes)
        assert floor == min_value(tree.total[1:, 0], max_nodes)
        kept = [i for i in range(1, cut.parent.size) if cut.name[i] != cut.folded_name]
        # every node at or above the floor is drawn, none below it; "other" holds the rest
        want = sum(1 for t in tree.total[1:, 0] if t >= floor) if floor else tree.parent.size - 1
        assert len(kept) == want
        assert int(cut.total[0, 0]) == int(values.sum())
        for i in range(1, cut.parent.size):  # a node's total is its self and its children's
            kids = cut.total[cut.parent == i, 0].sum()
            assert cut.total[i, 0] == cut.self_value[i, 0] + kids
        # drawn after their siblings, each level's x offsets cover the parent's width
        assert sum(levels(cut)[1][1::4]) <= int(cut.total[0, 0])


def test_heatmap_buckets_and_slots_as_pyroscope():
    mins, maxs = heatmap._value_buckets(10, 31)  # size 1.05: truncated bounds
    assert mins.tolist()[:4] == [10, 11, 12, 13] and maxs[-1] == 31
    b = heatmap._bucket_of(np.array([10, 11, 30, 31, 9]), mins, maxs)
    assert b.tolist() == [0, 1, 19, 19, -1]  # the max in the last bucket, below min nowhere
    # slots (start-step, start], (start, start+step], ...: a time on an edge is its slot
    times = np.array([1000, 1001, 1999, 2000, 2001, 9000])
    assert heatmap.slot_times(times, 1000, 3500, 1000).tolist() == [
        1000,
        2000,
        2000,
        2000,
        3000,
        4000,
    ]
    pts = [
        heatmap.Point(1500, 10, "a", 0, {"pod": "x"}),
        heatmap.Point(1500, 30, "b", 0, {"pod": "y"}),
        heatmap.Point(1600, 20, "c", 0, {"pod": "x"}),
    ]
    [s] = heatmap.heatmap(pts, 1000, 3000, 1000, [], exemplars=True)
    [slot] = s.slots
    assert slot.time_ms == 2000 and sum(slot.counts) == 3 and len(slot.y_min) == 20
    assert [e.profile_id for e in slot.exemplars] == ["a", "c", "b"]  # one per cell
    by_pod = heatmap.heatmap(pts, 1000, 3000, 1000, ["pod"], exemplars=True, limit=1)
    assert [s.labels for s in by_pod] == [{"pod": "x"}]  # the series of the most points
    assert "pod" not in by_pod[0].slots[0].exemplars[0].labels


def test_span_ids_round_trip_as_pyroscope_stores_them():
    text = "00f067aa0ba902b7"
    value = span_id_value(text)
    assert value == int.from_bytes(bytes.fromhex(text), "little") and span_id_text(value) == text
    assert span_id_value("xyz") == 0 and span_id_value("00f067aa0ba902b") == 0


def test_profile_type_labels_and_selectors():
    pt = "memory:inuse_space:bytes:space:bytes"
    assert type_labels(pt) == {
        "__profile_type__": pt, "__type__": "inuse_space", "__unit__": "bytes",
        "__period_type__": "space", "__period_unit__": "bytes",
    }  # fmt: skip
    params: dict[str, object] = {}
    sql = selector_sql(f'{{__profile_type__="{pt}", __unit__=~"b.*", pod="x"}}', params)
    assert "profile_type = {pt" in sql and "splitByChar(':', profile_type)[3]" in sql
    assert pt in params.values() and "^(?:b.*)$" in params.values()
    got, selector = parse_query(f'{pt}{{service_name="a",}}', "query")
    assert got.id == pt and selector == '{"service_name"="a"}'
    for bad in ("", '{pod="x"}', "process_cpu{}"):
        with pytest.raises(BadRequest):
            parse_query(bad, "query")


def test_the_render_timelines_step_is_pyroscopes():
    hour, day = 3_600_000, 86_400_000
    assert timeline_step_s(0, hour) == 15  # at least 15 s
    assert timeline_step_s(0, 24 * hour) == 60  # 57.6 s -> 1 minute
    assert timeline_step_s(0, 7 * day) == 300  # 403 s -> 5 minutes
    assert timeline_step_s(0, 30 * day) == 1800
