// common/batcher.h: items that queue while a batch runs are run together in
// the next one, each with its own status, one batch at a time.
#include "common/batcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace hpo {
namespace {

struct Item {
  int value = 0;
  int doubled = 0;  // written by the run function
};

// Polls `done` until it holds or 30 s pass (a broken batcher must not hang
// the test); what is checked is the outcome, not how long it took.
template <typename F>
bool Eventually(F done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(BatcherTest, ItemsThatQueueWhileABatchRunsRunTogetherInTheNext) {
  std::mutex mu;
  std::vector<size_t> sizes;  // of each batch, in order
  std::promise<void> release_first;
  std::shared_future<void> first_released = release_first.get_future().share();
  std::atomic<bool> first_running{false};
  Batcher<Item>::Options o;
  o.max_batch = 8;
  Batcher<Item> batcher(o, [&](const std::vector<Item*>& batch) {
    bool first;
    {
      std::lock_guard lock(mu);
      first = sizes.empty();
      sizes.push_back(batch.size());
    }
    if (first) {
      first_running = true;
      first_released.wait();
    }
    std::vector<Status> out;
    for (Item* item : batch) {
      item->doubled = 2 * item->value;
      // Odd values fail: their own status, not the batch's.
      out.push_back(item->value % 2 ? Status::InvalidArgument("odd " + std::to_string(item->value))
                                    : Status::OK());
    }
    return out;
  });

  Item lone{10};
  auto lead = std::async(std::launch::async, [&] { return batcher.Submit(lone); });
  ASSERT_TRUE(Eventually([&] { return first_running.load(); }));
  EXPECT_TRUE(batcher.Running());
  std::vector<std::unique_ptr<Item>> items;
  std::vector<std::future<Status>> waiting;
  for (int i = 1; i <= 5; ++i) {
    items.push_back(std::make_unique<Item>(Item{i}));
    Item* item = items.back().get();
    waiting.push_back(
        std::async(std::launch::async, [&batcher, item] { return batcher.Submit(*item); }));
  }
  ASSERT_TRUE(Eventually([&] { return batcher.Queued() == 5; }));
  release_first.set_value();

  EXPECT_TRUE(lead.get().ok());
  EXPECT_EQ(lone.doubled, 20);
  for (int i = 1; i <= 5; ++i) {
    const Status s = waiting[i - 1].get();
    EXPECT_EQ(s.ok(), i % 2 == 0) << i << ": " << s.ToString();
    if (!s.ok()) {
      EXPECT_EQ(s.message(), "odd " + std::to_string(i));
    }
    EXPECT_EQ(items[i - 1]->doubled, 2 * i);
  }
  std::lock_guard lock(mu);
  EXPECT_EQ(sizes, (std::vector<size_t>{1, 5}));
  EXPECT_FALSE(batcher.Running());
}

TEST(BatcherTest, OneBatchAtATimeAndAtMostMaxBatchItems) {
  std::atomic<int> running{0}, most_at_once{0};
  std::atomic<size_t> largest{0};
  Batcher<Item>::Options o;
  o.max_batch = 3;
  Batcher<Item> batcher(o, [&](const std::vector<Item*>& batch) {
    const int now = ++running;
    int seen = most_at_once.load();
    while (now > seen && !most_at_once.compare_exchange_weak(seen, now)) {
    }
    size_t big = largest.load();
    while (batch.size() > big && !largest.compare_exchange_weak(big, batch.size())) {
    }
    std::this_thread::yield();
    for (Item* item : batch) item->doubled = 2 * item->value;
    --running;
    return std::vector<Status>(batch.size(), Status::OK());
  });
  std::vector<Item> items(40);
  std::vector<std::thread> threads;
  for (int i = 0; i < 40; ++i) {
    items[i].value = i;
    threads.emplace_back([&batcher, &items, i] { EXPECT_TRUE(batcher.Submit(items[i]).ok()); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 40; ++i) EXPECT_EQ(items[i].doubled, 2 * i);
  EXPECT_EQ(most_at_once.load(), 1);
  EXPECT_LE(largest.load(), 3u);
}

TEST(BatcherTest, ARunFunctionThatAnswersTheWrongCountFailsEveryItem) {
  Batcher<Item> batcher({}, [](const std::vector<Item*>&) { return std::vector<Status>{}; });
  Item item{1};
  const Status s = batcher.Submit(item);
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
}

}  // namespace
}  // namespace hpo
