# One fuzz test, as ctest runs it: cmake -DFUZZER=... -DSEEDS=... -DWORK=... -DSECONDS=... -P run_fuzz.cmake
#
# Every run starts from the committed seeds alone, in a fresh WORK folder: a corpus grown by earlier
# runs would make each run explore something else, and a test that passes or fails by the history of
# the build folder is no test. With -seed=1 the mutations are the same on every run; only how many of
# them fit in SECONDS depends on the machine. The seeds folder is never written to.
foreach(var FUZZER SEEDS WORK SECONDS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_fuzz.cmake needs -D${var}=...")
  endif()
endforeach()
if(NOT EXISTS "${FUZZER}")
  message(FATAL_ERROR "${FUZZER} is not built: build the project first (the fuzz targets are part of the default build)")
endif()

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/corpus" "${WORK}/findings" "${WORK}/tmp")
# -rss_limit_mb and -malloc_limit_mb turn a giant allocation (a size taken from a header field) into a
# finding instead of an out-of-memory machine; -timeout makes a hang one too. TMPDIR: the targets'
# scratch files (fuzz_support.h), which a crash leaves behind, go with the rest of the run.
execute_process(
  COMMAND "${CMAKE_COMMAND}" -E env "TMPDIR=${WORK}/tmp"
          "${FUZZER}" -seed=1 -max_total_time=${SECONDS} -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024
          -print_final_stats=1 "-artifact_prefix=${WORK}/findings/" "${WORK}/corpus" "${SEEDS}"
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(GLOB findings "${WORK}/findings/*")
  set(how "")
  foreach(f ${findings})
    string(APPEND how "\n  ${FUZZER} ${f}")
  endforeach()
  message(FATAL_ERROR "fuzz finding (libFuzzer exit status ${rc}); reproduce with:${how}\nFix the parser, then "
                      "add the input to ${SEEDS}/ under a name that says what it caught (docs/fuzzing.md).")
endif()
