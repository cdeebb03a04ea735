#!/usr/bin/env bash
# On a machine with a GPU (root, a BTF kernel): record benchmarks/gpu/small_cuda_model.py with
# the eBPF collector (CPU samples + CUDA API probes) and with `record --memory`, and keep the
# profiles, pages and logs as fixtures in $OUT. Run from the repository root:
#   OUT=/tmp/aiflame-gpu bash benchmarks/gpu/cuda_probes_check.sh
set -u
OUT=${OUT:-/tmp/aiflame-gpu}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
MODEL=benchmarks/gpu/small_cuda_model.py
{
  uname -r; nvidia-smi -L 2>&1 | head -2
  python -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.is_available())"
  python -c "from aiflame.collectors.ebpf.support import unavailable_reason as r; print('ebpf:', r() or 'ok')"
  grep -E 'libcuda|libcudart' /proc/self/maps || true
} > "$OUT/env.txt" 2>&1
python -m aiflame record --ebpf -o "$OUT/cuda_run.pb.gz" -- python "$MODEL" > "$OUT/record.log" 2>&1
echo "record --ebpf: $?" >> "$OUT/env.txt"
python -m aiflame record --memory -o "$OUT/cuda_memory.pb.gz" -- python "$MODEL" > "$OUT/memory.log" 2>&1
echo "record --memory: $?" >> "$OUT/env.txt"
for f in cuda_run cuda_memory; do
  [ -s "$OUT/$f.pb.gz" ] || continue
  python -m aiflame info "$OUT/$f.pb.gz" > "$OUT/$f.info.txt" 2>&1
done
if [ -s "$OUT/cuda_run.pb.gz" ]; then
  for m in launch-count sync-time copy-bytes alloc-bytes api-calls; do
    python -m aiflame convert "$OUT/cuda_run.pb.gz" -m "$m" -o "$OUT/cuda_run.$m.folded" 2>>"$OUT/env.txt"
  done
  python -m aiflame convert "$OUT/cuda_run.pb.gz" -o "$OUT/cuda_run.html"
fi
if [ -s "$OUT/cuda_memory.pb.gz" ]; then
  python -m aiflame memory "$OUT/cuda_memory.pb.gz" -o "$OUT/cuda_memory.html" 2>>"$OUT/env.txt"
  python -m aiflame convert "$OUT/cuda_memory.pb.gz" -m peak-bytes -o "$OUT/cuda_memory.peak.folded"
fi
ls -la "$OUT"
