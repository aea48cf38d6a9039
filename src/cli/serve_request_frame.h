// Where the next HTTP/1.1 request ends in the bytes read from a connection, decided by serve's front
// (serve_front.h) before any worker sees the request: the head up to its blank line, then a body of
// exactly Content-Length bytes. Requests whose body length is not known this way, or too large, are
// refused here, each with its own status:
//   411  a POST/PUT/PATCH without Content-Length, or any Transfer-Encoding (chunked bodies are not read)
//   400  a Content-Length that is not a whole number of bytes (-5, 1e3, two different values)
//   413  a Content-Length above the body limit (refused before the body is read)
//   431  a head larger than the head limit
// Pure text in, decision out: no sockets, so tests reach every case.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

namespace nanoddp::cli {

struct RequestFrame {
  enum class State { Incomplete, Complete, Refused };
  State state = State::Incomplete;
  size_t size = 0;               // Complete: the request's bytes, head and body
  bool expect_continue = false;  // the head is complete and asks for "100 Continue" before its body
  int status = 0;                // Refused: the HTTP status
  std::string message;           // Refused: what is wrong and what to do
};

namespace frame_detail {

inline std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

inline RequestFrame refuse(int status, std::string message) {
  RequestFrame f;
  f.state = RequestFrame::State::Refused;
  f.status = status;
  f.message = std::move(message);
  return f;
}

}  // namespace frame_detail

// `buffered`: the bytes read so far, starting at a request. `max_body`: --max_request_bytes.
inline RequestFrame frame_request(std::string_view buffered, uint64_t max_body, size_t max_head) {
  using namespace frame_detail;
  const size_t blank = buffered.find("\r\n\r\n");
  if (blank == std::string_view::npos && buffered.size() <= max_head) return {};
  if (blank == std::string_view::npos || blank + 4 > max_head)
    return refuse(431, fmt::format("the request head is larger than {} bytes", max_head));
  const size_t head = blank + 4;
  const std::string_view lines = buffered.substr(0, blank + 2);
  const std::string method(lines.substr(0, std::min(lines.find(' '), lines.find("\r\n"))));
  bool has_length = false, expect_continue = false;
  uint64_t length = 0;
  // Header lines after the request line: "Name: value\r\n".
  for (size_t pos = lines.find("\r\n") + 2; pos < lines.size();) {
    const size_t eol = lines.find("\r\n", pos);
    const std::string_view line = lines.substr(pos, eol - pos);
    pos = eol + 2;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;  // cpp-httplib answers a malformed line with 400
    const std::string name = lower(trim(line.substr(0, colon)));
    const std::string_view value = trim(line.substr(colon + 1));
    if (name == "transfer-encoding")
      return refuse(411, fmt::format("request bodies with Transfer-Encoding ({}) are not accepted: send the body "
                                     "with a Content-Length (at most {} bytes, --max_request_bytes)", value, max_body));
    if (name == "expect") expect_continue = lower(value) == "100-continue";
    if (name != "content-length") continue;
    uint64_t n = 0;
    const auto parsed = std::from_chars(value.data(), value.data() + value.size(), n);
    const bool digits = !value.empty() && std::all_of(value.begin(), value.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    if (!digits)
      return refuse(400, fmt::format("Content-Length must be a whole number of bytes (got '{}')", value));
    if (parsed.ec == std::errc::result_out_of_range) n = UINT64_MAX;  // all digits, only too large
    if (has_length && n != length)
      return refuse(400, fmt::format("two different Content-Length headers ({} and {})", length, n));
    has_length = true;
    length = n;
  }
  if (!has_length && (method == "POST" || method == "PUT" || method == "PATCH"))
    return refuse(411, fmt::format("a {} needs a Content-Length header with the body's size in bytes (at most {}, "
                                   "--max_request_bytes)", method, max_body));
  if (length > max_body)
    return refuse(413, fmt::format("the request body is larger than {} bytes (--max_request_bytes)", max_body));
  RequestFrame f;
  if (buffered.size() - head < length) {
    f.expect_continue = expect_continue;
    return f;
  }
  f.state = RequestFrame::State::Complete;
  f.size = head + static_cast<size_t>(length);
  return f;
}

}  // namespace nanoddp::cli
