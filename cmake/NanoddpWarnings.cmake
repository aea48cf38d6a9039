# Warning flags shared by every nanoddp target, for C++ sources only: .cu files get nvcc's defaults.
function(nanoddp_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${NANODDP_WERROR}>>:-Werror>)
endfunction()
