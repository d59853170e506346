#!/usr/bin/env bash
# One device-tool call that checks and measures everything GPU-side, shortest first; each stage is
# time-boxed so a failure or a slow stage cannot eat the call. Outputs land in $OUT (or /tmp/out).
#   device run:  bash bench/gpu_session.sh  [stages...]   stages: tests kernels sweep bench trace
#   (kernels: only the test files that compile kernels -- ops, megakernel, models, GPU-only)
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=. NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
COMMIT=${FASTDECODE_COMMIT:-unknown}
stages=${*:-tests sweep bench trace}
for s in $stages; do
  case $s in
    tests) timeout 300 python3 -m pytest -q tests --ignore=tests/test_smollm2.py \
             -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" | tail -15 ;;
    kernels) timeout ${KERNELS_TIMEOUT:-300} python3 -m pytest -q tests/test_gpu.py tests/test_ptx.py \
             tests/test_megakernel.py tests/test_ops.py tests/test_models.py -p no:cacheprovider 2>&1 \
             | tee "$OUT/pytest_kernels.log" | tail -15 ;;
    sweep) timeout ${SWEEP_TIMEOUT:-420} python3 bench/sweep_mega.py ${SWEEP_ARGS:---model 1b} 2>&1 | grep -v -i warn \
             | tee -a "$OUT/sweep_mega.log" | tail -20 ;;
    bench) FASTDECODE_COMMIT=$COMMIT timeout ${BENCH_TIMEOUT:-480} python3 bench/bench_decode.py \
             --models ${BENCH_MODELS:-1b,8b} --peers ${BENCH_PEERS:-fastdecode,mega,hf_eager,hf_compile} \
             --first-call 2>&1 | grep -v -i "warn\|cudagraph" | tail -16
           cp bench/RESULTS.md bench/results/*.csv bench/results/*.png "$OUT/" ;;
    trace) for m in ${TRACE_MODELS:-1b}; do timeout 150 python3 - $m <<'PY' 2>&1 | tail -12
import os, sys, torch
sys.path.insert(0, "bench")
import fastdecode
from fastdecode import trace as tr
from shapes import random_model
key = sys.argv[1]
name, m = random_model(key)
fm = fastdecode.from_hf(m, max_seq_len=256, mode="mega")
fm(torch.randint(0, 1000, (1, 32), device="cuda"))
fm.runtime.trace_decode(2)
sched, trace = fm.runtime.trace_decode(1)
evs = tr.events(sched, trace)
out = os.environ.get("OUT", "/tmp/out")
tr.chrome_json(evs, f"{out}/trace_{key}.json")
tr.timeline_png(evs, f"{out}/trace_{key}.png", f"{name} decode step")
span = max(e["end"] for e in evs) - min(e["start"] for e in evs)
print(f"{name}: step span {span / 1e3:.1f} us over {sched.n_programs} programs")
for op, r in tr.breakdown(evs).items():
    print(f"{op:8s} tasks {r['tasks']:5d}  wait {r['wait'] / 1e3:9.1f} us  work {r['work'] / 1e3:9.1f} us")
PY
    done ;;
  esac
done
