#!/usr/bin/env bash
# The installed library, as a C++ user meets it: `cmake --install` into a scratch prefix, a project
# of its own that finds it with find_package(nanoddp) and builds the examples from their sources,
# then the examples run: collectives alone and as 2 ranks under `nanoddp run`, fashion_mnist with
# missing data (one clear error line, exit 1).
# Usage: install_test.sh BUILD_DIR SOURCE_DIR SCRATCH_DIR
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd) scratch=$3
rm -rf "$scratch" && mkdir -p "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" > "$scratch/install.log"
test -f "$scratch/prefix/include/nanoddp/ddp/reducer.h"
test -f "$scratch/prefix/lib/cmake/nanoddp/nanoddpConfig.cmake"
if [[ -d "$scratch/prefix/include/nanoddp/cli" ]]; then echo "the CLI's headers were installed" >&2; exit 1; fi
gen=(); command -v ninja > /dev/null && gen=(-G Ninja)
cmake -S "$src/tests/install/consumer" -B "$scratch/consumer" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$scratch/prefix" -DNANODDP_EXAMPLES="$src/examples" > "$scratch/configure.log" \
  || { cat "$scratch/configure.log" >&2; exit 1; }
cmake --build "$scratch/consumer" -j2 > "$scratch/build.log" 2>&1 || { tail -n 40 "$scratch/build.log" >&2; exit 1; }
"$scratch/consumer/collectives"
"$build/nanoddp" run --standalone --nproc_per_node 2 "$scratch/consumer/collectives" > "$scratch/two.log" 2>&1 \
  || { cat "$scratch/two.log" >&2; exit 1; }
grep -q "\[rank 1\]" "$scratch/two.log" || { echo "rank 1 printed nothing" >&2; cat "$scratch/two.log" >&2; exit 1; }
set +e
"$scratch/consumer/fashion_mnist" --data "$scratch/no_such_dir" > "$scratch/fm.log" 2>&1
rc=$?
set -e
if [[ $rc -ne 1 ]] || [[ $(wc -l < "$scratch/fm.log") -ne 1 ]]; then
  echo "fashion_mnist with missing data: exit $rc, expected 1 and one line:" >&2; cat "$scratch/fm.log" >&2; exit 1
fi
echo "install test: ok"
