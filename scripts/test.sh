#!/usr/bin/env bash
# Installs everything (scripts/setup.sh), builds, and runs every test. CI runs exactly this
# (.ci/run). References that tests compare against (python3-torch, node with the npm tiktoken
# encoder) are required here: a test that cannot find them fails instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
export NANODDP_BUILD_DIR="${NANODDP_BUILD_DIR:-build}"
scripts/setup.sh
export NANODDP_REQUIRE_REFERENCES=1
cd "$NANODDP_BUILD_DIR"
ctest --output-on-failure --timeout 900 -j "${NANODDP_TEST_JOBS:-2}" "$@"
