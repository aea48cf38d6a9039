#!/usr/bin/env bash
# One line naming the contents of every file a build is made from (CMakeLists.txt, cmake/, src/,
# tests/, bench/, examples/), without git: the device machine gets a copy of the working tree, not
# the repository. Python's caches, which git ignores and the copy lacks, are left out.
#   bash scripts/source_fingerprint.sh    # run from the repository root
set -euo pipefail
cd "$(dirname "$0")/.."
find CMakeLists.txt cmake src tests bench examples -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 |
  LC_ALL=C sort -z | xargs -0 sha1sum | sha1sum | cut -d' ' -f1
