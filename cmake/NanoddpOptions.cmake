# Resolves NANODDP_{ONEDNN,CUDA,NCCL,MPI,GLOO} (AUTO/ON/OFF) into NANODDP_HAVE_* (0/1).
# Required everywhere: OpenMP, fmt, CLI11, nlohmann-json, PCRE2, zstd, snappy. On a machine without Debian's
# -dev packages (the GPU machines) scripts/gpu_deps.sh bundles these from a Debian host and
# scripts/gpu_check.sh points CMAKE_PREFIX_PATH at the bundle.

find_package(OpenMP REQUIRED)
find_package(fmt REQUIRED CONFIG)
find_package(CLI11 REQUIRED CONFIG)
find_package(nlohmann_json REQUIRED CONFIG)
find_package(Threads REQUIRED)
# PCRE2 through pkg-config where it exists; else the header and library themselves (a bundle has
# no pkg-config). Either way the target is PkgConfig::PCRE2.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PCRE2 QUIET IMPORTED_TARGET libpcre2-8)
endif()
if(NOT TARGET PkgConfig::PCRE2)
  find_path(PCRE2_INCLUDE_DIR pcre2.h)
  find_library(PCRE2_LIBRARY NAMES pcre2-8 libpcre2-8.so.0)
  if(NOT PCRE2_INCLUDE_DIR OR NOT PCRE2_LIBRARY)
    message(FATAL_ERROR "PCRE2 (libpcre2-8) not found: install libpcre2-dev (scripts/setup.sh)")
  endif()
  add_library(PkgConfig::PCRE2 UNKNOWN IMPORTED)
  set_target_properties(PkgConfig::PCRE2 PROPERTIES IMPORTED_LOCATION ${PCRE2_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${PCRE2_INCLUDE_DIR})
endif()

# zstd and snappy decompress parquet pages (src/data/parquet.cpp): the targets NanoddpDeps::zstd and
# NanoddpDeps::snappy, their static archives where they exist (Debian's -dev packages have them), so
# that programs built here run on a machine without libsnappy (the GPU machines, scripts/gpu_deps.sh).
foreach(dep IN ITEMS "zstd|zstd.h|libzstd-dev" "snappy|snappy-c.h|libsnappy-dev")
  string(REPLACE "|" ";" dep "${dep}")
  list(GET dep 0 name)
  list(GET dep 1 header)
  list(GET dep 2 package)
  find_path(NANODDP_${name}_INCLUDE_DIR ${header})
  find_library(NANODDP_${name}_LIBRARY NAMES lib${name}.a ${name})
  if(NOT NANODDP_${name}_INCLUDE_DIR OR NOT NANODDP_${name}_LIBRARY)
    message(FATAL_ERROR "${name} not found: install ${package} (scripts/setup.sh)")
  endif()
  add_library(NanoddpDeps::${name} UNKNOWN IMPORTED)
  set_target_properties(NanoddpDeps::${name} PROPERTIES IMPORTED_LOCATION ${NANODDP_${name}_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${NANODDP_${name}_INCLUDE_DIR})
endforeach()

# nanoddp_resolve(<NAME> <found> <why-not>): fails when ON was asked for and the engine is missing;
# otherwise records NANODDP_HAVE_<NAME> and, when it is off, the reason for the summary line below.
set(NANODDP_ENGINE_SUMMARY "" CACHE INTERNAL "")
function(nanoddp_resolve name found why_not)
  set(mode ${NANODDP_${name}})
  if(mode STREQUAL "OFF")
    set(have 0)
    set(entry "${name} off (NANODDP_${name}=OFF)")
  elseif(NOT found)
    if(mode STREQUAL "ON")
      message(FATAL_ERROR "NANODDP_${name}=ON but ${why_not}; install it (scripts/setup.sh) or use AUTO/OFF")
    endif()
    set(have 0)
    set(entry "${name} off (${why_not})")
  else()
    set(have 1)
    set(entry "${name} on")
  endif()
  set(NANODDP_HAVE_${name} ${have} PARENT_SCOPE)
  set(summary ${NANODDP_ENGINE_SUMMARY})
  list(APPEND summary "${entry}")
  set(NANODDP_ENGINE_SUMMARY "${summary}" CACHE INTERNAL "")
endfunction()

# oneDNN: the CPU GEMM (ops/cpu/matmul.cpp). Without it the CPU backend still works on a portable
# kernel several times slower: enough for the CPU references of the GPU tests on a GPU machine.
if(NOT NANODDP_ONEDNN STREQUAL "OFF")
  find_package(dnnl CONFIG QUIET)
endif()
nanoddp_resolve(ONEDNN "${dnnl_FOUND}" "oneDNN not found (Debian: libdnnl-dev), so the CPU GEMM is the portable kernel")

# Gloo (Debian libgloo-dev ships a CMake package under /usr/share/cmake/Gloo).
if(NOT NANODDP_GLOO STREQUAL "OFF")
  find_package(Gloo CONFIG QUIET PATHS /usr/share/cmake/Gloo)
endif()
nanoddp_resolve(GLOO "${Gloo_FOUND}" "no Gloo CMake package (Debian: libgloo-dev)")

if(NOT NANODDP_MPI STREQUAL "OFF")
  find_package(MPI QUIET COMPONENTS C)
endif()
nanoddp_resolve(MPI "${MPI_C_FOUND}" "no MPI C library (Debian: libopenmpi-dev)")

set(cuda_found FALSE)
set(cuda_why "no nvcc on PATH, in CMAKE_CUDA_COMPILER or at /usr/local/cuda/bin")
if(NOT NANODDP_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Hopper (sm_90) machine code plus portable PTX that any newer GPU can JIT.
      set(CMAKE_CUDA_ARCHITECTURES "90-real;80-virtual")
    endif()
    enable_language(CUDA)
    # The device code is C++20 like the host code (it shares core/dtype.h). CMake 3.25 knows nvcc's
    # -std flags only up to C++17 and would refuse CUDA_STANDARD 20; nvcc >= 12 takes -std=c++20.
    if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    # Debian 12's stock CMake 3.25.1 FindCUDAToolkit sets a deprecation property on
    # CUDA::nvToolsExt whenever the project's minimum version is >= 3.25, without checking that the
    # target exists; CUDA 13 no longer ships nvToolsExt, so configure would stop there. The module
    # reads CMAKE_MINIMUM_REQUIRED_VERSION only for that property, so look the toolkit up as a 3.24
    # project would and restore the version after.
    set(nanoddp_saved_min_version ${CMAKE_MINIMUM_REQUIRED_VERSION})
    set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
    find_package(CUDAToolkit)
    set(CMAKE_MINIMUM_REQUIRED_VERSION ${nanoddp_saved_min_version})
    if(CUDAToolkit_FOUND AND TARGET CUDA::cublasLt)
      set(cuda_found TRUE)
    else()
      set(cuda_why "nvcc found but the CUDA toolkit's libraries (cudart, cuBLASLt) were not")
    endif()
  endif()
endif()
nanoddp_resolve(CUDA "${cuda_found}" "${cuda_why}")

set(nccl_found FALSE)
set(nccl_why "needs the CUDA backend")
if(NANODDP_HAVE_CUDA AND NOT NANODDP_NCCL STREQUAL "OFF")
  # NCCL may come as a Python wheel with only the versioned name (libnccl.so.2): accept that too.
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME PATH_SUFFIXES lib)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME PATH_SUFFIXES include)
  if(NCCL_LIBRARY AND NCCL_INCLUDE_DIR)
    set(nccl_found TRUE)
  else()
    set(nccl_why "libnccl or nccl.h not found (set NCCL_HOME, or install NCCL with the CUDA toolkit)")
  endif()
endif()
nanoddp_resolve(NCCL "${nccl_found}" "${nccl_why}")

# The one line a build prints about its engines (scripts/setup.sh shows it).
string(REPLACE ";" ", " nanoddp_engines "${NANODDP_ENGINE_SUMMARY}")
message(STATUS "nanoddp engines: ${nanoddp_engines}")
