"""Reference launch stacks of GPU activity computed by Meta's HTA (holistictraceanalysis).

For each GPU activity (kernel, memcpy, memset, MTIA device event) of the traces in a
directory, HTA's ``CallGraph`` gives the launching runtime call (``index_correlation``)
and its path to the root of the CPU call stack. This prints one folded line per distinct
``root;...;runtime call;-;activity`` with the number of activities and their summed
duration in HTA's microseconds:

    python benchmarks/hta_reference.py TRACE_DIR > expected.tsv   # needs holistictraceanalysis

tests/data/kineto/hta_expected/ holds its output for some of the test traces; the tests
compare aiflame's ``kernel-count`` and ``gpu-time`` views with it (HTA is not needed there).
"""

from __future__ import annotations

import collections
import logging
import sys
import warnings


def main(trace_dir: str) -> None:
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    from hta.common.call_stack import CallGraph
    from hta.common.trace import Trace

    trace = Trace(trace_dir=trace_dir)
    trace.parse_traces()
    graph = CallGraph(trace)
    names = trace.symbol_table.get_sym_table()
    count: collections.Counter[str] = collections.Counter()
    micros: collections.Counter[str] = collections.Counter()
    for rank in trace.get_ranks():
        df = trace.get_trace(rank)
        cat = df["cat"].map(lambda i: names[i])
        gpu = df[cat.isin(["kernel", "gpu_memcpy", "gpu_memset", "mtia_ccp_events"])]
        for _, row in gpu.iterrows():
            launch = row["index_correlation"]
            if launch is None or launch <= 0:
                path = ["[launch not in trace]"]
            else:
                key = (rank, df.loc[launch, "pid"], df.loc[launch, "tid"])
                stack = graph.call_stacks[graph.mapping.loc[key]["csg_index"]]
                nodes = stack.get_path_to_root(launch)
                path = [names[df.loc[n, "name"]] for n in nodes if n >= 0][::-1]
            line = ";".join([*path, "-", names[row["name"]]])
            count[line] += 1
            micros[line] += int(row["dur"])
    for line in sorted(count):
        print(f"{line}\t{count[line]}\t{micros[line]}")


if __name__ == "__main__":
    main(sys.argv[1])
