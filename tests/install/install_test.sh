#!/usr/bin/env bash
# The library as a C++ user meets it, two ways:
#  1. Installed: `cmake --install` into a scratch prefix. The prefix holds the public headers
#     (<nanoddp/...>), only the internal headers they reach (under nanoddp/detail), the libraries,
#     the package files and the `nanoddp` launcher. A project of its own (consumer/) finds it with
#     find_package(nanoddp), checks that "core/tensor.h" is out of its reach and builds both
#     examples, which include only <nanoddp/...>. They run: collectives alone and as 2 ranks under
#     the installed launcher, fashion_mnist with missing data (one clear error line, exit 1).
#  2. From the sources: a project that add_subdirectory's this tree (subproject/) is configured and
#     fails if nanoddp would build anything but its libraries (no binary, example, test, benchmark).
# Usage: install_test.sh BUILD_DIR SOURCE_DIR SCRATCH_DIR
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd) scratch=$3
rm -rf "$scratch" && mkdir -p "$scratch"
fail() { echo "install test: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$scratch/prefix" > "$scratch/install.log" \
  || { cat "$scratch/install.log" >&2; fail "cmake --install failed"; }
inc=$scratch/prefix/include
test -x "$scratch/prefix/bin/nanoddp" || fail "the nanoddp launcher was not installed in bin/"
test -f "$scratch/prefix/lib/cmake/nanoddp/nanoddpConfig.cmake" || fail "no package file"
for h in nanoddp.h tensor.h ops.h distributed.h ddp.h optimizer.h distributed_sampler.h checkpoint.h build_config.h; do
  test -f "$inc/nanoddp/$h" || fail "the public header <nanoddp/$h> was not installed"
done
[[ $(ls "$inc") == nanoddp ]] || fail "headers installed outside include/nanoddp: $(ls "$inc" | tr '\n' ' ')"
# Internals no public header reaches stay out (kernels, the model's workspace, the launcher, the CLI).
leaked=$(cd "$inc/nanoddp" && find . -name kernels.h -o -name workspace.h -o -name 'launcher*.h' -o -name gpt.h \
         -o -path '*/cli/*' -o -path '*/train/*' -o -path '*/cuda/*')
[[ -z $leaked ]] || fail "internal headers installed: $leaked"
# Every installed internal header includes only <nanoddp/...> paths, never a source path.
bad=$(grep -rlE '#include "(core|ops|model|rendezvous|comm|launch|ddp|data|train|cli)/' "$inc" || true)
[[ -z $bad ]] || fail "installed headers still include source paths: $bad"
bad=$(grep -lE '#include "' "$src"/examples/*/main.cpp || true)
[[ -z $bad ]] || fail "examples include something other than <nanoddp/...> or a library's header: $bad"

gen=(); command -v ninja > /dev/null && gen=(-G Ninja)
launcher=(); command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$src/tests/install/consumer" -B "$scratch/consumer" "${gen[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$scratch/prefix" -DNANODDP_EXAMPLES="$src/examples" > "$scratch/configure.log" 2>&1 \
  || { cat "$scratch/configure.log" >&2; fail "the consumer project did not configure"; }
cmake --build "$scratch/consumer" -j2 > "$scratch/build.log" 2>&1 || { tail -n 40 "$scratch/build.log" >&2; fail "build failed"; }
"$scratch/consumer/collectives"
"$scratch/prefix/bin/nanoddp" run --standalone --nproc_per_node 2 "$scratch/consumer/collectives" > "$scratch/two.log" 2>&1 \
  || { cat "$scratch/two.log" >&2; fail "collectives under the installed launcher failed"; }
grep -q "\[rank 1\]" "$scratch/two.log" || { cat "$scratch/two.log" >&2; fail "rank 1 printed nothing"; }
set +e
"$scratch/consumer/fashion_mnist" --data "$scratch/no_such_dir" > "$scratch/fm.log" 2>&1
rc=$?
set -e
if [[ $rc -ne 1 ]] || [[ $(wc -l < "$scratch/fm.log") -ne 1 ]]; then
  cat "$scratch/fm.log" >&2; fail "fashion_mnist with missing data: exit $rc, expected 1 and one line"
fi

cmake -S "$src/tests/install/subproject" -B "$scratch/subproject" "${gen[@]}" -DNANODDP_SOURCE="$src" \
  > "$scratch/subproject.log" 2>&1 || { grep -A3 "CMake Error" "$scratch/subproject.log" >&2; fail "add_subdirectory(nanoddp) builds more than the library"; }
echo "install test: ok"
