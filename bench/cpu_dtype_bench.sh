#!/usr/bin/env bash
# Every figure docs/benchmarks.md gives for --dtype on the CPU, on whatever CPU this is, in one run, so that
# a machine of the kind not yet measured (Intel Sapphire Rapids: AMX, AVX512-FP16) is measured in one
# command:
#   bench/cpu_dtype_bench.sh [build dir] [log dir]
# NANODDP_BENCH_ROUNDS (default 1) is bench_train_cpu's --rounds: 3 gives medians that a drifting
# machine moves less, in about three times the time of part 2.
# 1. the CPU and the matmul path each dtype takes (`nanoddp env`);
# 2. bench_train_cpu at 1 and 2 threads: our fp32, bf16 and fp16 against PyTorch 1.13's f32 and
#    bf16 autocast, with AdamW and with Muon (ratios and MFU against the GEMM peak of the same run);
# 3. data-parallel: bench_train_ddp at 1 and 2 ranks (one thread each) in every dtype, ratios
#    against fp32 at the same rank count;
# 4. the reduced-precision tests (curves against f32, fp16 overflow on 2 ranks, bitwise resume).
# Each part's output is kept in the log dir (default: a new folder under /tmp); docs/benchmarks.md
# records the tables with the CPU they ran on.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
logs="${2:-$(mktemp -d /tmp/cpu_dtype_bench.XXXX)}"
rounds="${NANODDP_BENCH_ROUNDS:-1}"
mkdir -p "$logs"
bin="$build/nanoddp"
for f in "$bin" "$build/bench/bench_train_cpu" "$build/bench/bench_train_ddp"; do
  [[ -x "$f" ]] || { echo "cpu_dtype_bench: $f is missing; build first (cmake --build $build -j)" >&2; exit 1; }
done
echo "logs: $logs"

echo "== 1. the CPU and the matmul paths"
"$bin" env 2>&1 | grep -E '^(cpu|cpu features|cpu lacks|bf16 hardware|bf16 matmul|f16 matmul|onednn|onednn isa) ' |
  tee "$logs/env.txt"

echo "== 2. one process: nanoddp fp32 / bf16 / fp16 against PyTorch 1.13"
"$build/bench/bench_train_cpu" --rounds "$rounds" --threads 1,2 --optimizer adamw --dtype fp32,bf16,fp16 2>&1 | tee "$logs/train_adamw.txt"
"$build/bench/bench_train_cpu" --rounds "$rounds" --threads 1,2 --optimizer muon --dtype fp32,bf16 2>&1 | tee "$logs/train_muon.txt"

echo "== 3. data-parallel, one thread per rank"
export OMP_NUM_THREADS=1
json() { grep -o '{.*}' | tail -1; }
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
declare -A tok
for dtype in fp32 bf16 fp16; do
  one=$("$build/bench/bench_train_ddp" --steps 30 --dtype "$dtype" 2>"$logs/ddp_${dtype}_1.err" | json)
  two=$("$bin" run --standalone --nproc_per_node 2 "$build/bench/bench_train_ddp" --steps 30 --dtype "$dtype" \
        2>"$logs/ddp_${dtype}_2.err" | json)
  tok[$dtype,1]=$(field "$one" tokens_per_s)
  tok[$dtype,2]=$(field "$two" tokens_per_s)
done
{
  printf '%5s | %5s | %8s | %11s\n' ranks dtype "tok/s" "vs fp32"
  for ranks in 1 2; do
    for dtype in fp32 bf16 fp16; do
      python3 -c 'import sys; r, d, t, b = sys.argv[1:]
print(f"{r:>5} | {d:>5} | {float(t):>8.0f} | {float(t) / float(b):>10.2f}x")' \
        "$ranks" "$dtype" "${tok[$dtype,$ranks]}" "${tok[fp32,$ranks]}"
    done
  done
} | tee "$logs/ddp.txt"
unset OMP_NUM_THREADS

echo "== 4. the reduced-precision tests"
ctest --test-dir "$build" -R 'F16|Bf16|ReducedKernels|ReducedPrecision|LossScaling|NewtonSchulz|BitwiseResume' \
  -E 'Cuda' --output-on-failure 2>&1 | tee "$logs/tests.txt" | tail -4
