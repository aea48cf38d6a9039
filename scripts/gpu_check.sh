#!/usr/bin/env bash
# The GPU bring-up, shaped to the device tool's calls: a command runs at most 10
# minutes, at most 8 files come back from $OUT, and the machine stays warm 30 s after a call before
# it is given back and the next call starts bare. On a bare H100/H200 (CUDA toolkit, PyTorch, cmake,
# ninja; none of Debian's -dev packages) it configures against the bundle of scripts/gpu_deps.sh
# (carried in .gpu/), builds only the targets the checks run, on every core, then the stages of the
# parts asked for:
#   B  correctness: ctest -L cuda (every op and the model against the CPU, training curves, bits
#      run to run, the NCCL group, the kernel emulation); compute-sanitizer memcheck, racecheck and
#      synccheck over the CUDA op tests; train --device cuda end to end, stopped and resumed
#      (checkpoint bytes equal to a straight run's) in bf16 and in fp16 (loss scaling), under
#      `nanoddp run --nproc_per_node 1`, and sample; sampling on the device (the kernel against
#      its CPU twin, generation on the GPU against the CPU, and `sample` in f32 on both devices
#      giving the same text);
#   C  speed: the NCCL allreduce table at world size 1 (bench_allreduce --device cuda), then
#      bench/gpu_bench.sh at depth 12 and at depth 20 (nanoddp against PyTorch with Muon stacked
#      by shape, FlashAttention-2 and cuDNN attention, and with Muon matrix by matrix), and their
#      table: MFU against the GPU's datasheet peak and against the measured GEMM peak, and each
#      run's timing-window spread;
#      recipe2026_d20 and recipe2026_d12: the same for nanochat's 2026 model and optimizer
#      (bench_train_gpu --recipe 2026 against the PyTorch twin, bench/torch_recipe2026_gpu_bench.py,
#      compiled, with FlexAttention's sliding-window mask or cuDNN's, the faster as the baseline),
#      their own table (bench_recipe2026.jsonl); fp8_d12: nanochat's --fp8 against bf16 (loss curves at
#      depth 12 within a stated bound, tokens/s at depth 20);
#   D  profile: bench_train_gpu --breakdown at depth 20 (each op's device time per step from CUDA
#      events; Nsight Systems does not run on the device machines), attention alone through each
#      of nanoddp's routes (our flash kernels, cuDNN deterministic and not) against PyTorch's
#      (bench_attention_gpu, bench/torch_attention_bench.py), the Hopper kernels' tests and their
#      forward and backward timings beside flash and cuDNN (stage hopper_attention), then Nsight Compute's
#      speed-of-light, occupancy, launch and memory sections for one launch of each hand-written
#      kernel that a depth-20 step spends time in.
# The stages run in the order a short lease wants them (B's tests and end-to-end runs, C at depth
# 20, D's breakdown, then fp16, the sanitizers, depth 12 and Nsight Compute). A call starts no stage
# its remaining budget (GPU_CHECK_SECONDS, default 540) cannot hold and cuts a stage that runs past
# it, so it always ends with its summary. Stages that passed are recorded in out/gpu-state: the same
# command again, on a machine still warm, goes on from the first stage not yet passed. A bare
# machine starts over. A build made here (scripts/gpu_deps.sh --prebuild, carried in .gpu) is used
# when its programs run there; otherwise the machine configures and builds on all its cores first.
# Back in $OUT: summary.txt (each stage's exit status and seconds, or why it did not run, over
# every call on this machine), gpu-check.log (this call's stage output, in order), bench.jsonl and
# bench_recipe2026.jsonl (the speed results). The last line says what is left.
#   here:        bash scripts/gpu_deps.sh [--prebuild]
#   on the GPU:  bash scripts/gpu_check.sh [B] [C] [D] [STAGE...]   (default: B C D; carry .gpu)
#                GPU_CHECK_FRESH=1 forgets the stages that passed (after a fix, say).
#   here, to check this script without a GPU: bash scripts/gpu_check.sh --dry-run
#                (the training stages on --device cpu; sanitizers, NCCL, speed, profile skipped), with
#                GPU_CHECK_CMAKE_ARGS="-DCMAKE_IGNORE_PREFIX_PATH=/usr;/" to hide Debian's packages
#                as the GPU machine lacks them
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${OUT:-$root/out/gpu-check}
build=${BUILD_DIR:-$root/build-gpu}
budget=${GPU_CHECK_SECONDS:-540}
deadline=$((SECONDS + budget))
# Kept between calls while the machine is warm (ignored outputs), apart from the build folder,
# which an unpacked prebuilt build replaces.
logs=${GPU_CHECK_STATE:-$root/out/gpu-state}
work=$logs/train  # checkpoints stay out of $OUT (too large, too deep)

dry=0
want=()
for a in "$@"; do
  case $a in
    --dry-run) dry=1 ;;
    B | C | D) want+=("$a") ;;
    -h | --help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    *) want+=("$a") ;;  # a stage name: run that stage (with configure and build), passed or not
  esac
done
[ ${#want[@]} -eq 0 ] && want=(B C D)
device=cuda
((dry)) && device=cpu

passed=$logs/passed-$device  # a dry run's stages (on the CPU) never count for the GPU's
mkdir -p "$out" "$logs"
[ -n "${GPU_CHECK_FRESH:-}" ] && rm -f "$passed"
touch "$passed"
log_all="$out/gpu-check.log"
: > "$log_all"
echo "== call at $(date -u +%FT%TZ): ${want[*]}$( ((dry)) && echo ' (dry run)'), budget ${budget}s" >> "$logs/summary.txt"

left=()    # stages this call did not get to
failed=()  # stages that ran and failed in this call
skipped=() # stages this kind of run cannot do (a dry run's GPU stages)

# asked WORD...: whether this call's arguments hold one of the words (a part, B, C or D, or a stage name).
asked() {
  local w a
  for w in "${want[@]}"; do
    for a in "$@"; do [[ $w == "$a" ]] && return 0; done
  done
  return 1
}

record() {  # record NAME TEXT: one summary line, kept in out/gpu-state and copied back
  printf '%-22s %s\n' "$1" "$2" | tee -a "$logs/summary.txt" >&2
  cp "$logs/summary.txt" "$out/summary.txt"
}

# stage NAME PART NEED MAX CMD...: runs CMD (a program or a function of this script) with its
# output in $logs/NAME.log and this call's gpu-check.log, cut after MAX seconds or at the budget.
# Not started when this call did not ask for it (PART "always": every call), when it passed in an
# earlier call (unless asked for by name), or when fewer than NEED seconds are left. Returns CMD's
# status (0 if not started).
stage() {
  local name=$1 part=$2 need=$3 max=$4
  shift 4
  [[ $part == always ]] || asked "$part" "$name" || return 0
  if [[ $part != always ]] && ! asked "$name" && grep -qx "$name" "$passed"; then
    record "$name" "passed in an earlier call"
    return 0
  fi
  local remaining=$((deadline - SECONDS))
  if ((remaining < need)); then
    record "$name" "not started: ${remaining}s of the call's budget left, it needs ${need}s"
    left+=("$name")
    return 0
  fi
  local limit=$((max < remaining ? max : remaining)) t0=$SECONDS rc
  echo "===== $name: $*" >> "$log_all"
  echo "== $name (at most ${limit}s): $*" >&2
  if [[ $(type -t "$1") == function ]]; then
    timeout -k 10 "$limit" bash -c "$(declare -f "$1"); \"\$@\"" _ "$@" > "$logs/$name.log" 2>&1
  else
    timeout -k 10 "$limit" "$@" > "$logs/$name.log" 2>&1
  fi
  rc=$?
  tail -c 2000000 "$logs/$name.log" >> "$log_all"
  local how="rc=$rc"
  if ((rc == 124 || rc == 137)) && ((limit < max)); then
    how="cut at the call's budget"  # not a failure: the next call runs it again
    left+=("$name")
  elif ((rc == 124 || rc == 137)); then
    how="rc=$rc (over its ${max}s)"
    failed+=("$name")
  elif ((rc != 0)); then
    failed+=("$name")
  fi
  record "$name" "$(printf '%-28s %5ss' "$how" "$((SECONDS - t0))")"
  ((rc == 0)) && [[ $part != always ]] && echo "$name" >> "$passed"
  return $rc
}

skip() {  # skip NAME PART WHY: a stage this kind of run cannot do
  asked "$2" "$1" || return 0
  record "$1" "skipped: $3"
  skipped+=("$1")
}

# same_last_checkpoint RUN_A RUN_B: the newest checkpoints of two runs hold the same bytes in every
# .safetensors file (a straight run against a stopped and resumed one); fails on the first that differs.
same_last_checkpoint() {
  local a b f n=0
  a=$(ls -d "$1"/checkpoints/step_* 2> /dev/null | tail -n1)
  b=$(ls -d "$2"/checkpoints/step_* 2> /dev/null | tail -n1)
  [ -n "$a" ] && [ -n "$b" ] || { echo "no checkpoint in $1 or $2"; return 1; }
  [ "$(basename "$a")" = "$(basename "$b")" ] || { echo "the runs end at different steps: $a, $b"; return 1; }
  echo "$a vs $b"
  for f in "$a"/*.safetensors; do
    [ -f "$f" ] || continue
    cmp "$f" "$b/$(basename "$f")" || return 1
    echo "$(basename "$f") identical"
    n=$((n + 1))
  done
  ((n > 0)) || { echo "no .safetensors files in $a"; return 1; }
}

finish() {
  local status=0 msg
  if ((${#failed[@]})); then
    msg="failed: ${failed[*]}"
    status=1
  fi
  if ((${#left[@]})); then
    msg="${msg:+$msg; }not reached in this call's budget: ${left[*]}: run the same command again (warm machine: it goes on from there)"
    ((status)) || status=3
  fi
  [ -s "$logs/bench.jsonl" ] && cp "$logs/bench.jsonl" "$out/bench.jsonl"
  [ -s "$logs/bench_recipe2026.jsonl" ] && cp "$logs/bench_recipe2026.jsonl" "$out/bench_recipe2026.jsonl"
  echo "== summary over the calls on this build ($logs/summary.txt)" >&2
  cat "$logs/summary.txt" >&2
  ((${#skipped[@]})) && msg="${msg:+$msg; }skipped: ${skipped[*]}"
  echo "gpu_check: ${msg:-every stage asked for (${want[*]}) has passed}" | tee -a "$log_all" >&2
  exit $status
}

[ -d .gpu/deps ] || { echo "gpu_check.sh: .gpu/deps is missing: run scripts/gpu_deps.sh here and carry .gpu" >&2; exit 2; }

# NCCL comes with PyTorch as a wheel (nvidia-nccl-cu13): its folder holds include/ and lib/.
nccl_home=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
export NCCL_HOME=${NCCL_HOME:-$nccl_home}
[ -n "$NCCL_HOME" ] && export LD_LIBRARY_PATH="$NCCL_HOME/lib:${LD_LIBRARY_PATH:-}"

stage env always 5 60 bash -c 'nvidia-smi || echo "(no nvidia-smi)"; nvcc --version; ${CXX:-c++} --version
  cmake --version; python3 -c "import torch; print(\"torch\", torch.__version__, torch.version.cuda)"
  echo NCCL_HOME=$NCCL_HOME; ls $NCCL_HOME/include $NCCL_HOME/lib; nproc; free -g; df -h .'

# A build made on the host (scripts/gpu_deps.sh --prebuild: .gpu/build-gpu.tar.gz, built at the
# path in .gpu/build-gpu.root) saves the device the build's minutes: it is unpacked at that same
# path (a link to this checkout where the path differs, so the absolute paths in its CTest files and
# run-paths hold) and used if its programs find every library here; otherwise this machine builds.
prebuilt=0
unpack_prebuilt() {
  local at=$1
  # Built from other sources than these (an edit after gpu_deps.sh --prebuild): build here instead.
  if [ "$(bash scripts/source_fingerprint.sh)" != "$(cat .gpu/build-gpu.sources 2> /dev/null)" ]; then
    echo "the prebuilt build is of other sources than this checkout (rerun scripts/gpu_deps.sh --prebuild)"
    return 1
  fi
  if [ "$(cd "$at" 2> /dev/null && pwd -P)" != "$(pwd -P)" ]; then
    [ -e "$at" ] && { echo "$at exists and is not this checkout: cannot place the prebuilt build"; return 1; }
    mkdir -p "$(dirname "$at")" && ln -s "$(pwd -P)" "$at" || return 1
  fi
  local stamp
  stamp=$(cksum < .gpu/build-gpu.tar.gz)
  if [ "$(cat build-gpu/.prebuilt 2> /dev/null)" != "$stamp" ]; then  # a warm machine keeps the last one
    rm -rf build-gpu && tar -xzf .gpu/build-gpu.tar.gz && echo "$stamp" > build-gpu/.prebuilt || return 1
  fi
  # The kernel-emulation test's python (numpy) is this machine's, not the host's.
  sed -i "s#\"[^\"]*/python3\"#\"$(command -v python3)\"#" build-gpu/tests/ops/cuda/CTestTestfile.cmake
  local f missing
  for f in build-gpu/nanoddp build-gpu/tests/ops/cuda/test_cuda_ops build-gpu/bench/bench_train_gpu; do
    missing=$(ldd "$f" | grep 'not found')
    [ -z "$missing" ] || { echo "$f: $missing"; return 1; }
  done
  local report
  report=$(build-gpu/nanoddp env --device cuda) || { echo "$report"; return 1; }
  echo "$report"
  grep -q '^ *cuda *ok' <<< "$report"  # the GPU's own check ran and passed
}
# The toolkit's libraries may come as PyTorch's wheels only (nvidia/*/lib): after the system's.
wheel_libs=$(python3 -c 'import nvidia, os; p = list(nvidia.__path__)[0]
print(":".join(os.path.join(p, d, "lib") for d in sorted(os.listdir(p)) if os.path.isdir(os.path.join(p, d, "lib"))))' \
  2> /dev/null || true)
[ -n "$wheel_libs" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$wheel_libs"
# OpenMP's runtime for the prebuilt programs where this image has none (gpu_deps.sh --prebuild).
if ! ldconfig -p 2> /dev/null | grep -q 'libgomp\.so\.1 '; then
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$root/.gpu/deps/runtime"
fi
if ((!dry)) && [ -s .gpu/build-gpu.tar.gz ] && [ -z "${GPU_CHECK_NO_PREBUILT:-}" ]; then
  at=$(cat .gpu/build-gpu.root)
  if stage prebuilt always 10 120 unpack_prebuilt "$at"; then
    prebuilt=1
    build=$at/build-gpu
  else
    build=$root/build-gpu-here  # not over the unpacked build's cache, which names the host's paths
  fi
fi
if ((!prebuilt)); then
  gen=()
  command -v ninja > /dev/null && gen=(-G Ninja)
  source "$root/scripts/configure.sh"
  stage configure always 20 300 nanoddp_configure . "$build" "${gen[@]}" -DCMAKE_PREFIX_PATH="$root/.gpu/deps/usr" \
    "${nanoddp_gpu_cmake_flags[@]}" ${GPU_CHECK_CMAKE_ARGS:-} || finish
  # Only what the stages run: the CPU-only tests and tools would double the build.
  targets=(nanoddp test_cuda_ops test_cuda_model test_cudnn_attention test_cudnn_library test_hopper_attention
           bench_train_gpu bench_attention_gpu bench_allreduce)
  grep -qs test_comm_nccl "$build/tests/comm/CTestTestfile.cmake" && targets+=(test_comm_nccl)  # where NCCL was found
  # Several ranks on one GPU over Gloo, where the build has Gloo (GPU_CHECK_CMAKE_ARGS=-DNANODDP_GLOO=ON
  # with Gloo installed; the bundled build leaves it out).
  grep -qs test_comm_gloo_cuda "$build/tests/comm/CTestTestfile.cmake" && targets+=(test_comm_gloo_cuda)
  grep -qs test_ddp_gloo_cuda "$build/tests/ddp/CTestTestfile.cmake" && targets+=(test_ddp_gloo_cuda)
  stage build always 30 "$budget" cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" || finish
fi
bin=$build/nanoddp
stage nanoddp_env always 2 60 "$bin" env --device "$device"

# The stages in the order a short lease wants them (15 minutes of device time a session, the
# machine's start included): the correctness of part B first, then one end-to-end run of each kind,
# the speed at depth 20 (the goal's depth) and its breakdown, and only then what repeats or widens
# them (fp16, the sanitizers, depth 12, Nsight Compute).

# Eight at a time, two CPU threads each: each test is a process of its own whose start-up (a CUDA
# context) outweighs its work.
stage ctest_cuda B 60 240 env OMP_NUM_THREADS=2 ctest --test-dir "$build" -L cuda -j 8 --output-on-failure --timeout 230

data=.gpu/data
common=(--data "$data" --device "$device" --depth 4 --max_seq_len 256 --device_batch_size 8
        --total_batch_size 4096 --num_iterations 40 --eval_every 20 --eval_tokens 16384 --save_every 20)
# A run folder left by a cut or failed stage would be resumed, or refused, by the next try.
fresh_unless_passed() { grep -qx "$1" "$passed" || rm -rf "${work:?}/$2"; }
fresh_unless_passed train_cuda straight
stage train_cuda B 15 120 "$bin" train "${common[@]}" --out "$work/straight"
fresh_unless_passed train_cuda_stop resumed
stage train_cuda_stop B 15 120 "$bin" train "${common[@]}" --out "$work/resumed" --stop_at 20
stage train_cuda_resume B 15 120 "$bin" train "${common[@]}" --out "$work/resumed" --resume latest
stage resume_bitwise B 2 60 same_last_checkpoint "$work/straight" "$work/resumed"
fresh_unless_passed run_nproc1 launched
stage run_nproc1 B 15 120 "$bin" run --standalone --nproc_per_node 1 train "${common[@]}" --out "$work/launched"
stage sample_cuda B 5 60 "$bin" sample --checkpoint "$work/straight" --device "$device" --prompt "The jury said" \
  --max_tokens 60

# Sampling on the device (ops::sample_tokens): the kernel against its CPU twin, exactly, and
# generation on the GPU against the CPU (tests/ops/cuda/test_cuda_sample.cpp, also in ctest_cuda:
# a stage of its own so that a short call can ask for it by name).
stage sampling_cuda B 10 120 "$build/tests/ops/cuda/test_cuda_model" --gtest_filter='CudaSample.*'
# same_sample_text BIN CHECKPOINT DEVICE: the checkpoint's sample in f32 on DEVICE and on the CPU,
# same seed and prompt: the same text. The two devices' logits differ only by f32 rounding, which
# moves a draw only when its uniform falls within about 1e-6 of a boundary (docs/benchmarks.md,
# "Sampling on the device").
same_sample_text() {
  local a b args=(sample --checkpoint "$2" --dtype fp32 --prompt "The jury said" --max_tokens 80 --seed 7)
  a=$("$1" "${args[@]}" --device "$3") || return 1
  b=$("$1" "${args[@]}" --device cpu) || return 1
  printf '%s:\n%s\ncpu:\n%s\n' "$3" "$a" "$b"
  [ "$a" = "$b" ] || { echo "the texts differ"; return 1; }
}
stage sample_same_text B 10 120 same_sample_text "$bin" "$work/straight" "$device"

# bench_table: the table over both depths, whichever calls ran them.
bench_table() {
  local files=() d
  for d in 12 20; do [ -s "$logs/bench_d$d/results.jsonl" ] && files+=("$logs/bench_d$d/results.jsonl"); done
  ((${#files[@]})) || return 0
  cat "${files[@]}" > "$logs/bench.jsonl"
  python3 bench/gpu_bench_table.py "$logs/bench.jsonl" | tee -a "$log_all" >&2
}
# bench_depth D NEED: nanoddp against PyTorch at depth D, a stage of its own (PyTorch's compile
# alone takes minutes), its results kept apart; started only with NEED seconds of the call left.
bench_depth() {
  stage "bench_d$1" C "$2" 420 env BUILD_DIR="$build" OUT_DIR="$logs/bench_d$1" DEPTHS="$1" SKIP_BUILD=1 \
    bash bench/gpu_bench.sh
  bench_table
}
# recipe2026_table and recipe2026_depth D NEED: the same for the 2026 recipe against its PyTorch
# twin (RECIPE=2026 bench/gpu_bench.sh), in a table of its own.
recipe2026_table() {
  local files=() d
  for d in 12 20; do [ -s "$logs/recipe2026_d$d/results.jsonl" ] && files+=("$logs/recipe2026_d$d/results.jsonl"); done
  ((${#files[@]})) || return 0
  cat "${files[@]}" > "$logs/bench_recipe2026.jsonl"
  python3 bench/gpu_bench_table.py "$logs/bench_recipe2026.jsonl" | tee -a "$log_all" >&2
}
recipe2026_depth() {
  stage "recipe2026_d$1" C "$2" 420 env BUILD_DIR="$build" OUT_DIR="$logs/recipe2026_d$1" DEPTHS="$1" SKIP_BUILD=1 \
    RECIPE=2026 bash bench/gpu_bench.sh
  recipe2026_table
}
if ((dry)); then
  skip nccl_busbw C "dry run (NCCL needs a GPU)"
  skip bench_d20 C "dry run (needs a GPU and PyTorch 2)"
  skip recipe2026_d20 C "dry run (needs a GPU and PyTorch 2)"
  skip profile_d20 D "dry run (needs a GPU)"
  skip attention_d20 D "dry run (needs a GPU)"
  skip hopper_attention D "dry run (needs an H100 or H200)"
else
  # --backend nccl: one process otherwise gets the single-rank group, which times nothing.
  stage nccl_busbw C 20 60 "$bin" run --standalone --nproc_per_node 1 "$build/bench/bench_allreduce" --device cuda \
    --backend nccl --min_bytes 8 --max_bytes $((1 << 30)) --factor 4
  bench_depth 20 330  # PyTorch three times (stacked Muon with each attention, then the loop)
  recipe2026_depth 20 330  # the 2026 model, after the classic table it is compared with
  stage profile_d20 D 40 120 "$build/bench/bench_train_gpu" --depth 20 --seq 2048 --batch 16 --steps 3 --warmup 2 \
    --min_seconds 0 --breakdown 3
  # Attention alone on a depth-20 layer's shapes (10 heads of 128) through each of nanoddp's routes
  # (ops/cuda/cudnn_attention.h), then PyTorch's two on the same shapes. A route that fails still
  # leaves the others' lines.
  attention_routes() {
    local route rc=0
    set -o pipefail
    : > "$1"
    for route in flash cudnn cudnn_nondeterministic; do
      NANODDP_CUDA_ATTENTION=$route "$2" | tee -a "$1" || rc=1
    done
    python3 bench/torch_attention_bench.py --nanoddp "$1" || rc=1
    return $rc
  }
  stage attention_d20 D 30 150 attention_routes "$logs/attention_nanoddp.json" "$build/bench/bench_attention_gpu"
  # The Hopper kernels (src/ops/cuda/attention_hopper.cu and attention_hopper_backward.cu, wgmma
  # and TMA): their first run on a GPU. Their comparison with the mma.sync forward and backward (and
  # the backward's run-to-run bits), the op tests under their route (forward and backward against
  # the CPU), then attention alone at depth 20, forward and backward timed apart, through flash,
  # hopper and cudnn one after another on this GPU. What the timings say decides whether auto
  # should pick it.
  hopper_attention() {
    local route rc=0
    set -o pipefail
    "$build/tests/ops/cuda/test_hopper_attention" || rc=1
    NANODDP_CUDA_ATTENTION=hopper "$build/tests/ops/cuda/test_cuda_ops" --gtest_filter='*CudaAttention*' || rc=1
    : > "$1"
    for route in flash hopper cudnn; do
      NANODDP_CUDA_ATTENTION=$route "$2" | tee -a "$1" || rc=1
    done
    return $rc
  }
  stage hopper_attention D 30 180 hopper_attention "$logs/attention_hopper.json" "$build/bench/bench_attention_gpu"
fi

# fp8_check BIN BENCH DATA DIR: nanochat's --fp8 against bf16 (docs/fp8.md). The loss curves of two
# `nanoddp train` runs at depth 12 on the same data and seed, bf16 and --fp8: the fp8 run's losses must
# stay finite and its mean loss over the last fifth of the steps within 2% of bf16's. Why 2%: nanochat
# found an fp8 step "slightly less powerful" (dev/LOG.md, 2026-02-02: 1.17x the tokens/s at d26 but
# about 1.05x the speed at matched loss, so an fp8 run needs roughly 10% more steps for bf16's loss);
# late in a run, 10% more steps lower the loss by well under 2%, while a wrong scale or layout costs
# far more (or diverges). Then tokens/s of both at depth 20 (bench_train_gpu; nanochat saw fp8 slower
# than bf16 at d12 and faster from d26 up). Nothing here has run on a GPU yet.
fp8_check() {
  local bin=$1 bench=$2 data=$3 dir=$4 rc=0 kind
  local args=(train --data "$data" --device cuda --depth 12 --max_seq_len 512 --device_batch_size 32
              --total_batch_size 16384 --num_iterations "${GPU_CHECK_FP8_STEPS:-300}" --eval_every -1
              --eval_tokens 16384)
  rm -rf "$dir" && mkdir -p "$dir" || return 1
  "$bin" "${args[@]}" --out "$dir/bf16" || return 1
  "$bin" "${args[@]}" --fp8 --out "$dir/fp8" || return 1
  local compare='
import json, math, statistics, sys
def read(path):
    loss, tps = {}, []
    for line in open(path):
        j = json.loads(line)
        if "loss" in j and "step" in j:
            loss[j["step"]] = j["loss"]
        if "tokens_per_s" in j:
            tps.append(j["tokens_per_s"])
    return loss, tps
(a, ta), (b, tb) = read(sys.argv[1]), read(sys.argv[2])
steps = sorted(set(a) & set(b))
if not steps:
    sys.exit("no step has a loss in both runs")
for s in steps[:: max(1, len(steps) // 12)] + steps[-1:]:
    print(f"step {s:5d}  bf16 {a[s]:.4f}  fp8 {b[s]:.4f}")
if not all(math.isfinite(b[s]) for s in steps):
    sys.exit("the fp8 loss is not finite")
tail = steps[len(steps) * 4 // 5 :]
ma, mb = (statistics.mean(x[s] for s in tail) for x in (a, b))
rel = (mb - ma) / ma
print(f"mean loss over the last {len(tail)} steps: bf16 {ma:.4f}, fp8 {mb:.4f} ({100 * rel:+.2f}%, bound 2%)")
if ta and tb:
    print(f"train tokens/s (median): bf16 {statistics.median(ta):.0f}, fp8 {statistics.median(tb):.0f}")
sys.exit(0 if abs(rel) <= 0.02 else 1)
'
  python3 -c "$compare" "$dir/bf16/metrics.jsonl" "$dir/fp8/metrics.jsonl" || rc=1
  for kind in bf16 fp8; do
    "$bench" --depth 20 --seq 2048 --batch 16 --steps 6 --warmup 2 --min_seconds 3 $([[ $kind == fp8 ]] && echo --fp8) \
      > "$dir/bench_$kind.json" || rc=1
    cat "$dir/bench_$kind.json"
  done
  python3 -c 'import json, sys
a, b = (json.load(open(p))["tokens_per_s"] for p in sys.argv[1:])
print("depth 20 tokens/s: bf16 %.0f, fp8 %.0f (%.3fx)" % (a, b, b / a))' \
    "$dir/bench_bf16.json" "$dir/bench_fp8.json" || rc=1
  return $rc
}
if ((dry)); then
  skip fp8_d12 C "dry run (--fp8 needs a Hopper GPU)"
else
  stage fp8_d12 C 90 300 fp8_check "$bin" "$build/bench/bench_train_gpu" "$data" "$work/fp8"
fi

fresh_unless_passed train_cuda_fp16 fp16_straight
stage train_cuda_fp16 B 15 120 "$bin" train "${common[@]}" --dtype fp16 --out "$work/fp16_straight"
fresh_unless_passed train_cuda_fp16_stop fp16_resumed
stage train_cuda_fp16_stop B 15 120 "$bin" train "${common[@]}" --dtype fp16 --out "$work/fp16_resumed" --stop_at 20
stage train_cuda_fp16_resume B 15 120 "$bin" train "${common[@]}" --dtype fp16 --out "$work/fp16_resumed" \
  --resume latest
stage resume_bitwise_fp16 B 2 60 same_last_checkpoint "$work/fp16_straight" "$work/fp16_resumed"

# The sanitizers and Nsight Compute look at our own kernels, so attention takes the flash route there
# (auto would hand the bf16 shapes to cuDNN). memcheck over every op test (8 s on an H200); racecheck and synccheck over one launch shape each
# of the kernels that share memory between threads (GPU_CHECK_SHARED_FILTER): racecheck ran past
# 180 s over every op test, and past 150 s over the attention tests at head_dim 128 and 64.
ops=$build/tests/ops/cuda/test_cuda_ops
shared_filter=${GPU_CHECK_SHARED_FILTER:-'*Attention*b1q64cap64kv64h1g1d128_bf16:*Attention*b2q13cap13kv13h4g4d16_f32'}
shared_filter+=':*RmsNorm*/bf16:*CrossEntropy*/bf16:*NewtonSchulz.ManyMatrices*/0'
for tool in memcheck racecheck synccheck; do
  filter='*'
  [[ $tool == memcheck ]] || filter=$shared_filter
  if ((dry)); then
    skip "sanitizer_$tool" B "dry run (compute-sanitizer needs a GPU)"
  else
    stage "sanitizer_$tool" B 40 150 env NANODDP_CUDA_ATTENTION=flash compute-sanitizer --tool "$tool" --error-exitcode 3 "$ops" --gtest_brief=1 \
      "--gtest_filter=$filter"
  fi
done
# The Hopper kernels (TMA copies, mbarriers, wgmma; attention_hopper*.cu) under memcheck and
# synccheck: their comparisons with the mma.sync kernels, forward and backward (they skip, saying
# why, on a GPU that is not compute capability 9.0).
for tool in memcheck synccheck; do
  if ((dry)); then
    skip "sanitizer_hopper_$tool" B "dry run (compute-sanitizer needs an H100 or H200)"
  else
    stage "sanitizer_hopper_$tool" B 30 240 compute-sanitizer --tool "$tool" --error-exitcode 3 \
      "$build/tests/ops/cuda/test_hopper_attention" --gtest_brief=1
  fi
done

# ncu_kernels BENCH: Nsight Compute on one launch of each hand-written kernel of a depth-20 step of
# BENCH (bench_train_gpu: a warm-up step and a timed one), in the second step: past the first
# step's launches of that kernel (20 per step for attention, 82 for RMSNorm, 8 chunks of 4,096
# rows for the cross-entropy). One program run per kernel, each with a small GEMM-peak probe so
# that it starts quickly. Besides speed of light, occupancy and memory: the pipes' utilisation
# (ComputeWorkloadAnalysis: tensor against ALU and FMA) and the warps' stall reasons
# (WarpStateStats: MIO throttle and short scoreboard point at shared memory and ldmatrix), which
# tell whether the flash kernels wait on shared memory or on their softmax arithmetic.
ncu_kernels() {
  local bench=$1 ncu rc=0 k
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | tail -n1)
  [ -n "$ncu" ] || { echo "ncu not found (on PATH or in /opt/nvidia/nsight-compute)"; return 1; }
  for k in flash_forward_kernel:25 flash_dkdv_kernel:25 flash_dq_kernel:25 softcap_ce_kernel:10 \
    rmsnorm_forward_kernel:90 rmsnorm_backward_kernel:90; do
    echo "===== ncu: ${k%%:*}, after ${k##*:} launches"
    NANODDP_CUDA_ATTENTION=flash "$ncu" --clock-control none -k "regex:${k%%:*}" --launch-skip "${k##*:}" -c 1 --section SpeedOfLight \
      --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
      --section WarpStateStats \
      "$bench" --depth 20 --seq 2048 --batch 16 --steps 1 --warmup 1 --min_seconds 0 --gemm_n 1024 || rc=1
  done
  return $rc
}
if ((dry)); then
  skip bench_d12 C "dry run (needs a GPU and PyTorch 2)"
  skip recipe2026_d12 C "dry run (needs a GPU and PyTorch 2)"
  skip ncu_kernels D "dry run (needs a GPU)"
else
  bench_depth 12 230  # a smaller model and a shorter compile than depth 20
  recipe2026_depth 12 230
  stage ncu_kernels D 90 420 ncu_kernels "$build/bench/bench_train_gpu"
fi

finish
