// Fuzzes the safetensors reader (core/safetensors.h): the input is the whole file. A file the
// reader accepts is then used as a checkpoint load uses it: every tensor's shape and dtype, and a
// host copy of each, so an extent the header validation let through is read and caught by ASan.
// Accepted or not, the file must be unmapped once the reader is gone.
#include "core/safetensors.h"
#include "fuzz_support.h"

using nanoddp::fuzz::ScratchFile;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ScratchFile file("safetensors");
  file.write(nanoddp::fuzz::as_text(data, size));
  nanoddp::fuzz::expect_only_errors([&] {
    nanoddp::SafetensorsFile st(file.path());
    for (const std::string& name : st.names()) {
      nanoddp::Shape shape = st.shape(name);
      nanoddp::Tensor t = st.read(name);
      nanoddp::fuzz::require(t.numel() == shape.numel() && t.dtype() == st.dtype(name),
                             "read() returned another shape or dtype than the header's");
      // Every byte of the data section that a tensor claims must fit in the file.
      nanoddp::fuzz::require(t.nbytes() <= size, "a tensor larger than the file was accepted");
    }
  });
  nanoddp::fuzz::require_unmapped(file.path());
  return 0;
}
