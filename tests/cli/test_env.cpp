// nanoddp env: the table of a job's hosts flags exactly the rows where ranks differ (rendered from
// made-up hosts, since a test has one host); the binary alone and under `nanoddp run` reports its
// checks, with the job's collective checked across both ranks.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/env_table.h"
#include "test_util.h"

namespace nanoddp::cli {
namespace {

EnvReport report(const std::string& host, const std::string& nccl, const std::string& check_status) {
  return {{{"host", host}, {"cpu", "Some CPU"}, {"nccl", nccl}, {"gloo", "0.5.0"}},
          {{"cpu", "ok", "matmul fine"}, {"gloo", check_status, check_status == "ok" ? "sums fine" : "wrong sums"}}};
}

// The table's line whose first word is `key`.
std::string row(const std::string& table, const std::string& key) {
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + " ", 0) == 0) return line;
  return "";
}

TEST(EnvTable, AColumnPerHostAndDiffersOnlyWhereRanksDisagree) {
  // Ranks 0-1 on host a, 2-3 on host b; rank 3 has another NCCL than everyone else, and its check
  // failed: the table shows host b's lowest rank (2), yet the row must still say DIFFERS.
  const std::vector<EnvReport> ranks = {report("a", "2.28.9", "ok"), report("a", "2.28.9", "ok"),
                                        report("b", "2.28.9", "ok"), report("b", "2.21.5", "FAILED")};
  const std::string table = render_env(ranks);
  EXPECT_NE(table.find("a (ranks 0-1, 2 ranks)"), std::string::npos) << table;
  EXPECT_NE(table.find("b (ranks 2-3, 2 ranks)"), std::string::npos) << table;
  EXPECT_NE(row(table, "nccl").find("DIFFERS"), std::string::npos) << table;
  for (const char* same : {"host", "cpu", "gloo"})
    EXPECT_EQ(row(table, same).find("DIFFERS"), std::string::npos) << same << " is the same on every rank:\n" << table;
  EXPECT_NE(table.find("1 row is marked DIFFERS"), std::string::npos) << table;
  EXPECT_NE(table.find("FAILED   on rank 3: wrong sums"), std::string::npos) << table;

  // The same build everywhere: no DIFFERS at all, no advice line.
  const std::string same = render_env({report("a", "2.28.9", "ok"), report("b", "2.28.9", "ok")});
  EXPECT_EQ(same.find("DIFFERS"), std::string::npos) << same;
  EXPECT_NE(same.find("b (rank 1)"), std::string::npos) << same;
}

TEST(EnvTable, JsonRoundTrips) {
  const EnvReport r = report("a", "2.28.9", "FAILED");
  const EnvReport back = from_json(nlohmann::json::parse(to_json(r).dump()));
  EXPECT_EQ(back.fields, r.fields);
  ASSERT_EQ(back.checks.size(), r.checks.size());
  EXPECT_EQ(back.checks[1].status, "FAILED");
  EXPECT_EQ(back.checks[1].detail, "wrong sums");
}

// The JSON that `nanoddp [run ...] env --json` prints, less the launcher's "[rank 0]: " prefixes
// and its own lines.
nlohmann::json env_json(const std::string& args) {
  const auto r = testing::run_command(testing::nanoddp_binary() + " " + args + " 2>/dev/null");
  EXPECT_EQ(r.status, 0) << r.output;
  std::string json;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("[rank 0]: ", 0) == 0) line = line.substr(10);
    if (line.rfind("nanoddp run:", 0) == 0) continue;
    json += line + "\n";
  }
  try {
    return nlohmann::json::parse(json);
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what() << " in:\n" << r.output;
    return {};
  }
}

std::string check_status(const EnvReport& r, const std::string& name) {
  for (const auto& c : r.checks)
    if (c.name == name) return c.status;
  return "absent";
}

TEST(Env, AloneAndUnderTheLauncherEveryEngineCheckPassesOrSaysWhyNot) {
  const EnvReport alone = from_json(env_json("env --json"));
  EXPECT_EQ(alone.fields.at(0).first, "host");
  EXPECT_EQ(check_status(alone, "cpu"), "ok");
  EXPECT_EQ(check_status(alone, "gloo"), "ok");  // the default build has Gloo (scripts/setup.sh)
  for (const auto& c : alone.checks) EXPECT_NE(c.status, "FAILED") << c.name << ": " << c.detail;

  const auto job = env_json("run --standalone --nproc_per_node 2 env --json");
  ASSERT_TRUE(job.is_array()) << job.dump();
  ASSERT_EQ(job.size(), 2u);
  for (const auto& j : job) {
    const EnvReport r = from_json(j);
    EXPECT_EQ(check_status(r, "gloo"), "ok") << "the job's own collective, across both ranks";
    for (const auto& c : r.checks) {
      if (c.name == "gloo") {
        EXPECT_NE(c.detail.find("over 2 ranks"), std::string::npos) << c.detail;
      }
    }
  }
}

}  // namespace
}  // namespace nanoddp::cli
