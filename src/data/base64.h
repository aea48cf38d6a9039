// Standard base64 (RFC 4648, with '=' padding), as tiktoken's rank files store token bytes.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace nanoddp::data {

std::string base64_encode(std::string_view bytes);
// nullopt when `text` is not canonical padded base64.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace nanoddp::data
