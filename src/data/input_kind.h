// What kind of file an input to `data prepare` or `tokenizer train` is, read from its first bytes:
// parquet (read through parquet.h), text (plain or JSONL), or anything else, which is refused.
//
// Note [binary input]: a compressed or binary file fed to the byte-level tokenizers "works": every
// byte is a token, and the run ends with exit 0 and a dataset of noise. So before a file is read,
// its first 64 KiB are checked, in this order:
//  1. magic numbers of the formats a corpus arrives in (gzip, zstd, bzip2, xz, zip, 7z, tar, and
//     others), so that the message can name the format and say to decompress it;
//  2. a NUL byte: text (UTF-8, ASCII, Latin-1) never holds one, while compressed or binary data
//     has one about every 256 bytes, and UTF-16 text has one in every ASCII character;
//  3. invalid UTF-8 in more than 30% of the bytes: binary data without NULs. Text in a legacy
//     8-bit encoding (Latin-1, Windows-1252) stays far below that, as only its accented letters
//     are invalid, and is still read as bytes.
#pragma once

#include <string>
#include <string_view>

namespace nanoddp::data {

enum class InputKind { kText, kParquet };

// Throws nanoddp::Error naming the file and what it seems to be when it is neither text nor
// parquet (Note [binary input]), or when it cannot be read.
InputKind input_kind(const std::string& path);

// Empty when `head` (a file's first bytes) looks like text, else what it looks like ("a gzip file").
std::string binary_kind(std::string_view head);

}  // namespace nanoddp::data
