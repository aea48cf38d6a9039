#!/usr/bin/env bash
# The GPU bring-up in one command, for a bare H100/H200 machine (the device tool's, which has the
# CUDA toolkit, PyTorch and cmake/ninja but none of Debian's -dev packages): configure against the
# bundle of scripts/gpu_deps.sh (carried in .gpu/), build on every core, then
#   B. correctness: ctest -L cuda; compute-sanitizer memcheck/racecheck/synccheck over the CUDA op
#      tests; the NCCL group (test_comm_nccl); train --device cuda end to end, under `nanoddp run
#      --nproc_per_node 1`, stop + resume bitwise against a straight run, and sample; the same
#      straight run and stop + resume in fp16 (dynamic loss scaling);
#   C. speed: bench/gpu_bench.sh (nanoddp against PyTorch, depths 12 and 20 at seq 2048).
# Every stage writes its log to $OUT (or out/gpu-check); summary.txt lists each stage's exit
# status and seconds, and the script goes on after a failed stage so one call gives every answer.
#   here:       scripts/gpu_deps.sh
#   on the GPU: bash scripts/gpu_check.sh [B] [C]     (default: B C; carry .gpu)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${OUT:-$root/out/gpu-check}
build=${BUILD_DIR:-$root/build-gpu}
parts=${*:-B C}
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"

# stage NAME CMD...: runs CMD with its output in $out/NAME.log; records the exit status.
stage() {
  local name=$1; shift
  local t0=$SECONDS
  echo "== $name: $*" >&2
  "$@" > "$out/$name.log" 2>&1
  local rc=$?
  printf '%-28s rc=%-3s %5ss\n' "$name" "$rc" "$((SECONDS - t0))" | tee -a "$summary" >&2
  return $rc
}

# same_last_checkpoint RUN_A RUN_B: the newest checkpoints of two runs hold the same bytes in every
# .safetensors file (a straight run against a stopped and resumed one); fails on the first that differs.
same_last_checkpoint() {
  local a b f
  a=$(ls -d "$1"/checkpoints/step_* | tail -n1) && b=$(ls -d "$2"/checkpoints/step_* | tail -n1) || return 1
  echo "$a vs $b"
  for f in $(cd "$a" && ls *.safetensors); do
    cmp "$a/$f" "$b/$f" || return 1
    echo "$f identical"
  done
}

[ -d .gpu/deps ] || { echo "gpu_check.sh: .gpu/deps is missing: run scripts/gpu_deps.sh here and carry .gpu" >&2; exit 2; }

# NCCL comes with PyTorch as a wheel (nvidia-nccl-cu13): its folder holds include/ and lib/.
nccl_home=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
export NCCL_HOME=${NCCL_HOME:-$nccl_home}
[ -n "$NCCL_HOME" ] && export LD_LIBRARY_PATH="$NCCL_HOME/lib:${LD_LIBRARY_PATH:-}"

stage env bash -c 'nvidia-smi; nvcc --version; ${CXX:-c++} --version; cmake --version; python3 -c "import torch; print(\"torch\", torch.__version__, torch.version.cuda)"; echo NCCL_HOME=$NCCL_HOME; ls $NCCL_HOME/include $NCCL_HOME/lib; nproc; free -g'

gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
stage configure cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$root/.gpu/deps/usr" -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DNANODDP_CUDA=ON -DNANODDP_NCCL=ON -DNANODDP_GLOO=OFF -DNANODDP_MPI=OFF || { cat "$out/configure.log" >&2; exit 1; }
stage build cmake --build "$build" -j"$(nproc)" || { tail -n 40 "$out/build.log" >&2; exit 1; }
bin=$build/nanoddp
stage nanoddp_env "$bin" env --device cuda

if [[ " $parts " == *" B "* ]]; then
  stage ctest_cuda bash -c "cd '$build' && ctest -L cuda --output-on-failure --timeout 900"
  ops=$build/tests/ops/cuda/test_cuda_ops
  for tool in memcheck racecheck synccheck; do
    stage "sanitizer_$tool" timeout 540 compute-sanitizer --tool "$tool" --error-exitcode 3 "$ops" \
      --gtest_brief=1
  done
  data=.gpu/data
  work=${TMPDIR:-/tmp}/nanoddp-gpu-train  # checkpoints stay out of $OUT (too large, too deep)
  rm -rf "$work"; mkdir -p "$work"
  common=(--data "$data" --device cuda --depth 4 --max_seq_len 256 --device_batch_size 8
          --total_batch_size 4096 --num_iterations 40 --eval_every 20 --eval_tokens 16384 --save_every 20)
  stage train_cuda "$bin" train "${common[@]}" --out "$work/straight"
  stage train_cuda_stop "$bin" train "${common[@]}" --out "$work/resumed" --stop_at 20
  stage train_cuda_resume "$bin" train "${common[@]}" --out "$work/resumed" --resume latest
  stage resume_bitwise same_last_checkpoint "$work/straight" "$work/resumed"
  stage train_cuda_fp16 "$bin" train "${common[@]}" --dtype fp16 --out "$work/fp16_straight"
  stage train_cuda_fp16_stop "$bin" train "${common[@]}" --dtype fp16 --out "$work/fp16_resumed" --stop_at 20
  stage train_cuda_fp16_resume "$bin" train "${common[@]}" --dtype fp16 --out "$work/fp16_resumed" --resume latest
  stage resume_bitwise_fp16 same_last_checkpoint "$work/fp16_straight" "$work/fp16_resumed"
  stage run_nproc1 "$bin" run --standalone --nproc_per_node 1 train "${common[@]}" --out "$work/launched"
  stage sample_cuda "$bin" sample --checkpoint "$work/straight" --device cuda --prompt "The jury said" \
    --max_tokens 60
fi

if [[ " $parts " == *" C "* ]]; then
  stage gpu_bench env BUILD_DIR="$build" OUT_DIR="$out/bench" bash bench/gpu_bench.sh
  cp "$out/bench/results.jsonl" "$out/bench_results.jsonl" 2>/dev/null
fi

echo "== summary ($summary)" >&2
cat "$summary"
