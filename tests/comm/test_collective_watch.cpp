// CollectiveWatch on its own: this rank's watch reads the progress that fake ranks publish to an
// in-memory store, each fake rank beating or not, at the collective or behind it, or gone; and a
// blocked collective is abandoned when the store knows a peer is gone. (The real groups' diagnoses
// are tested in test_gloo_threads.cpp and test_multiprocess.cpp.)
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <mutex>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/collective_watch.h"
#include "core/error.h"
#include "rendezvous/hash_store.h"

namespace nanoddp::dist {
namespace {

using namespace std::chrono_literals;

// Publishes "progress/<rank>" = "<issued> <beat>" as a rank's heartbeat thread would: once, or
// every 10 ms while `beating` (the watch's interval is 100 ms, so a live beat always advances over
// the three intervals diagnose() watches).
class FakeRank {
 public:
  FakeRank(std::shared_ptr<Store> store, int rank, uint64_t issued, bool beating)
      : store_(std::move(store)), key_("progress/" + std::to_string(rank)), issued_(issued) {
    publish();
    if (beating) thread_ = std::thread([this] {
        while (!stop_) {
          std::this_thread::sleep_for(10ms);
          publish();
        }
      });
  }
  ~FakeRank() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  void publish() { store_->set_string(key_, std::to_string(issued_) + " " + std::to_string(++beat_)); }

  std::shared_ptr<Store> store_;
  std::string key_;
  uint64_t issued_, beat_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct RankSpec {
  uint64_t issued;
  bool beating;
};

// Rank 0's diagnosis of collective #2 with ranks 1.. as given.
std::string diagnose_with(const std::vector<RankSpec>& others) {
  auto store = std::make_shared<HashStore>();
  const int size = int(others.size()) + 1;
  std::vector<std::unique_ptr<FakeRank>> ranks;
  for (int r = 1; r < size; r++)
    ranks.push_back(std::make_unique<FakeRank>(store, r, others[r - 1].issued, others[r - 1].beating));
  CollectiveWatch watch(store, 0, size, 1000ms);
  watch.issued(2);
  return watch.diagnose(2);
}

TEST(CollectiveWatch, EveryRankThereAndBeatingBlamesTheNetwork) {
  std::string e = diagnose_with({{2, true}, {2, true}});
  EXPECT_NE(e.find("every rank had reached it, so data is not getting through between them: check the network"),
            std::string::npos)
      << e;
}

// A rank killed or frozen (OOM killer, crash, SIGSTOP) while its collective was in flight had reached
// it: its stopped heartbeat names it. Was: "every rank had reached it ... check the network".
TEST(CollectiveWatch, ARankThatStoppedInsideTheCollectiveIsNamed) {
  std::string e = diagnose_with({{2, true}, {2, false}});
  EXPECT_NE(e.find("every rank had reached it, but rank 2 stopped sending heartbeats: it died or froze in it"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("see its output"), std::string::npos) << e;
  EXPECT_EQ(e.find("network"), std::string::npos) << e;
  EXPECT_EQ(e.find("rank 1"), std::string::npos) << e;

  e = diagnose_with({{3, false}, {2, true}, {2, false}});  // ahead of this rank counts as there
  EXPECT_NE(e.find("but ranks 1, 3 stopped sending heartbeats: they died or froze in it"), std::string::npos) << e;
  EXPECT_NE(e.find("see their output"), std::string::npos) << e;
}

// A rank behind is what the diagnosis names first, beating or not, as before.
TEST(CollectiveWatch, RanksBehindAreNamedWithTheirState) {
  std::string e = diagnose_with({{1, true}, {2, false}});
  EXPECT_NE(e.find("rank 1 had not reached it (rank 1: its last collective was #1 and it is still running"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("rank 1 may have crashed or stalled; see its output"), std::string::npos) << e;

  e = diagnose_with({{1, false}, {0, true}});
  EXPECT_NE(e.find("ranks 1, 2 had not reached it (rank 1: its last collective was #1 and its heartbeat stopped: "
                   "the process is gone or frozen; rank 2: its last collective was #0 and it is still running"),
            std::string::npos)
      << e;
}

TEST(CollectiveWatch, ARankThatNeverReportedIsNamed) {
  auto store = std::make_shared<HashStore>();
  FakeRank one(store, 1, 2, true);
  CollectiveWatch watch(store, 0, 3, 1000ms);
  std::string e = watch.diagnose(2);
  EXPECT_NE(e.find("rank 2 had not reached it (rank 2: it never reported progress)"), std::string::npos) << e;
}

// A store whose next set() calls fail: after 30 ms, as a request whose reply did not come in time,
// or at once, as a connection that was lost.
class FlakyStore final : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override {
    if (fail_next > 0) {
      fail_next--;
      if (slowly) std::this_thread::sleep_for(30ms);
      throw Error("the rendezvous store failed");
    }
    inner.set(key, value);
  }
  Bytes get(const std::string& key) override { return inner.get(key); }
  int64_t add(const std::string& key, int64_t delta) override { return inner.add(key, delta); }
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    return inner.compare_set(key, expected, desired);
  }
  bool erase(const std::string& key) override { return inner.erase(key); }
  bool check(const std::vector<std::string>& keys) override { return inner.check(keys); }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    inner.wait(keys, timeout);
  }
  using Store::wait;

  std::atomic<int> fail_next{0};
  std::atomic<bool> slowly{true};
  HashStore inner;
};

int64_t beat_of(FlakyStore& store) {
  const std::string v = store.inner.get_string("progress/0");
  return std::stoll(v.substr(v.find(' ') + 1));
}

// Waits up to 10 s for `done`.
template <typename F>
bool eventually(F done) {
  for (auto end = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < end;) {
    if (done()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return done();
}

// Two requests that time out do not end a rank's heartbeats: otherwise the others' diagnoses would
// name a healthy rank as frozen for the rest of the run. Three in a row do (the store is gone).
TEST(CollectiveWatch, HeartbeatsOutliveRequestsThatTimeOut) {
  auto store = std::make_shared<FlakyStore>();
  CollectiveWatch watch(store, 0, 2, 200ms);  // a heartbeat every 20 ms
  store->fail_next = 2;
  ASSERT_TRUE(eventually([&] { return store->fail_next == 0; }));
  const int64_t after_failures = beat_of(*store);
  EXPECT_TRUE(eventually([&] { return beat_of(*store) > after_failures + 2; }))
      << "the heartbeat stopped after two requests timed out";
  store->fail_next = 3;
  ASSERT_TRUE(eventually([&] { return store->fail_next == 0; }));
  const int64_t stopped = beat_of(*store);
  std::this_thread::sleep_for(300ms);  // fifteen intervals
  EXPECT_EQ(beat_of(*store), stopped) << "the heartbeat went on after three timeouts in a row";
}

// A connection lost at once means the store is gone: the heartbeats end at the first failure,
// rather than spend beats reconnecting.
TEST(CollectiveWatch, HeartbeatsEndWhenTheStoreIsGone) {
  auto store = std::make_shared<FlakyStore>();
  store->slowly = false;
  CollectiveWatch watch(store, 0, 2, 200ms);
  store->fail_next = 1;
  ASSERT_TRUE(eventually([&] { return store->fail_next == 0; }));
  const int64_t stopped = beat_of(*store);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(beat_of(*store), stopped);
}

// What an Abandon callback was called with.
struct Abandoned {
  std::mutex mu;
  uint64_t seq = 0;
  std::string why;
  Abandon callback() {
    return [this](uint64_t s, const std::string& w) {
      std::lock_guard lock(mu);
      seq = s;
      why = w;
    };
  }
  uint64_t get_seq() {
    std::lock_guard lock(mu);
    return seq;
  }
};

// Note [known departures]: the launcher's report of a failed worker ends a blocked collective's
// wait, naming the rank; a collective that finished is left alone.
TEST(CollectiveWatch, ABlockedCollectiveIsAbandonedWhenTheLauncherReportsAFailedRank) {
  auto store = std::make_shared<HashStore>();
  std::atomic<bool> reported{false};
  Departures launcher = [&]() -> std::string { return reported ? "rank 1 (pid 42 on node0) exited with code 7" : ""; };
  Abandoned got;
  CollectiveWatch watch(store, 0, 2, 60s, launcher, got.callback());
  watch.issued(1);
  watch.finished(1);
  watch.issued(2);
  std::this_thread::sleep_for(CollectiveWatch::kBlockedAfter * 3);
  EXPECT_EQ(got.get_seq(), 0u) << "abandoned without a departure";
  reported = true;
  ASSERT_TRUE(eventually([&] { return got.get_seq() != 0; }));
  EXPECT_EQ(got.seq, 2u);
  EXPECT_EQ(got.why, "rank 1 (pid 42 on node0) exited with code 7, as the launcher reports: see its output");
}

TEST(CollectiveWatch, NothingIsAbandonedWhileNoCollectiveIsPending) {
  auto store = std::make_shared<HashStore>();
  Abandoned got;
  CollectiveWatch watch(store, 0, 2, 60s, [] { return std::string("rank 1 exited with code 7"); }, got.callback());
  watch.issued(1);
  watch.finished(1);
  std::this_thread::sleep_for(CollectiveWatch::kBlockedAfter * 3);
  EXPECT_EQ(got.get_seq(), 0u);
}

// A rank whose group was destroyed marks its progress "left"; one that left before reaching the
// collective is not coming, one that left after it had reached it is no reason to give up.
TEST(CollectiveWatch, ARankThatLeftBeforeReachingTheCollectiveIsADeparture) {
  auto store = std::make_shared<HashStore>();
  {
    CollectiveWatch leaving(store, 1, 2, 60s);
    leaving.issued(1);
  }
  EXPECT_EQ(store->get_string("progress/1").substr(1), " 2 left");  // its last collective, a beat, "left"
  Abandoned got;
  CollectiveWatch watch(store, 0, 2, 60s, {}, got.callback());
  EXPECT_EQ(watch.known_departure(1), "");  // it had reached #1
  watch.issued(1);
  watch.finished(1);
  watch.issued(2);
  ASSERT_TRUE(eventually([&] { return got.get_seq() != 0; }));
  EXPECT_EQ(got.seq, 2u);
  EXPECT_EQ(got.why, "rank 1 left the job after its collective #1 without reaching it: see its output");
  // diagnose() answers with it at once rather than watching heartbeats.
  EXPECT_EQ(watch.diagnose(2), got.why);
}

// After a stop signal, a blocked rank gives up on a peer that had not reached the collective once
// that peer's heartbeat has stopped for two intervals; a peer still beating is waited for (it got
// the signal too, and the job saves when it arrives).
TEST(CollectiveWatch, AfterAStopSignalAPeerWhoseHeartbeatStoppedIsGivenUp) {
  auto store = std::make_shared<HashStore>();
  FakeRank alive(store, 1, 1, true), frozen(store, 2, 1, false);
  Abandoned got;
  CollectiveWatch watch(store, 0, 3, 1000ms, {}, got.callback());  // a heartbeat every 100 ms
  watch.issued(1);
  watch.finished(1);
  watch.issued(2);
  std::this_thread::sleep_for(CollectiveWatch::kBlockedAfter * 3);
  EXPECT_EQ(got.get_seq(), 0u) << "gave up without a signal";
  note_stop_signal(SIGTERM);
  const bool abandoned = eventually([&] { return got.get_seq() != 0; });
  note_stop_signal(0);
  ASSERT_TRUE(abandoned);
  EXPECT_EQ(got.why, "rank 2 had not reached it and stopped sending heartbeats: it is gone or frozen; see its output");
}

}  // namespace
}  // namespace nanoddp::dist
