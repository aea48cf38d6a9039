// The rendezvous stores: every operation on every implementation (HashStore, TcpStore against a
// TcpStoreServer, PrefixStore), then what only the TCP store has: port conflicts, an unreachable
// server, token checks, size limits and many concurrent clients.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <functional>
#include <thread>

#include "core/error.h"
#include "rendezvous/hash_store.h"
#include "rendezvous/net.h"
#include "rendezvous/prefix_store.h"
#include "rendezvous/store_protocol.h"
#include "rendezvous/tcp_store.h"
#include "test_util.h"

namespace nanoddp::dist {
namespace {

using namespace std::chrono_literals;

Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

// A store under test plus whatever keeps it alive (the server for TcpStore).
struct StoreFixture {
  std::unique_ptr<TcpStoreServer> server;
  std::shared_ptr<Store> store;
  std::function<std::shared_ptr<Store>()> another_client;  // a second handle on the same data
};

StoreFixture make_fixture(const std::string& kind) {
  StoreFixture f;
  if (kind == "hash") {
    f.store = std::make_shared<HashStore>();
    f.another_client = [s = f.store] { return s; };
  } else if (kind == "tcp") {
    f.server = std::make_unique<TcpStoreServer>(TcpStoreServerOptions{"127.0.0.1", 0, ""});
    int port = f.server->port();
    auto connect = [port] { return std::make_shared<TcpStore>(TcpStoreOptions{"127.0.0.1", port, 5s, 300s, ""}); };
    f.store = connect();
    f.another_client = connect;
  } else {
    auto inner = std::make_shared<HashStore>();
    f.store = std::make_shared<PrefixStore>("job7", inner);
    f.another_client = [inner] { return std::make_shared<PrefixStore>("job7", inner); };
  }
  return f;
}

class StoreTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StoreTest, SetGetOverwrite) {
  auto f = make_fixture(GetParam());
  f.store->set("a", bytes("one"));
  EXPECT_EQ(f.store->get("a"), bytes("one"));
  f.store->set("a", bytes(""));
  EXPECT_EQ(f.store->get("a"), Bytes{});
  Bytes binary(1000);
  for (size_t i = 0; i < binary.size(); i++) binary[i] = uint8_t(i * 7);
  f.store->set("bin", binary);
  EXPECT_EQ(f.another_client()->get("bin"), binary);
}

TEST_P(StoreTest, GetWaitsForALaterSet) {
  auto f = make_fixture(GetParam());
  auto other = f.another_client();
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    other->set_string("late", "here");
  });
  EXPECT_EQ(f.store->get_string("late"), "here");
  setter.join();
}

TEST_P(StoreTest, GetAndWaitTimeOutNamingTheKey) {
  auto f = make_fixture(GetParam());
  f.store->set_timeout(200ms);
  auto start = std::chrono::steady_clock::now();
  NANODDP_EXPECT_ERROR(f.store->get("never"), "never");
  f.store->set_string("present", "x");
  NANODDP_EXPECT_ERROR(f.store->wait({"present", "absent"}, 150ms), "absent");
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_LT(elapsed, 5s);
  f.store->wait({"present"}, 150ms);  // present keys return at once
}

TEST_P(StoreTest, AddCountsFromZeroAndIsAtomic) {
  auto f = make_fixture(GetParam());
  EXPECT_EQ(f.store->add("n", 5), 5);
  EXPECT_EQ(f.store->add("n", -2), 3);
  EXPECT_EQ(f.store->get_string("n"), "3");
  constexpr int kThreads = 6, kAdds = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++)
    threads.emplace_back([&] {
      auto s = f.another_client();
      for (int i = 0; i < kAdds; i++) s->add("counter", 1);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(f.store->add("counter", 0), kThreads * kAdds);
  f.store->set_string("text", "abc");
  NANODDP_EXPECT_ERROR(f.store->add("text", 1), "not an integer");
  // Was: signed overflow (undefined behaviour) in both stores, found by reading after fuzzing.
  EXPECT_EQ(f.store->add("big", INT64_MAX), INT64_MAX);
  NANODDP_EXPECT_ERROR(f.store->add("big", 1), "overflows a 64-bit counter");
  EXPECT_EQ(f.store->add("big", 0), INT64_MAX);  // unchanged, and the store still answers
}

TEST_P(StoreTest, CompareSet) {
  auto f = make_fixture(GetParam());
  // Empty `expected` matches a missing key.
  EXPECT_EQ(f.store->compare_set("k", {}, bytes("v1")), bytes("v1"));
  // A mismatch leaves the value and returns it.
  EXPECT_EQ(f.store->compare_set("k", bytes("zz"), bytes("v2")), bytes("v1"));
  EXPECT_EQ(f.store->compare_set("k", bytes("v1"), bytes("v2")), bytes("v2"));
  EXPECT_EQ(f.store->get("k"), bytes("v2"));
  // A missing key with a non-empty `expected` stays missing.
  EXPECT_EQ(f.store->compare_set("m", bytes("x"), bytes("y")), Bytes{});
  EXPECT_FALSE(f.store->check({"m"}));
}

TEST_P(StoreTest, EraseAndCheck) {
  auto f = make_fixture(GetParam());
  EXPECT_FALSE(f.store->check({"a"}));
  EXPECT_TRUE(f.store->check({}));
  f.store->set_string("a", "1");
  f.store->set_string("b", "2");
  EXPECT_TRUE(f.store->check({"a", "b"}));
  EXPECT_FALSE(f.store->check({"a", "c"}));
  EXPECT_TRUE(f.store->erase("a"));
  EXPECT_FALSE(f.store->erase("a"));
  EXPECT_FALSE(f.store->check({"a", "b"}));
}

INSTANTIATE_TEST_SUITE_P(Kinds, StoreTest, ::testing::Values("hash", "tcp", "prefix"));

TEST(PrefixStore, KeysAreNamespaced) {
  auto inner = std::make_shared<HashStore>();
  PrefixStore a("a", inner), b("b", inner);
  a.set_string("k", "from a");
  b.set_string("k", "from b");
  EXPECT_EQ(a.get_string("k"), "from a");
  EXPECT_EQ(inner->get_string("b/k"), "from b");
  EXPECT_EQ(a.add("n", 2), 2);
  EXPECT_EQ(b.add("n", 3), 3);
}

TEST(TcpStore, PortInUseIsAClearError) {
  TcpStoreServer first(TcpStoreServerOptions{"127.0.0.1", 0, ""});
  NANODDP_EXPECT_ERROR(TcpStoreServer second(TcpStoreServerOptions{"127.0.0.1", first.port(), ""}),
               fmt::format("port {} on 127.0.0.1 is already in use", first.port()));
  NANODDP_EXPECT_ERROR(TcpStoreServer second(TcpStoreServerOptions{"", first.port(), ""}), "already in use");
}

TEST(TcpStore, UnreachableServerFailsAfterTheConnectTimeout) {
  int port = 0;
  {  // a port that was free a moment ago and has no listener now
    TcpStoreServer probe(TcpStoreServerOptions{"127.0.0.1", 0, ""});
    port = probe.port();
  }
  auto start = std::chrono::steady_clock::now();
  NANODDP_EXPECT_ERROR(TcpStore s(TcpStoreOptions{"127.0.0.1", port, 400ms, 1s, ""}),
               fmt::format("could not reach the rendezvous store at 127.0.0.1:{} after 0.4 s", port));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(TcpStore, ClientMayStartBeforeTheServer) {
  int port = 0;
  {
    TcpStoreServer probe(TcpStoreServerOptions{"127.0.0.1", 0, ""});
    port = probe.port();
  }
  std::unique_ptr<TcpStoreServer> server;
  std::thread late([&] {
    std::this_thread::sleep_for(300ms);
    server = std::make_unique<TcpStoreServer>(TcpStoreServerOptions{"127.0.0.1", port, ""});
  });
  TcpStore client(TcpStoreOptions{"127.0.0.1", port, 10s, 10s, ""});
  late.join();
  client.set_string("x", "1");
  EXPECT_EQ(client.get_string("x"), "1");
}

TEST(TcpStore, TokenIsRequiredAndChecked) {
  TcpStoreServer server(TcpStoreServerOptions{"127.0.0.1", 0, "s3cret"});
  int port = server.port();
  NANODDP_EXPECT_ERROR(TcpStore s(TcpStoreOptions{"127.0.0.1", port, 2s, 2s, ""}), "requires a token");
  NANODDP_EXPECT_ERROR(TcpStore s(TcpStoreOptions{"127.0.0.1", port, 2s, 2s, "guess"}), "wrong token");
  TcpStore good(TcpStoreOptions{"127.0.0.1", port, 2s, 2s, "s3cret"});
  good.set_string("k", "v");
  EXPECT_EQ(good.get_string("k"), "v");
}

TEST(TcpStore, SizeLimitsAreEnforcedOnBothSides) {
  TcpStoreServer server(TcpStoreServerOptions{"127.0.0.1", 0, ""});
  TcpStore client(TcpStoreOptions{"127.0.0.1", server.port(), 2s, 2s, ""});
  NANODDP_EXPECT_ERROR(client.set("big", Bytes(wire::kMaxValueBytes + 1)), "limit");
  NANODDP_EXPECT_ERROR(client.set(std::string(wire::kMaxKeyBytes + 1, 'k'), {}), "limit");
  // A raw peer announcing an oversize frame gets an error reply and is disconnected.
  std::string why;
  net::Fd raw = net::try_connect_tcp("127.0.0.1", server.port(), 2s, &why);
  ASSERT_TRUE(raw.valid()) << why;
  uint8_t header[4];
  wire::write_u32_be(header, uint32_t(wire::kMaxFrameBytes + 1));
  auto deadline = std::chrono::steady_clock::now() + 5s;
  ASSERT_TRUE(net::send_all(raw.get(), header, 4, deadline, &why)) << why;
  uint8_t reply_header[4];
  ASSERT_TRUE(net::recv_all(raw.get(), reply_header, 4, deadline, &why)) << why;
  std::vector<uint8_t> payload(wire::read_u32_be(reply_header));
  ASSERT_TRUE(net::recv_all(raw.get(), payload.data(), payload.size(), deadline, &why)) << why;
  EXPECT_EQ(payload[0], uint8_t(wire::Status::Error));
  uint8_t extra;
  EXPECT_FALSE(net::recv_all(raw.get(), &extra, 1, deadline, &why));  // closed by the server
  // The server still serves well-behaved clients.
  client.set_string("ok", "1");
  EXPECT_EQ(client.get_string("ok"), "1");
}

TEST(TcpStore, ForeignServiceOnThePortIsNamed) {
  // A listener that accepts and closes at once, like a service speaking another protocol.
  int port = 0;
  net::Fd listener = net::listen_tcp("127.0.0.1", 0, &port);
  std::atomic<bool> stop{false};
  std::thread acceptor([&] {
    while (!stop) {
      net::Fd c(::accept(listener.get(), nullptr, nullptr));
      std::this_thread::sleep_for(5ms);
    }
  });
  NANODDP_EXPECT_ERROR(TcpStore s(TcpStoreOptions{"127.0.0.1", port, 1s, 1s, ""}), "rendezvous store");
  stop = true;
  acceptor.join();
}

TEST(TcpStore, ABlockedGetDoesNotHoldUpOtherThreads) {
  TcpStoreServer server(TcpStoreServerOptions{"127.0.0.1", 0, ""});
  TcpStore client(TcpStoreOptions{"127.0.0.1", server.port(), 2s, 10s, ""});
  std::thread waiter([&] { EXPECT_EQ(client.get_string("later"), "yes"); });
  std::this_thread::sleep_for(100ms);
  // Same client object, another thread: must not wait for the blocked get.
  client.set_string("other", "1");
  EXPECT_EQ(client.get_string("other"), "1");
  client.set_string("later", "yes");
  waiter.join();
}

TEST(TcpStore, ManyConcurrentClients) {
  TcpStoreServer server(TcpStoreServerOptions{"127.0.0.1", 0, ""});
  constexpr int kClients = 24, kRounds = 20;
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; c++) {
    threads.emplace_back([&, c] {
      TcpStore s(TcpStoreOptions{"127.0.0.1", server.port(), 5s, 20s, ""});
      for (int r = 0; r < kRounds; r++) {
        s.add("total", 1);
        s.set_string(fmt::format("c{}/r{}", c, r), std::to_string(c * r));
      }
      // Everyone waits for everyone's last key: a barrier through the store.
      std::vector<std::string> keys;
      for (int o = 0; o < kClients; o++) keys.push_back(fmt::format("c{}/r{}", o, kRounds - 1));
      s.wait(keys);
      EXPECT_EQ(s.get_string(fmt::format("c{}/r{}", (c + 1) % kClients, 3)), std::to_string(((c + 1) % kClients) * 3));
    });
  }
  for (auto& t : threads) t.join();
  TcpStore check(TcpStoreOptions{"127.0.0.1", server.port(), 5s, 5s, ""});
  EXPECT_EQ(check.add("total", 0), kClients * kRounds);
}

TEST(TcpStore, ServerGoingAwayIsAClearErrorNotAHang) {
  auto server = std::make_unique<TcpStoreServer>(TcpStoreServerOptions{"127.0.0.1", 0, ""});
  TcpStore client(TcpStoreOptions{"127.0.0.1", server->port(), 2s, 30s, ""});
  std::thread killer([&] {
    std::this_thread::sleep_for(200ms);
    server.reset();
  });
  auto start = std::chrono::steady_clock::now();
  NANODDP_EXPECT_ERROR(client.get("never"), "lost the connection to the rendezvous store");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  killer.join();
}

}  // namespace
}  // namespace nanoddp::dist
