// cuDNN 9, opened at run time: nanoddp never links it, so a build or a machine without cuDNN
// still trains (attention then runs on our flash kernels). Host code only; it needs no cuDNN
// header, so it is built and tested on every CUDA build, GPU or not.
//
// Where it looks, first hit wins:
//  1. NANODDP_CUDNN_PATH, a libcudnn.so.9 file or the folder holding it; when set, nothing else is
//     tried (a path the user named that does not load is an error to report, not to step over);
//  2. the dynamic linker's own search for libcudnn.so.9 (LD_LIBRARY_PATH, the ld.so cache);
//  3. PyTorch's wheel, nvidia/cudnn/lib under a Python's site-packages or dist-packages: the
//     environment of the python3 on PATH, $VIRTUAL_ENV, $CONDA_PREFIX, ~/.local and /usr/local.
//     The GPU machines have cuDNN only there, with no plain libcudnn.so names.
// cuDNN 9's libcudnn.so.9 is a small dispatcher that opens its sub-libraries (libcudnn_graph.so.9,
// the engines) by name. When it was found by path, its sub-libraries are opened first from the same
// folder, so that the dispatcher finds them loaded whatever the linker's search path says.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace nanoddp::cuda {

// The entry points nanoddp calls, as untyped addresses (the graph code casts them to cuDNN's
// signatures, from its headers).
struct CudnnEntryPoints {
  void* get_version = nullptr;          // size_t cudnnGetVersion(void)
  void* get_error_string = nullptr;     // const char* cudnnGetErrorString(cudnnStatus_t)
  void* get_last_error_string = nullptr;  // void cudnnGetLastErrorString(char*, size_t)
  void* create = nullptr;               // cudnnCreate
  void* destroy = nullptr;              // cudnnDestroy
  void* set_stream = nullptr;           // cudnnSetStream
  void* backend_create = nullptr;       // cudnnBackendCreateDescriptor
  void* backend_destroy = nullptr;      // cudnnBackendDestroyDescriptor
  void* backend_set = nullptr;          // cudnnBackendSetAttribute
  void* backend_get = nullptr;          // cudnnBackendGetAttribute
  void* backend_finalize = nullptr;     // cudnnBackendFinalize
  void* backend_execute = nullptr;      // cudnnBackendExecute
};

struct CudnnLibrary {
  bool loaded = false;
  std::string path;         // the file that loaded (or the linker's name for it)
  size_t version = 0;       // cudnnGetVersion(): major * 10000 + minor * 100 + patch
  std::string why_not;      // when not loaded: every place tried and what each said
  CudnnEntryPoints fn;

  // "9.19.0"
  std::string version_string() const;
};

// The candidates of steps 1-3 above, in order. `env_path` is NANODDP_CUDNN_PATH's value (null when
// unset); `home`, `virtual_env`, `conda_prefix` and `path_env` the variables of those names.
std::vector<std::string> cudnn_candidates(const char* env_path, const char* home, const char* virtual_env,
                                          const char* conda_prefix, const char* path_env);

// Tries each candidate (a file path, or a bare soname for the linker's search) until one loads as
// cuDNN 9 with every entry point. Never throws: a failure is described in why_not.
CudnnLibrary open_cudnn(const std::vector<std::string>& candidates);

// The process's cuDNN: open_cudnn over the candidates of this process's environment, once.
const CudnnLibrary& cudnn_library();

// Opens the engine sub-libraries (precompiled and runtime-compiled kernels, heuristics) beside a
// library that was found by path; a no-op otherwise. Called before the first graph is built, so that
// `nanoddp env` (which only asks the version) does not map 300 MB of kernels.
void cudnn_load_engines(const CudnnLibrary& lib);

}  // namespace nanoddp::cuda
