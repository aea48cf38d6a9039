// core/trace: what --trace writes is Chrome's trace event format -- valid JSON once wrapped in
// brackets, one process per rank named "rank N", the compute and communication rows as threads 0
// and 1 -- and nothing is recorded while tracing is off.
#include "core/trace.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace nanoddp {
namespace {

// The process-wide recorder, off and empty before and after each test.
class Trace : public ::testing::Test {
 protected:
  void SetUp() override { reset(); }
  void TearDown() override { reset(); }
  static void reset() {
    trace::enable(false);
    trace::set_origin();
  }
  // take_events_json's elements as one JSON array; fails the test when they do not parse.
  static nlohmann::json take(int pid) {
    const std::string text = "[" + trace::take_events_json(pid) + "]";
    nlohmann::json events;
    EXPECT_NO_THROW(events = nlohmann::json::parse(text)) << text;
    return events;
  }
  // The events that are not metadata ("ph": "M").
  static std::vector<nlohmann::json> recorded(const nlohmann::json& events) {
    std::vector<nlohmann::json> out;
    for (const auto& e : events)
      if (e.at("ph") != "M") out.push_back(e);
    return out;
  }
};

TEST_F(Trace, OffRecordsNothing) {
  EXPECT_FALSE(trace::enabled());
  { trace::Scope s("forward"); }
  trace::record("backward", trace::kCompute, 1, 2);
  trace::instant("launch", trace::kComm, 3);
  EXPECT_TRUE(recorded(take(0)).empty());
}

// The metadata names the process after the rank and sorts it by rank, and names both rows.
TEST_F(Trace, MetadataNamesTheRankAndBothTracks) {
  const nlohmann::json events = take(3);
  int process_names = 0, thread_names = 0;
  for (const auto& e : events) {
    EXPECT_EQ(e.at("ph"), "M");
    EXPECT_EQ(e.at("pid"), 3);
    if (e.at("name") == "process_name") {
      process_names++;
      EXPECT_EQ(e.at("args").at("name"), "rank 3");
    } else if (e.at("name") == "process_sort_index") {
      EXPECT_EQ(e.at("args").at("sort_index"), 3);
    } else if (e.at("name") == "thread_name") {
      thread_names++;
      const int tid = e.at("tid");
      EXPECT_EQ(e.at("args").at("name"), tid == trace::kCompute ? "compute" : "communication");
    }
  }
  EXPECT_EQ(process_names, 1);
  EXPECT_EQ(thread_names, 2);
}

TEST_F(Trace, EventsCarryTheirTrackTimesAndArgs) {
  trace::enable(true);
  trace::record("allreduce", trace::kComm, 10.5, 30.25, 4096);
  trace::record("optimizer", trace::kCompute, 40, 41);  // no bytes: no args
  trace::instant("bucket_ready", trace::kComm, 0);
  trace::instant("checkpoint", trace::kCompute);  // default arg: no args
  const auto events = recorded(take(2));
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].at("name"), "allreduce");
  EXPECT_EQ(events[0].at("ph"), "X");
  EXPECT_EQ(events[0].at("pid"), 2);
  EXPECT_EQ(events[0].at("tid"), trace::kComm);
  EXPECT_DOUBLE_EQ(events[0].at("ts").get<double>(), 10.5);
  EXPECT_DOUBLE_EQ(events[0].at("dur").get<double>(), 19.75);
  EXPECT_EQ(events[0].at("args").at("bytes"), 4096);
  EXPECT_EQ(events[1].at("tid"), trace::kCompute);
  EXPECT_FALSE(events[1].contains("args"));
  EXPECT_EQ(events[2].at("ph"), "i");
  EXPECT_EQ(events[2].at("s"), "t");
  EXPECT_EQ(events[2].at("args").at("bucket"), 0);
  EXPECT_EQ(events[3].at("tid"), trace::kCompute);
  EXPECT_FALSE(events[3].contains("args"));
  // Taken means cleared.
  EXPECT_TRUE(recorded(take(2)).empty());
}

// A Scope's interval lies within the times read just before and after it, on the clock that
// set_origin() started.
TEST_F(Trace, ScopeRecordsItsLifetimeSinceTheOrigin) {
  trace::enable(true);
  trace::set_origin();
  const double before = trace::now_us();
  { trace::Scope s("data", trace::kCompute, 128); }
  const double after = trace::now_us();
  const auto events = recorded(take(0));
  ASSERT_EQ(events.size(), 1u);
  const double ts = events[0].at("ts"), dur = events[0].at("dur");
  // The JSON holds times to 0.001 us: allow that rounding either way.
  EXPECT_GE(ts, before - 1e-3);
  EXPECT_GE(dur, 0);
  EXPECT_LE(ts + dur, after + 2e-3);
  EXPECT_GE(before, 0);
  EXPECT_EQ(events[0].at("args").at("bytes"), 128);
}

// set_origin() starts a new timeline: what was recorded before it is gone.
TEST_F(Trace, SetOriginClearsEarlierEvents) {
  trace::enable(true);
  trace::record("old", trace::kCompute, 1, 2);
  trace::set_origin();
  trace::record("new", trace::kCompute, 1, 2);
  const auto events = recorded(take(0));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].at("name"), "new");
}

// The comm worker records while the training thread does: no event is lost or torn.
TEST_F(Trace, ThreadsRecordConcurrently) {
  trace::enable(true);
  const int threads = 4, per_thread = 5000;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; t++)
    pool.emplace_back([t] {
      for (int i = 0; i < per_thread; i++) trace::record(t % 2 ? "comm" : "compute", trace::Track(t % 2), i, i + 1);
    });
  for (auto& th : pool) th.join();
  const auto events = recorded(take(0));
  ASSERT_EQ(events.size(), size_t{threads * per_thread});
  for (const auto& e : events) EXPECT_EQ(e.at("name"), e.at("tid") == trace::kComm ? "comm" : "compute");
}

// A run traced for too long keeps its first kMaxEvents and counts the rest.
TEST_F(Trace, EventsPastTheLimitAreCountedNotKept) {
  trace::enable(true);
  const int64_t dropped_before = trace::dropped();
  for (int64_t i = 0; i < trace::kMaxEvents + 3; i++) trace::record("step", trace::kCompute, 0, 1);
  EXPECT_EQ(trace::dropped() - dropped_before, 3);
  // Counted in the text: parsing a million events would cost more than the rest of this suite.
  const std::string text = trace::take_events_json(0);
  int64_t kept = 0;
  for (size_t at = text.find(R"("ph":"X")"); at != std::string::npos; at = text.find(R"("ph":"X")", at + 1)) kept++;
  EXPECT_EQ(kept, trace::kMaxEvents);
}

}  // namespace
}  // namespace nanoddp
