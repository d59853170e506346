#!/usr/bin/env bash
# One device-tool call that checks and measures everything GPU-side, shortest first; each stage is
# time-boxed so a failure or a slow stage cannot eat the call. Outputs land in $OUT (or /tmp/out).
#   device run:  bash bench/gpu_session.sh  [stages...]
#   stages: tests kernels mkernels models shapes sweep bench trace tp variants first pdl ab exp gemvcfg
#           wsprobe prefill attn ncu lookup api rows launch mxfp4
#   (mxfp4: MXFP4 experts -- their GPU tests (exact decode, both kernels, the MXFP4 folder), the
#    experts' kernels at their defaults with and without --mxfp4 (sweep_moe.py), then
#    bench_decode on gpt-oss-20b: bf16 experts against random MXFP4 ones, MXFP4_PEERS (default
#    fastdecode,mxfp4,hf_compile), then where its MXFP4 decode step goes, kernel by kernel
#    (profile_step.py --mxfp4))
#   (launch: the megakernel's direct launch (triton_kernels/launch.py) -- its GPU tests, then
#    bench_lookup's steps with Triton's own launch (FASTDECODE_TRITON_LAUNCH=1) and the direct
#    one, LAUNCH_MODELS (default 1b): the kernel and launch-call columns say what moved)
#   (lookup: prompt lookup / assisted decoding's GPU tests (tests/test_lookup.py: greedy tokens
#    = HF's, sampling's distribution) and bench_lookup.py -- a step of 1-16 rows against a
#    plain decode step, LOOKUP_MODELS (default 1b,8b); then the 8B with a 1B draft)
#   (attn: bench/sweep_attention.py -- the attention's tiles on a long prompt's 2048-token pass
#    vs torch SDPA, ATTN_SHAPES at 0 and 6144 keys before, ATTN_VARIANTS or the script's;
#    config.prefill_attention_config)
#   (prefill: the long-prompt prefill's GPU test, then bench_prefill.py -- time to first token
#    at 512 / 2048 / 8192 prompt tokens, ops and mega vs HF eager)
#   (ab: the megakernel of an older commit against this tree in one run -- bench/sweep_mega.py
#    with AB_CONFIGS for each of AB_MODELS, in each of AB_TREES (default: ab_old, then here). Make
#    ab_old/ (ignored by git) with `git archive <sha> fastdecode bench | tar -x -C ab_old` and pass
#    carry=["ab_old"]; several: ab_old/<name>/ each, AB_TREES="ab_old/a ab_old/b . ")
#   (pdl: programmatic dependent launch of the ops-mode kernels -- its GPU tests, bench_ops with
#    ops+PDL / persist+PDL, bench_decode's ops peer without (FASTDECODE_PDL=0) and with it)
#   (variants: the PTX weight pieces and merge-in-attn -- their tests, bench_ops.py, sweep_mega
#    plain vs PTX vs merge-in-attn)
#   (first: a fresh process's first token, from_pretrained of a 1B checkpoint: cold, then 3 warm)
#   (tp: 2+ GPUs -- the all-reduce and tensor-parallel GPU tests (the virtual ranks on one GPU
#    among them), bench_all_reduce.py, bench_tp.py)
#   (kernels: the GPU-only test files; mkernels: the all-reduce's and the megakernel's; models:
#    the ops and model-family tests -- the test files that compile kernels, in three stages:
#    kernels and mkernels together ran past one call's 570 s box, 127 of their 134 tests done,
#    2026-12-03 session 33)
#   (gemvcfg: bench_ops.py on two large shapes (once short of 4 TB/s: over it since session 32's
#    timing), with a persist+PDL row per StreamConfig of GEMV_CONFIGS -- tile elements / warps /
#    max K / programs per SM)
#   (wsprobe: bench/probe_ws_stream.py on PROBE_MODELS -- a step's GEMV chain with the
#    megakernel's grid-wide waits, weights streamed by a warp-specialized TMA loader into a
#    shared-memory ring of 1-6 slots, against the read roofline, with and without the waits;
#    then issue 4's four large GEMV shapes alone through the same loader, cold L2)
#   (ncu: one megakernel launch of 16 decode steps under Nsight Compute per NCU_CONFIGS entry
#    (bench/ncu_mega.py; default: the 1B's table config, then its 64-key attention blocks) --
#    duration, DRAM throughput, carveout and the warp stall reasons, "no instruction" (the
#    instruction cache) among them: bench/RESULTS.md session 29's question, why a faster
#    attention tile slows the step)
#   (exp: default-off StreamConfig variants, each against the default in one sweep_mega run --
#    EXP_PARTS of: opelems (StreamConfig.op_elems per model), carve (StreamConfig.carveout),
#    l2pf (l2_prefetch_kb), keys (attn_in_qkv_keys 288 vs the rule's 192 on the 8B shapes over
#    256 tokens), ablock (the decode attention's key block, attn_block_s: the
#    rule against 32 and 64 over 256 tokens, the 8B's steps past 192 keys on the split-KV path),
#    kvpf (StreamConfig.kv_prefetch on KVPF_MODELS, default the 1B, over 256 tokens), kv64 (the
#    1B's 64-key attention blocks with kv_prefetch), qkvstg (the 1B's QKV tasks alone on
#    shared-memory stages), aout / aout8 (the attention body out of line, attn_outline: the 1B
#    with 32- / 64-key blocks; the 8B shapes))
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
COMMIT=${FASTDECODE_COMMIT:-unknown}
stages=${*:-tests sweep bench trace}
for s in $stages; do
  case $s in
    tests) timeout 300 python3 -m pytest -q tests --ignore=tests/test_smollm2.py \
             -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" | tail -15 ;;
    prefill) timeout 240 python3 -m pytest -q tests/test_gpu.py -k long_prompt -s -p no:cacheprovider \
               2>&1 | grep -i "rel err\|passed\|failed\|error" | tee "$OUT/pytest_prefill.log"
             FASTDECODE_COMMIT=$COMMIT timeout 300 python3 bench/bench_prefill.py \
               --models ${PREFILL_MODELS:-1b,8b} 2>&1 | grep -v -i warn | tail -14
             cp bench/RESULTS.md "$OUT/" ;;
    attn) timeout ${ATTN_TIMEOUT:-300} python3 bench/sweep_attention.py --shapes \
            ${ATTN_SHAPES:-1b,8b} ${ATTN_VARIANTS:+--variants $ATTN_VARIANTS} 2>&1 \
            | grep -v -i warn | tee "$OUT/sweep_attention.log" | tail -40 ;;
    kernels) timeout ${KERNELS_TIMEOUT:-560} python3 -m pytest -q tests/test_gpu.py tests/test_ptx.py \
             -p no:cacheprovider --durations 5 2>&1 | tee "$OUT/pytest_kernels.log" | tail -15 ;;
    mkernels) timeout ${KERNELS_TIMEOUT:-560} python3 -m pytest -q tests/test_all_reduce.py \
             tests/test_megakernel.py -p no:cacheprovider --durations 5 2>&1 \
             | tee "$OUT/pytest_mkernels.log" | tail -15 ;;
    # (MODELS_K: a pytest -k expression, e.g. the families no GPU has run yet: the whole set of
    # families' ops and mega tests no longer fits one call's box)
    models) timeout ${KERNELS_TIMEOUT:-560} python3 -m pytest -q tests/test_ops.py tests/test_models.py \
             ${MODELS_K:+-k "$MODELS_K"} -p no:cacheprovider 2>&1 | tee "$OUT/pytest_models.log" \
             | tail -15 ;;
    # the public API on the GPU (moves between devices / dtypes, memory checks, prefix cache,
    # prompt lookup) and the GGUF unpacking on the device. The image lacks the gguf package
    # (setup.py's demo extra, which CI installs): carry its wheel as .whl/ (device README;
    # 2026-12-04: 40 GGUF tests failed on the import without it); this stage installs it first
    api) [ -d .whl ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
           --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=$PYTHONPATH:/tmp/site
         timeout ${API_TIMEOUT:-400} python3 -m pytest -q tests/test_api.py tests/test_lookup.py \
           tests/test_loading.py -p no:cacheprovider --durations 5 2>&1 \
           | tee "$OUT/pytest_api.log" | tail -12 ;;
    # published shapes no other test runs, two layers each at their real sizes, against HF fp32
    shapes) timeout ${SHAPES_TIMEOUT:-560} python3 -m pytest -q -s tests/test_published_shapes.py \
             -p no:cacheprovider 2>&1 | grep -i "rel err\|passed\|failed\|error" \
             | tee "$OUT/pytest_shapes.log" | tail -40 ;;
    ab) for m in ${AB_MODELS:-1b 8b}; do
          for tree in ${AB_TREES:-ab_old .}; do (cd $tree && PYTHONPATH=. timeout ${AB_TIMEOUT:-150} python3 \
            bench/sweep_mega.py --model $m --new-tokens 160 --configs ${AB_CONFIGS:-16384/4/4096/2} \
            2>&1 | grep -v -i warn | tail -1 | sed "s|^|$m $tree |"); done; done ;;
    exp) C=16384/4/4096/2/0/0/0/-1  # sweep_mega config fields up to attn keys; then stages,
         sw() { (PYTHONPATH=. timeout ${EXP_TIMEOUT:-240} python3 bench/sweep_mega.py \
                 --model $1 --new-tokens ${NEW:-160} --configs $2 2>&1 | grep "x ops" | sed "s|^|$1 |"); }
         K=16384/4/4096/2/0/0/0  # ... then attn keys (-1: the 96 KB rule), stages
         B=16384/4/4096/2  # the defaults; then StreamConfig fields by name (ablock)
         for part in ${EXP_PARTS:-l2pf keys}; do case $part in  # then l2 prefetch KB
           # (the 1B with its table's kv_prefetch: the chain's K / V already in L2)
           l2pf) P=$B/kv_prefetch=1; L=$P/l2_prefetch_kb
                 NEW=256 sw 1b $P,$L=16,$L=32,$L=64,$P,$L=32
                 sw 8b $C/3333/0,$C/3333/64,$C/3333/128,$C/3333/0 ;;
           # the short-context schedule's reach with q/k norm (its QKNORM hop goes too): the
           # bench's 256 tokens reach 288 keys, past the rule's 192 at head_dim 128
           keys) for m in qwen3-8b 8b; do
                   NEW=256 sw $m $K/-1/3333,$K/288/3333,$K/-1/3333,$K/288/3333; done ;;
           # the 1B's QKV tasks (~48 KB of weights each, 32 KB of it requested before the
           # wait in the register stream) with shared-memory stages for QKV alone, at the
           # carveout that keeps two programs an SM: 2111 (64 KB a program, 72%) and 3111 (98
           # KB, 86%: the whole task's pieces requested before its wait); compile_check
           # --stages 3111 / 2111 --set kv_prefetch=1 carveout=72: spills 44 B (56 at 1111)
           qkvstg) P=$B/kv_prefetch=1; NEW=256 sw 1b $P,$P/0/0/0/-1/2111/carveout=72,$(
                     )$P/0/0/0/-1/3111/carveout=86,$P,$P/0/0/0/-1/2111/carveout=72 ;;
           # the K / V bulk L2 prefetch before the QKV_ATTN / ATTN waits (StreamConfig.kv_prefetch)
           kvpf) for m in ${KVPF_MODELS:-1b}; do NEW=256 sw $m \
                   $B,$B/kv_prefetch=1,$B,$B/kv_prefetch=1; done ;;
           # the 1B's 64-key attention blocks again, now that its K / V come from L2
           kv64) P=$B/kv_prefetch=1; NEW=256 sw 1b $P,$P/attn_block_s=64,$P,$P/attn_block_s=64 ;;
           # the attention body out of line (StreamConfig.attn_outline: compile_check spills
           # 1B 60 -> 4 B, 8B 88/116 -> 12/12, Qwen3-8B 48/56 -> 8/8), the 1B with its 32- and
           # 64-key blocks (its table entry: out of line, 64 keys)
           aout) P=$B/kv_prefetch=1; O=$P/attn_outline=1
                 NEW=256 sw 1b $P,$O/attn_block_s=64,$O,$P,$O/attn_block_s=64,$P/attn_block_s=64 ;;
           aout8) Q=$K/288/4444/carveout=72/op_elems=8192:8192:8192:8192
                 NEW=256 sw 8b $B,$B/attn_outline=1,$B,$B/attn_outline=1
                 NEW=256 sw qwen3-8b $Q,$Q/attn_outline=1,$Q,$Q/attn_outline=1 ;;
           ablock) for m in 1b 8b qwen3-8b; do NEW=256 sw $m \
                     $B,$B/attn_block_s=32,$B/attn_block_s=64,$B,$B/attn_block_s=32,$B/attn_block_s=64
                   done ;;
           # the weight pieces as int32 words by plain loads (StreamConfig.words: a bf16 piece
           # is split into one register an element as it lands, and the stream loops' back
           # edges wait for it -- sm_90a SASS), against bf16 tiles and the PTX words; the 8B
           # shapes then take the register stream (words: stages 1)
           words) T=$B/kv_prefetch=1/attn_outline=1/attn_block_s=64  # the 1B's entry before words
                  NEW=256 sw 1b $T,$T/words=1,$T/ptx=1,$T,$T/words=1
                  NEW=256 sw 8b $B,$B/words=1,$B,$B/words=1 ;;
           # where the 1B's two decode schedules cross (level at 163 keys in session 46; 160
           # keys 1301.9 vs the rule's 1293.2 / 1288.0 in session 47, one run: its 1B entry again,
           # with the word pieces since)
           xover) T=$B/kv_prefetch=1/attn_outline=1/attn_block_s=64/words=1; A=$T/attn_in_qkv_keys
                  NEW=256 sw 1b $T,$A=160,$A=96,$T,$A=160,$A=96 ;;
           # each op's piece elements (StreamConfig.op_elems: QKV / o / gate|up / down), around
           # ops mode's per-shape bests; compile_check spills within the default's (1B 44/48 B)
           opelems) E=$B/op_elems; Q=$K/288  # Qwen3-8B as its table entry: 288 short keys
                    NEW=256 sw 1b $B,$E=16384:8192:8192:16384,$E=16384:8192:16384:16384,$(
                      )$E=16384:16384:8192:16384,$B
                    NEW=256 sw 8b $B,$E=16384:8192:16384:16384,$E=16384:16384:16384:8192,$(
                      )$E=16384:16384:16384:32768,$B
                    NEW=256 sw qwen3-8b $Q,$Q/op_elems=16384:8192:16384:16384,$(
                      )$Q/op_elems=16384:16384:16384:8192,$Q/op_elems=16384:16384:16384:32768,$Q ;;
           # the shared-memory carveout (StreamConfig.carveout, RESULTS.md session 20): the 1B's
           # deeper stages with L1 left (1144 / 1155 with 8192-element gate|up and down pieces:
           # 65.6 / 82 KB per program, 72% / 86% = 164 / 196 KB of shared memory per SM). A
           # compiled kernel keeps its carveout for the process: each stages variant's driver
           # default runs before its carveout. The 8B shapes (compile_check, 2026-12-02): stages
           # 3333 at 16384 elements 98.4 KB per program (the driver's 228 KB, ~28 KB of L1);
           # 8192-element pieces at 4444 71.7 KB (72%: 164 KB), at 5555 82 KB (86%: 196 KB; the
           # same 64 KB ahead of each wait as 3333)
           carve) G=op_elems=16384:16384:8192:8192; H=op_elems=8192:8192:8192:8192
                  NEW=256 sw 1b $B,$K/-1/1144/$G,$K/-1/1144/$G/carveout=72,$(
                    )$K/-1/1155/$G/carveout=86,$K/-1/2222/carveout=72,$B
                  for m in 8b qwen3-8b; do k=-1; [ $m = qwen3-8b ] && k=288
                    NEW=256 sw $m $K/$k/3333,$K/$k/5555/$H,$K/$k/5555/$H/carveout=86,$(
                      )$K/$k/4444/$H/carveout=72,$K/$k/3333; done ;;
         esac; done ;;
    wsprobe) for m in ${PROBE_MODELS:-1b 8b}; do timeout ${PROBE_TIMEOUT:-240} python3 \
               bench/probe_ws_stream.py --model $m ${PROBE_ARGS:-} 2>&1 | grep -v -i warn \
               | tee -a "$OUT/probe_ws.log" | tail -16; done
             timeout ${PROBE_TIMEOUT:-240} python3 bench/probe_ws_stream.py --gemv \
               ${PROBE_GEMV:-2048x16384,14336x4096,4096x28672,2048x128256} ${PROBE_ARGS:-} 2>&1 \
               | grep -v -i warn | tee -a "$OUT/probe_ws.log" | grep -A8 "best first" ;;
    gemvcfg) FASTDECODE_COMMIT=$COMMIT timeout ${OPS_TIMEOUT:-300} python3 bench/bench_ops.py \
           --shapes ${GEMV_SHAPES:-2048x16384,14336x4096} --configs ${GEMV_CONFIGS:-8192/4/4096/2,\
16384/8/4096/2,32768/8/4096/2,16384/4/4096/3,8192/4/4096/4,16384/4/4096/1,32768/8/4096/1,\
65536/8/4096/1} 2>&1 | grep -v -i warn | tail -6
         cp bench/RESULTS.md "$OUT/" ;;
    sweep) timeout ${SWEEP_TIMEOUT:-420} python3 bench/sweep_mega.py ${SWEEP_ARGS:---model 1b} 2>&1 | grep -v -i warn \
             | tee -a "$OUT/sweep_mega.log" | tail -20 ;;
    bench) touch /tmp/bench_start  # only this run's CSV / PNG go back (the device tool caps files)
           FASTDECODE_COMMIT=$COMMIT timeout ${BENCH_TIMEOUT:-480} python3 bench/bench_decode.py \
             --models ${BENCH_MODELS:-1b,8b} --peers ${BENCH_PEERS:-fastdecode,mega,hf_eager,hf_compile} \
             --first-call ${BENCH_ARGS:-} 2>&1 | grep -v -i "warn\|cudagraph" | tail -16
           cp bench/RESULTS.md "$OUT/"
           find bench/results -newer /tmp/bench_start -type f -exec cp {} "$OUT/" \; ;;
    variants) timeout ${PTX_TEST_TIMEOUT:-240} python3 -m pytest -q tests/test_ptx.py \
           tests/test_ops.py tests/test_gpu.py -k "ptx or PTX or merge_in_attn or norm_in_qkv" \
           -p no:cacheprovider 2>&1 | tee "$OUT/pytest_variants.log" | tail -6
         FASTDECODE_COMMIT=$COMMIT timeout ${OPS_TIMEOUT:-150} python3 bench/bench_ops.py 2>&1 \
           | grep -v -i warn | tail -10
         for m in ${PTX_MODELS:-1b 8b qwen3-8b}; do timeout ${PTX_SWEEP_TIMEOUT:-200} python3 \
           bench/sweep_mega.py --model $m --new-tokens 128 --configs \
           ${PTX_CONFIGS:-16384/4/4096/2,16384/4/4096/2/1,16384/4/4096/2/0/1,16384/4/4096/2/0/1/1} \
           2>&1 \
           | grep -v -i warn | tail -4; done
         cp bench/RESULTS.md "$OUT/" ;;
    pdl) timeout 200 python3 -m pytest -q tests/test_ptx.py tests/test_gpu.py -k "grid_wait or pdl" \
           -p no:cacheprovider 2>&1 | tee "$OUT/pytest_pdl.log" | tail -4
         FASTDECODE_COMMIT=$COMMIT timeout 150 python3 bench/bench_ops.py --shapes \
           2048x16384,14336x4096,2048x3072,8192x2048 2>&1 | grep -v -i warn \
           | tail -10
         for flag in 0 1; do FASTDECODE_PDL=$flag FASTDECODE_COMMIT=$COMMIT timeout 110 python3 \
           bench/bench_decode.py --models 1b,8b --peers fastdecode 2>&1 \
           | grep -v -i "warn\|cudagraph" | tail -4; done
         cp bench/RESULTS.md "$OUT/" ;;
    first) python3 -c "import sys; sys.path.insert(0, 'bench'); from bench_decode import \
             save_checkpoint; save_checkpoint('1b', '/tmp/ckpt_1b')" 2>&1 | grep -v -i warn | tail -2
           for i in 0 1 2 3; do TRITON_CACHE_DIR=/tmp/first_cache timeout 60 python3 \
             bench/first_call.py /tmp/ckpt_1b ${FIRST_MODE:-mega} 2>&1 | grep FIRST; done ;;
    # each config's whole report text in $OUT/ncu_<n>.txt, the lines that matter printed; the
    # first config's per-SASS-instruction stall samples (SourceCounters) in $OUT/ncu_sass_1.csv
    ncu) n=0; for c in ${NCU_CONFIGS:-16384/4/4096/2 16384/4/4096/2/attn_block_s=64}; do
           n=$((n + 1)); echo "== $c"; timeout ${NCU_TIMEOUT:-200} ncu --clock-control none \
             --profile-from-start off -k regex:megakernel --launch-count 1 \
             --section SpeedOfLight --section LaunchStats --section WarpStateStats \
             --section InstructionStats --section SourceCounters --print-details all \
             -f -o /tmp/ncu_$n python3 bench/ncu_mega.py --model ${NCU_MODEL:-1b} --config $c \
             > /dev/null 2>&1
           ncu --import /tmp/ncu_$n.ncu-rep --print-details all > "$OUT/ncu_$n.txt" 2>&1
           grep -i "duration\|dram throughput\|shared memory config\|stall\|warp cycles\|ipc" \
             "$OUT/ncu_$n.txt" | head -40
           [ $n = 1 ] && ncu --import /tmp/ncu_1.ncu-rep --page source --csv --print-source sass \
             > "$OUT/ncu_sass_1.csv" 2>&1; done ;;
    trace) for m in ${TRACE_MODELS:-1b}; do timeout 150 python3 bench/trace_step.py --model $m \
             ${TRACE_ARGS:-} 2>&1 | grep -v -i warn | tail -40; done ;;
    # the multi-row steps: their GPU tests first, where a step of 4 rows' time goes (a trace
    # per tile), then the multi-row tiles (config.MULTI_ROW_TILE; /kN: the o / down tiles in N
    # K parts, config.ROWS_KSPLIT; no /kN: config.rows_ksplit's rule) at ROWS_ROWS (2 and 16)
    rows) timeout 150 python3 -m pytest -q -s tests/test_gpu.py -k "rows_fall_back or k_parts" \
            -p no:cacheprovider 2>&1 | grep -i "rel err\|passed\|failed\|error" | tail -6
          timeout 150 python3 bench/trace_step.py --model 1b --prompt-len 160 --rows 4 \
            --rows-tiles ${TRACE_TILES:-32x256x4/k1,32x256x4} 2>&1 | grep -v -i warn \
            | grep -A20 "step span"
          FASTDECODE_COMMIT=$COMMIT timeout ${ROWS_TIMEOUT:-270} python3 bench/sweep_rows.py \
            --models ${ROWS_MODELS:-1b,8b} --rows ${ROWS_ROWS:-2,16} \
            --tiles ${ROWS_TILES:-32x256x4/k1,32x256x4} 2>&1 | grep -v -i warn \
            | grep -v "launch: host" | tail -32
          cp bench/RESULTS.md "$OUT/" ;;
    launch) timeout 150 python3 -m pytest -q tests/test_launch.py tests/test_gpu.py \
              -k "launch or rows_fall_back" -p no:cacheprovider 2>&1 | tail -3
            for direct in 0 1; do FASTDECODE_TRITON_LAUNCH=$((1 - direct)) FASTDECODE_COMMIT=$COMMIT \
              timeout 200 python3 bench/bench_lookup.py --models ${LAUNCH_MODELS:-1b} --rows 1,2,4 \
              --repeats 3 2>&1 | grep -v -i warn | tail -6 | sed "s|^|direct=$direct |"; done
            cp bench/RESULTS.md "$OUT/" ;;
    lookup) timeout 240 python3 -m pytest -q tests/test_lookup.py -p no:cacheprovider 2>&1 | tail -3
            FASTDECODE_COMMIT=$COMMIT timeout ${LOOKUP_TIMEOUT:-300} python3 bench/bench_lookup.py \
              --models ${LOOKUP_MODELS:-1b,8b} 2>&1 | grep -v -i warn | tail -22
            FASTDECODE_COMMIT=$COMMIT timeout ${LOOKUP_TIMEOUT:-300} python3 bench/bench_lookup.py \
              --models 8b --draft 1b --rows 3,5,9 2>&1 | grep -v -i warn | tail -8
            cp bench/RESULTS.md "$OUT/" ;;
    mxfp4) timeout 150 python3 -m pytest -q tests/test_moe.py tests/test_quant.py -k mxfp4 \
             -p no:cacheprovider 2>&1 | tail -3
           for f in --mxfp4 ""; do timeout 100 python3 bench/sweep_moe.py --models gpt-oss-20b $f \
             --gu none --down none 2>&1 | tail -2; done
           FASTDECODE_COMMIT=$COMMIT timeout ${BENCH_TIMEOUT:-480} python3 bench/bench_decode.py \
             --models gpt-oss-20b --peers ${MXFP4_PEERS:-fastdecode,mxfp4,hf_compile} 2>&1 \
             | grep -v -i "warn\|cudagraph" | tail -8
           timeout 240 python3 bench/profile_step.py --model gpt-oss-20b --mxfp4 2>&1 \
             | grep -v -i warn | tail -14
           cp bench/RESULTS.md "$OUT/" ;;
    tp) timeout ${TP_TEST_TIMEOUT:-240} python3 -m pytest -q tests/test_all_reduce.py tests/test_tp.py \
          -k "gpus or cuda or all_reduce or one_gpu" -p no:cacheprovider 2>&1 | tee "$OUT/pytest_tp.log" | tail -8
        timeout 120 python3 -m pytest -q tests/test_gpu.py -k second_gpu -p no:cacheprovider 2>&1 \
          | tail -3
        FASTDECODE_COMMIT=$COMMIT timeout 120 torchrun --nproc-per-node ${TP_GPUS:-2} \
          bench/bench_all_reduce.py 2>&1 | grep -v -i warn | tail -12
        FASTDECODE_COMMIT=$COMMIT timeout ${TP_BENCH_TIMEOUT:-300} torchrun --nproc-per-node \
          ${TP_GPUS:-2} bench/bench_tp.py ${TP_ARGS:-} 2>&1 | grep -v -i "warn\|cudagraph" | tail -30
        cp bench/RESULTS.md "$OUT/" ;;
  esac
done
