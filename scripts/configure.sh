# The one cmake configure of nanoddp's scripts (setup.sh, gpu_check.sh, gpu_deps.sh,
# bench/gpu_bench.sh): source this file, then
#   nanoddp_configure SOURCE BUILD_DIR [cmake arguments...]
# configures a Release build of SOURCE in BUILD_DIR with the arguments given after them.
# The device machine's build (gpu_deps.sh prebuilds it, gpu_check.sh builds it where no prebuilt one
# fits) adds "${nanoddp_gpu_cmake_flags[@]}" and the prefix of the bundled dependencies: CUDA for
# the H100/H200 (sm_90) with NCCL, and neither Gloo nor MPI, which that machine lacks.
# nanoddp_configure uses nothing else of this file, so gpu_check.sh's stage can run it alone.

nanoddp_configure() {
  local source=$1 build=$2
  shift 2
  cmake -S "$source" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@"
}

# shellcheck disable=SC2034  # used by the scripts that source this file
nanoddp_gpu_cmake_flags=(-DCMAKE_CUDA_ARCHITECTURES=90 -DNANODDP_CUDA=ON -DNANODDP_NCCL=ON -DNANODDP_GLOO=OFF
                         -DNANODDP_MPI=OFF)
