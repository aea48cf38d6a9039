#!/usr/bin/env bash
# Installs everything (scripts/setup.sh), builds, and runs every test. CI runs exactly this
# (.ci/run). References that tests compare against (python3-torch, node with the npm tiktoken
# encoder) are required here: a test that cannot find them fails instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
export NANODDP_BUILD_DIR="${NANODDP_BUILD_DIR:-build}"
# Warnings are errors in this build (NANODDP_WERROR, cmake/NanoddpWarnings.cmake), so one that
# reaches CI fails it. A later -DNANODDP_WERROR=OFF in NANODDP_CMAKE_ARGS overrides it. The option
# stays in the build folder's cache: a folder that scripts/main_job.sh configured without it is
# compiled again once, and scripts/main_job.sh keeps it on afterwards.
export NANODDP_CMAKE_ARGS="-DNANODDP_WERROR=ON ${NANODDP_CMAKE_ARGS:-}"
scripts/setup.sh
export NANODDP_REQUIRE_REFERENCES=1
cd "$NANODDP_BUILD_DIR"
ctest --output-on-failure --timeout 900 -j "${NANODDP_TEST_JOBS:-2}" "$@"
