// Fuzzes the parquet reader (data/parquet.h): the input is the whole file. A file whose footer the
// reader accepts is read in full, every row group, as data prepare would; the property is the
// contract of fuzz_support.h (nothing but nanoddp::Error, no sanitizer report, no huge allocation).
#include "data/parquet.h"
#include "fuzz_support.h"

using nanoddp::fuzz::ScratchFile;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ScratchFile file("parquet");
  file.write(nanoddp::fuzz::as_text(data, size));
  nanoddp::fuzz::expect_only_errors([&] {
    nanoddp::data::ParquetTextReader reader(file.path());
    for (size_t g = 0; g < reader.row_groups(); g++) reader.read_row_group(g);
  });
  return 0;
}
