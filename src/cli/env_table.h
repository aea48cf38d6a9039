// nanoddp env's report of one rank (its machine's fields and its engine checks), its JSON form, and
// the text: one process's as a list, a job's as a table with a column per host and DIFFERS on the
// rows where any two ranks disagree (the multi-host check the guides do by hand). Header-only so
// that tests/cli can render tables of made-up hosts.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/consistency.h"

namespace nanoddp::cli {

using Fields = dist::Fields;

// One engine check: status "ok", "FAILED" or "skipped", with what was done or why.
struct Check {
  std::string name, status, detail;
};

// What one rank found. fields[0] is {"host", hostname}.
struct EnvReport {
  Fields fields;
  std::vector<Check> checks;
};

inline nlohmann::json to_json(const EnvReport& r) {
  nlohmann::json f = nlohmann::json::array(), c = nlohmann::json::array();
  for (const auto& [k, v] : r.fields) f.push_back({k, v});
  for (const auto& ch : r.checks) c.push_back({ch.name, ch.status, ch.detail});
  return {{"fields", f}, {"checks", c}};
}

inline EnvReport from_json(const nlohmann::json& j) {
  EnvReport r;
  for (const auto& kv : j.at("fields")) r.fields.emplace_back(kv.at(0), kv.at(1));
  for (const auto& c : j.at("checks")) r.checks.push_back({c.at(0), c.at(1), c.at(2)});
  return r;
}

namespace env_detail {

inline std::string clip(const std::string& s, size_t width) {
  return s.size() <= width ? s : s.substr(0, width - 3) + "...";
}

inline std::string value_of(const EnvReport& r, const std::string& key) {
  for (const auto& [k, v] : r.fields)
    if (k == key) return v;
  return "(missing)";
}

}  // namespace env_detail

// One report: "key  value" lines and the checks. Several (rank order): the table.
inline std::string render_env(const std::vector<EnvReport>& ranks) {
  using namespace env_detail;
  std::string out;
  if (ranks.empty()) return out;
  size_t kw = 0;
  for (const auto& [k, v] : ranks[0].fields) kw = std::max(kw, k.size());
  if (ranks.size() == 1) {
    for (const auto& [k, v] : ranks[0].fields) out += fmt::format("{:<{}}  {}\n", k, kw, v);
    out += "checks:\n";
    for (const auto& c : ranks[0].checks) out += fmt::format("  {:<6} {:<8} {}\n", c.name, c.status, c.detail);
    return out;
  }
  // A column per host, showing its lowest rank's values; hosts in order of their first rank.
  std::vector<std::string> hosts;
  std::map<std::string, std::vector<size_t>> ranks_of;
  for (size_t r = 0; r < ranks.size(); r++) {
    const std::string h = value_of(ranks[r], "host");
    if (!ranks_of.count(h)) hosts.push_back(h);
    ranks_of[h].push_back(r);
  }
  auto title = [&](const std::string& h) {
    const auto& rs = ranks_of[h];
    return rs.size() == 1 ? fmt::format("{} (rank {})", h, rs[0]) : fmt::format("{} (ranks {}-{}, {} ranks)", h,
                                                                                 rs.front(), rs.back(), rs.size());
  };
  // Each column as wide as its widest value, up to kMaxWidth: the table stays readable for 8 hosts.
  constexpr size_t kMaxWidth = 48;
  std::map<std::string, size_t> width;
  for (const auto& h : hosts) {
    size_t w = title(h).size();
    for (const auto& [k, v] : ranks[ranks_of[h][0]].fields) w = std::max(w, v.size());
    width[h] = std::min(w, kMaxWidth);
  }
  std::string line = fmt::format("{:<{}}", "", kw);
  for (const auto& h : hosts) line += fmt::format("  {:<{}}", clip(title(h), width[h]), width[h]);
  out += line.substr(0, line.find_last_not_of(' ') + 1) + "\n";
  int differing = 0;
  for (const auto& [key, unused] : ranks[0].fields) {
    bool same = true;
    for (size_t r = 1; r < ranks.size(); r++) same &= key == "host" || value_of(ranks[r], key) == value_of(ranks[0], key);
    line = fmt::format("{:<{}}", key, kw);
    for (const auto& h : hosts) line += fmt::format("  {:<{}}", clip(value_of(ranks[ranks_of[h][0]], key), width[h]), width[h]);
    line = line.substr(0, line.find_last_not_of(' ') + 1);
    if (!same) {
      line += "  DIFFERS";
      differing++;
    }
    out += line + "\n";
  }
  out += fmt::format("checks ({} ranks):\n", ranks.size());
  for (size_t c = 0; c < ranks[0].checks.size(); c++) {
    const Check& first = ranks[0].checks[c];
    const Check* failed = nullptr;
    size_t failed_rank = 0;
    for (size_t r = 0; r < ranks.size() && !failed; r++)
      if (c < ranks[r].checks.size() && ranks[r].checks[c].status == "FAILED") failed = &ranks[r].checks[c], failed_rank = r;
    if (failed)
      out += fmt::format("  {:<6} {:<8} on rank {}: {}\n", first.name, "FAILED", failed_rank, failed->detail);
    else
      out += fmt::format("  {:<6} {:<8} {}\n", first.name, first.status, first.detail);
  }
  if (differing > 0)
    out += fmt::format("{} row{} marked DIFFERS: install the same nanoddp build, libraries and drivers on every host\n",
                       differing, differing == 1 ? " is" : "s are");
  return out;
}

}  // namespace nanoddp::cli
