#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (PyTorch with CUDA; root or profiling allowed): record
# benchmarks/gpu/pc_sampling_workload.py (a cuBLAS GEMM, an elementwise kernel, a Triton
# kernel) with `aiflame record --gpu-pc-sampling`, in both CUPTI collection modes, check that
# the per-PC stall reasons add up to CUPTI's totals, and keep everything in $OUT as fixtures
# to commit (tests/data/gpu_instructions/recorded/). One run, well under 10 minutes:
#   OUT=/tmp/aiflame-pcs timeout 600 bash benchmarks/gpu/pc_sampling_check.sh
set -u
OUT=${OUT:-/tmp/aiflame-pcs}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
WORK=benchmarks/gpu/pc_sampling_workload.py
{
  nvidia-smi -L 2>&1 | head -2; nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1
  python -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.is_available())"
  python -c "import triton; print('triton', triton.__version__)" 2>&1
  python - <<'PY'
import sys
sys.path.insert(0, "src/aiflame/collectors/torch_bootstrap")
import aiflame_cupti_pcsampling as c
print("libcupti:", c._libcupti()[2])
PY
} > "$OUT/env.txt" 2>&1

for mode in serialized continuous; do
  # serialized: the PyTorch window gives launch stacks (join by correlation id);
  # continuous: no window, kernels keep running concurrently.
  window="--gpu-window 5"; [ "$mode" = continuous ] && window="--gpu off"
  dir="$OUT/$mode"; mkdir -p "$dir"
  # shellcheck disable=SC2086
  AIFLAME_KEEP_RECORD_DIR="$dir/raw" timeout 240 python -m aiflame record --gpu-pc-sampling \
    $window -o "$dir/profile.pb.gz" -- python "$WORK" > "$dir/record.log" 2>&1
  echo "record $mode: $?" >> "$OUT/env.txt"
  python -m aiflame info "$dir/profile.pb.gz" > "$dir/info.txt" 2>&1
  python -m aiflame convert "$dir/profile.pb.gz" -m gpu-samples -o "$dir/gpu-samples.folded" 2>>"$dir/record.log"
  python -m aiflame convert "$dir/profile.pb.gz" -o "$dir/profile.html" 2>>"$dir/record.log"
  python -m aiflame analyze "$dir/profile.pb.gz" > "$dir/analyze.txt" 2>&1
done

# The counting rule on what CUPTI wrote: per buffer, totalSamples must equal the sum of the
# per-PC reasons without the *_not_issued ones; and the importer's total must equal both.
python - "$OUT" <<'PY' > "$OUT/check.txt" 2>&1
import glob, sys
from aiflame.sources import load
from aiflame.sources.gpu_samples.cupti_pc_file import read_dump
bad = 0
for dat in sorted(glob.glob(sys.argv[1] + "/*/raw/gpupc-*.dat")):
    bufs = read_dump(open(dat, "rb").read())
    names = bufs[0].reason_names
    for i, b in enumerate(bufs):
        counted = sum(n for r in b.records for idx, n in r.stalls
                      if not names.get(idx, "").endswith("_not_issued"))
        ok = counted == b.total_samples
        bad += not ok
        print(dat, "buffer", i, "records", len(b.records), "total", b.total_samples,
              "reasons", counted, "dropped", b.dropped_samples, "OK" if ok else "MISMATCH")
    p = load(dat)
    print(dat, "importer total", p.totals()[0], "CUPTI total", sum(b.total_samples for b in bufs))
print("mismatches:", bad)
PY
cat "$OUT/check.txt"
ls -laR "$OUT" | head -80
