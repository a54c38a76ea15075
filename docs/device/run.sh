#!/usr/bin/env bash
# One prepared run of dse's speed checks on a lent GPU machine (issue: measure the search on a GPU).
# Run from the repository root on the device, with the wheels of dse and of the packages the
# device image lacks in .whl/ (see docs/device/README.md). Every step has its own time limit so
# that one slow step cannot take the others' figures with it. Figures go to $OUT (at most 8 files).
# Usage: bash docs/device/run.sh TAG   (TAG names the JSON files: before, after, ...)
tag=${1:-run}
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH || exit 1
cd /tmp  # the installed package, not the checkout, is what runs
log=$OUT/${tag}_log.txt
step() {  # step SECONDS NAME COMMAND...: run it with a limit, its output to the log, its wall time after it
  local lim=$1 name=$2; shift 2
  local t0=$(date +%s%N)
  echo "=== $name: $*" >>"$log"
  timeout "$lim" "$@" >>"$log.tmp" 2>&1; local rc=$?
  cat "$log.tmp" >>"$log"; rm -f "$log.tmp"
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  echo "=== $name: rc $rc, $((ms / 1000)).$(printf %03d $((ms % 1000))) s wall" | tee -a "$log"
}
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv;
  python3 -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, jax.devices())";
  nproc; grep -m1 'model name' /proc/cpuinfo; } >"$log" 2>&1
cat "$log"
# the kernels (the host path's program and, on an accelerator, the device stream's), whole searches,
# enumeration, latency, many groups, the reference case, rows and the study
step 170 bench_gpu bash -c "dse bench profile=lbnl --study --json > $OUT/${tag}_bench_gpu.jsonl"
# CPU against GPU, row by row (float64 within 1e-14, the same optima), and the reduced searches
step 50 validate dse validate devices profile=lbnl
# a sweep of 1e9 evaluations (SUMMA, NVS 64, a 1,760-system HBM capacity x bandwidth grid), whole
sweep="study=rss1e9 strategy=summa profile=lbnl system.nvs_size=64 n_gpus=pow2:4:16384 +search.grid.hbm_capacity=linspace:80:1000:160 +search.grid.hbm_bandwidth=linspace:1000:16000:11 output.show=0 output.write=false search.max_candidates=6e9"
step 40 sweep_1e9 dse $sweep
# the whole seed-001 study as a process, on the GPU and on the host CPU of the same machine
step 25 study_gpu dse study --quiet
step 25 study_cpu env JAX_PLATFORMS=cpu dse study --quiet
# the same sweep through the host path on the GPU, for the comparison
step 40 sweep_1e9_host env DSE_DEVICE_STREAM=off dse $sweep
cut -c1-200 $OUT/${tag}_bench_gpu.jsonl
