set -u; export PYTHONUNBUFFERED=1 PYTHONPATH=.
timeout 170 python3 -m pytest -q tests/test_gpu.py -k "carveout or mega_matches_ops" -p no:cacheprovider 2>&1 | tail -3
Q=16384/4/4096/2/0/0/0/288; H=op_elems=8192:8192:8192:8192
timeout 240 python3 bench/sweep_mega.py --model qwen3-8b --new-tokens 256 --configs \
  $Q/3333,$Q/4444/$H/carveout=72,$Q/3333,$Q/4444/$H/carveout=72 --record 2>&1 | grep -v -i warn | tail -7
cp fastdecode/triton_kernels/tile_table.json $OUT/
FASTDECODE_COMMIT=2bda05e+carve timeout 170 python3 bench/bench_decode.py --models qwen3-8b --peers fastdecode,mega 2>&1 | grep -v -i "warn\|cudagraph" | tail -5
cp bench/RESULTS.md $OUT/
