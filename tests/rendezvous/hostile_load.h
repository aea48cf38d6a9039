// A crowd of peers that are not store clients, for the store's hardening tests
// (test_store_hardening*.cpp): connections that send garbage, connections that announce a frame of
// kMaxFrameBytes (33 MiB) before any Hello and stream zeros after the header, and connections that
// open and say nothing. One thread drives them all with poll(); a connection the server closes is
// replaced by a new one of the same kind, so the pressure lasts as long as the object does.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

namespace nanoddp::testing {

class HostileLoad {
 public:
  struct Mix {
    int garbage = 100;  // random bytes, as fast as the server takes them
    int huge = 100;     // a 33 MiB length prefix, then zeros
    int idle = 100;     // connected, silent
    // Bound on new connections per second (the first `garbage + huge + idle` included), so that on a
    // small machine the crowd does not take every core from the job it shares them with.
    int opens_per_second = 2000;
  };

  // Starts connecting to 127.0.0.1:port at once.
  HostileLoad(int port, Mix mix);
  // Stops the thread and closes every connection.
  ~HostileLoad();
  HostileLoad(const HostileLoad&) = delete;
  HostileLoad& operator=(const HostileLoad&) = delete;

  int64_t opened() const { return opened_.load(); }
  // Connections the server closed (end of file or reset), and bytes it took from the crowd.
  int64_t closed_by_server() const { return closed_.load(); }
  int64_t bytes_sent() const { return sent_.load(); }

 private:
  void run();

  int port_;
  Mix mix_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> opened_{0}, closed_{0}, sent_{0};
  std::thread thread_;
};

}  // namespace nanoddp::testing
