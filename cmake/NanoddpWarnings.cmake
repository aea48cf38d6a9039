# Warning flags shared by every nanoddp target, for C++ sources only: .cu files get nvcc's defaults.
function(nanoddp_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
    # GCC 12 warns inside libstdc++ on `"literal" + std::string(...)` (-Wrestrict, an overlap of
    # 2^63 bytes that cannot happen: GCC bug 105651, fixed in 13); Debian 12 builds with GCC 12.
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>>:-Wno-restrict>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${NANODDP_WERROR}>>:-Werror>)
endfunction()
