#include "ops/cuda/cudnn_library.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string_view>

namespace nanoddp::cuda {

namespace {

constexpr const char* kSoname = "libcudnn.so.9";

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

// Every match of a glob pattern, sorted (glob's order), none when nothing matches.
std::vector<std::string> glob_all(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g{};
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; i++) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  return out;
}

// PyTorch's cuDNN wheel under a Python prefix (a venv, a conda env, /usr/local, ~/.local).
void add_wheel_dirs(std::vector<std::string>& out, const std::string& prefix) {
  for (const char* pkgs : {"site-packages", "dist-packages"})
    for (auto& lib : glob_all(fmt::format("{}/lib/python3*/{}/nvidia/cudnn/lib/{}", prefix, pkgs, kSoname)))
      out.push_back(lib);
}

// The prefixes of each python3 on PATH: the folder above its bin/, as found and with links resolved
// (a venv's python3 links to the system's, but its packages are the venv's).
void add_path_pythons(std::vector<std::string>& out, const char* path_env) {
  if (path_env == nullptr) return;
  std::string_view rest(path_env);
  while (!rest.empty()) {
    const size_t colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    const std::string py = dir + "/python3";
    if (dir.empty() || !exists(py)) continue;
    add_wheel_dirs(out, std::filesystem::path(dir).parent_path().string());
    std::error_code ec;
    const auto real = std::filesystem::canonical(py, ec);
    if (!ec) add_wheel_dirs(out, real.parent_path().parent_path().string());
  }
}

template <typename T>
T sym(void* handle, const char* name, std::string& missing) {
  void* p = ::dlsym(handle, name);
  if (p == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(name);
  return static_cast<T>(p);
}

// Opens `file` (a path, or the soname for the linker's search) as cuDNN 9, or says why not.
bool try_open(const std::string& file, CudnnLibrary& lib, std::string& why) {
  const bool by_path = file.find('/') != std::string::npos;
  if (by_path && !exists(file)) {
    why = "no such file";
    return false;
  }
  if (by_path) {  // the dispatcher's graph library first, from the same folder (see the header)
    const std::string graph = std::filesystem::path(file).parent_path().string() + "/libcudnn_graph.so.9";
    if (exists(graph) && ::dlopen(graph.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) {
      why = fmt::format("its libcudnn_graph.so.9 does not load: {}", ::dlerror());
      return false;
    }
  }
  void* h = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = ::dlerror();
    why = e ? e : "dlopen failed";
    return false;
  }
  std::string missing;
  CudnnEntryPoints f;
  f.get_version = sym<void*>(h, "cudnnGetVersion", missing);
  f.get_error_string = sym<void*>(h, "cudnnGetErrorString", missing);
  f.get_last_error_string = sym<void*>(h, "cudnnGetLastErrorString", missing);
  f.create = sym<void*>(h, "cudnnCreate", missing);
  f.destroy = sym<void*>(h, "cudnnDestroy", missing);
  f.set_stream = sym<void*>(h, "cudnnSetStream", missing);
  f.backend_create = sym<void*>(h, "cudnnBackendCreateDescriptor", missing);
  f.backend_destroy = sym<void*>(h, "cudnnBackendDestroyDescriptor", missing);
  f.backend_set = sym<void*>(h, "cudnnBackendSetAttribute", missing);
  f.backend_get = sym<void*>(h, "cudnnBackendGetAttribute", missing);
  f.backend_finalize = sym<void*>(h, "cudnnBackendFinalize", missing);
  f.backend_execute = sym<void*>(h, "cudnnBackendExecute", missing);
  if (!missing.empty()) {
    why = fmt::format("not cuDNN 9's library: it lacks {}", missing);
    ::dlclose(h);
    return false;
  }
  const size_t version = reinterpret_cast<size_t (*)()>(f.get_version)();
  if (version < 90000 || version >= 100000) {
    why = fmt::format("cudnnGetVersion() says {}, nanoddp needs cuDNN 9", version);
    ::dlclose(h);
    return false;
  }
  lib.loaded = true;
  lib.path = file;
  lib.version = version;
  lib.fn = f;
  return true;  // never closed: its entry points live as long as the process
}

}  // namespace

std::string CudnnLibrary::version_string() const {
  return fmt::format("{}.{}.{}", version / 10000, version % 10000 / 100, version % 100);
}

std::vector<std::string> cudnn_candidates(const char* env_path, const char* home, const char* virtual_env,
                                          const char* conda_prefix, const char* path_env) {
  if (env_path != nullptr) {
    const std::string p(env_path);
    return {is_dir(p) ? p + "/" + kSoname : p};
  }
  std::vector<std::string> out{kSoname};
  add_path_pythons(out, path_env);
  for (const char* prefix : {virtual_env, conda_prefix})
    if (prefix != nullptr && *prefix != '\0') add_wheel_dirs(out, prefix);
  if (home != nullptr && *home != '\0') add_wheel_dirs(out, std::string(home) + "/.local");
  add_wheel_dirs(out, "/usr/local");
  add_wheel_dirs(out, "/usr");
  // One entry per file, in first-found order (the same prefix is often reached twice).
  std::vector<std::string> unique;
  for (auto& c : out)
    if (std::find(unique.begin(), unique.end(), c) == unique.end()) unique.push_back(c);
  return unique;
}

CudnnLibrary open_cudnn(const std::vector<std::string>& candidates) {
  CudnnLibrary lib;
  for (const auto& c : candidates) {
    std::string why;
    if (try_open(c, lib, why)) return lib;
    lib.why_not += fmt::format("{}{}: {}", lib.why_not.empty() ? "" : "; ", c, why);
  }
  if (candidates.empty()) lib.why_not = "nowhere to look";
  return lib;
}

const CudnnLibrary& cudnn_library() {
  static const CudnnLibrary lib = open_cudnn(cudnn_candidates(
      std::getenv("NANODDP_CUDNN_PATH"), std::getenv("HOME"), std::getenv("VIRTUAL_ENV"),
      std::getenv("CONDA_PREFIX"), std::getenv("PATH")));
  return lib;
}

void cudnn_load_engines(const CudnnLibrary& lib) {
  if (!lib.loaded || lib.path.find('/') == std::string::npos) return;
  static std::once_flag once;
  std::call_once(once, [&] {
    const std::string dir = std::filesystem::path(lib.path).parent_path().string();
    for (const char* sub : {"libcudnn_heuristic.so.9", "libcudnn_engines_precompiled.so.9",
                            "libcudnn_engines_runtime_compiled.so.9", "libcudnn_ops.so.9"}) {
      const std::string f = dir + "/" + sub;
      if (exists(f)) ::dlopen(f.c_str(), RTLD_NOW | RTLD_LOCAL);  // a failure shows at plan building
    }
  });
}

}  // namespace nanoddp::cuda
