# Run by `cmake --install` (install(CODE) in the top CMakeLists.txt): installs the public headers
# and only the internal headers they reach.
#
#   <prefix>/include/nanoddp/*.h           the public API (include/nanoddp/ in the source tree)
#   <prefix>/include/nanoddp/build_config.h the engines this build has
#   <prefix>/include/nanoddp/detail/...    the internal headers the public ones include, directly or
#                                          through each other, under their src/ paths
#
# Consumers get -I <prefix>/include and nothing below it, so "core/tensor.h" cannot be found and
# cannot collide with a header of their own. Sources include each other as "core/tensor.h" (with
# -I src); a header under detail/ cannot, since no -I points there. So each installed copy has its
# includes of src/ headers written as <nanoddp/detail/core/tensor.h>; nothing else changes. An
# include that is neither public nor under src/ stops the install with its name.
#
# Inputs: NANODDP_SOURCE_DIR, NANODDP_BINARY_DIR, NANODDP_INCLUDE_DIR (relative to the prefix).
cmake_policy(PUSH)
cmake_policy(VERSION 3.25)  # cmake_install.cmake runs with no policies set (IN_LIST needs one)
set(src ${NANODDP_SOURCE_DIR}/src)
set(stage ${NANODDP_BINARY_DIR}/install-headers)
file(REMOVE_RECURSE ${stage})

# The layers, i.e. the first path component an include of an internal header starts with.
file(GLOB layers LIST_DIRECTORIES true RELATIVE ${src} ${src}/*)
list(FILTER layers INCLUDE REGEX "^[a-z_]+$")
list(JOIN layers "|" layer_alternatives)

# Copies `in` to `out` with its internal includes rewritten; appends the internal headers it
# includes (paths under src/) to the caller's `pending`.
function(nanoddp_stage_header in out)
  file(READ ${in} text)
  string(REGEX MATCHALL "#include \"[^\"]+\"" includes "${text}")
  set(found "")
  foreach(inc IN LISTS includes)
    string(REGEX REPLACE "#include \"([^\"]+)\"" "\\1" path "${inc}")
    if(path MATCHES "^nanoddp/" AND (EXISTS ${NANODDP_SOURCE_DIR}/include/${path} OR path STREQUAL "nanoddp/build_config.h"))
      continue()
    elseif(path MATCHES "^(${layer_alternatives})/" AND EXISTS ${src}/${path})
      list(APPEND found ${path})
    else()
      message(FATAL_ERROR "installing ${in}: it includes \"${path}\", which is neither a public header "
                          "(include/nanoddp/) nor under src/; install it or include it differently")
    endif()
  endforeach()
  string(REGEX REPLACE "#include \"((${layer_alternatives})/[^\"]+)\"" "#include <nanoddp/detail/\\1>" text "${text}")
  file(WRITE ${out} "${text}")
  set(pending ${pending} ${found} PARENT_SCOPE)
endfunction()

set(pending "")
file(GLOB public RELATIVE ${NANODDP_SOURCE_DIR}/include/nanoddp ${NANODDP_SOURCE_DIR}/include/nanoddp/*.h)
foreach(h IN LISTS public)
  nanoddp_stage_header(${NANODDP_SOURCE_DIR}/include/nanoddp/${h} ${stage}/nanoddp/${h})
endforeach()
file(COPY ${NANODDP_BINARY_DIR}/generated/nanoddp/build_config.h DESTINATION ${stage}/nanoddp)

# The internal headers reachable from the public ones, each staged once.
set(done "")
while(pending)
  list(POP_FRONT pending h)
  if(h IN_LIST done)
    continue()
  endif()
  list(APPEND done ${h})
  nanoddp_stage_header(${src}/${h} ${stage}/nanoddp/detail/${h})
endwhile()
list(LENGTH done internal_count)
message(STATUS "nanoddp headers: the public API and ${internal_count} internal headers under nanoddp/detail")

file(INSTALL ${stage}/nanoddp DESTINATION ${CMAKE_INSTALL_PREFIX}/${NANODDP_INCLUDE_DIR})
cmake_policy(POP)
