// nanoddp serve's job queue and model thread (chat/serve_queue.h, chat/serve_model.h), in process:
//  - the queue: arrival order, the --max_queue bound, withdrawing, stopping;
//  - the model thread: a job's events are its reply as generate() gives it, in UTF-8 pieces, then
//    a done event with the token count and why it ended; a job whose client left gets no reply.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chat/prompt.h"
#include "chat/serve_model.h"
#include "chat/serve_queue.h"
#include "chat/stop_rule.h"
#include "chat_test_util.h"
#include "model/generate.h"

namespace nanoddp {
namespace {

using namespace std::chrono_literals;

TEST(ServeQueue, ArrivalOrderBoundAndStop) {
  chat::JobQueue q(2);
  auto a = std::make_shared<chat::ServeJob>(), b = std::make_shared<chat::ServeJob>(),
       c = std::make_shared<chat::ServeJob>();
  EXPECT_TRUE(q.submit(a));
  EXPECT_TRUE(q.submit(b));
  EXPECT_FALSE(q.submit(c)) << "a third would wait beyond max_waiting 2";
  EXPECT_EQ(q.next(), a);
  EXPECT_TRUE(q.submit(c)) << "a has left the queue: it runs";
  EXPECT_EQ(q.waiting(), 2u);
  // A waiting job whose client left gives its place up at once.
  auto d = std::make_shared<chat::ServeJob>();
  EXPECT_FALSE(q.submit(d));
  q.withdraw(b);
  EXPECT_EQ(q.waiting(), 1u);
  EXPECT_TRUE(q.submit(d)) << "b's place was not freed";
  q.withdraw(a);  // a runs, it no longer waits: nothing happens
  EXPECT_EQ(q.waiting(), 2u);
  // A running job streams its events; the reader sees them all, then the end. With none yet, a
  // reader gets "" after its wait (to check on its client), not the end.
  EXPECT_EQ(a->take(10ms), "");
  a->push("x");
  a->push("y");
  a->finish();
  EXPECT_EQ(a->take(10ms), "xy");
  EXPECT_EQ(a->take(10ms), std::nullopt);
  // Stopping ends the waiting jobs with the given event and refuses new ones.
  q.stop("bye");
  for (auto& job : {c, d}) {
    EXPECT_EQ(job->take(10ms), "bye");
    EXPECT_EQ(job->take(10ms), std::nullopt);
  }
  EXPECT_EQ(q.next(), nullptr);
  EXPECT_FALSE(q.submit(std::make_shared<chat::ServeJob>()));
}

TEST(ServeQueue, StopWakesTheModelThread) {
  chat::JobQueue q(1);
  std::shared_ptr<chat::ServeJob> got = std::make_shared<chat::ServeJob>();
  std::thread model([&] { got = q.next(); });
  std::this_thread::sleep_for(50ms);
  q.stop("");
  model.join();
  EXPECT_EQ(got, nullptr);
}

// All of a finished job's events, parsed.
std::vector<nlohmann::json> events_of(chat::ServeJob& job) {
  std::string all;
  while (auto got = job.take(1000ms)) all += *got;
  std::vector<nlohmann::json> out;
  for (size_t at = 0; at < all.size();) {
    const size_t end = all.find("\n\n", at);
    EXPECT_EQ(all.compare(at, 6, "data: "), 0) << all;
    out.push_back(nlohmann::json::parse(all.substr(at + 6, end - at - 6)));
    at = end + 2;
  }
  return out;
}

std::shared_ptr<chat::ServeJob> job_for(const data::Tokenizer& tok, const std::string& message, uint64_t seed) {
  auto job = std::make_shared<chat::ServeJob>();
  job->options = chat::reply_options(tok, 12, 1.f, 0, seed);
  data::Conversation conv = testing::question(message, "").conversation;
  job->prompt = chat::fit_to_context(tok, conv, job->options.max_tokens, 64, job->dropped_messages);
  return job;
}

TEST(ServeModel, StreamsEachJobsReplyAsGenerateGivesIt) {
  const auto tok = data::make_byte_tokenizer();
  auto gpt = testing::tiny_chat_model(*tok, 11);
  chat::JobQueue q(4);
  auto left = job_for(*tok, "Gone already.", 1);
  left->cancel();
  std::vector<std::shared_ptr<chat::ServeJob>> jobs;
  for (uint64_t seed = 0; seed < 3; seed++) jobs.push_back(job_for(*tok, "Hello there.", seed));
  ASSERT_TRUE(q.submit(left));
  for (auto& job : jobs) ASSERT_TRUE(q.submit(job));
  std::thread model([&] { chat::serve_jobs(q, *gpt, *tok); });
  EXPECT_TRUE(events_of(*left).empty()) << "a job whose client left is finished without a reply";
  std::vector<std::vector<nlohmann::json>> events;
  for (auto& job : jobs) events.push_back(events_of(*job));
  q.stop(chat::sse_event({{"error", "stopped"}}));
  model.join();  // the model is not thread-safe: the references are made once its thread is done
  for (size_t j = 0; j < jobs.size(); j++) {
    const chat::ServeJob& job = *jobs[j];
    ASSERT_FALSE(events[j].empty());
    std::string text;
    for (size_t i = 0; i + 1 < events[j].size(); i++) text += events[j][i].at("token").get<std::string>();
    const auto ids = model::generate(*gpt, job.prompt, job.options);
    const nlohmann::json& done = events[j].back();
    EXPECT_EQ(done.at("done"), true);
    EXPECT_EQ(done.at("tokens"), chat::reply_ids(ids, job.options).size());
    EXPECT_EQ(done.at("finish"), model::generation_end_name(model::generation_end(ids, job.options)));
    EXPECT_EQ(done.at("dropped_messages"), 0);
    // Invalid UTF-8 from the model reaches the client as U+FFFD (chat::to_json): compare likewise.
    EXPECT_EQ(text, nlohmann::json::parse(chat::to_json(chat::reply_text(*tok, ids, job.options))).get<std::string>());
  }
}

}  // namespace
}  // namespace nanoddp
