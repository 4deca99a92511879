#include "server/store/commit_batcher.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace hpo::store {

namespace {

Batcher<const CommitBatcher::Call>::Options Convert(const CommitBatcher::Options& o) {
  Batcher<const CommitBatcher::Call>::Options b;
  b.max_batch = static_cast<size_t>(std::max(1, o.max_batch));
  b.window = o.window;
  b.max_in_flight = o.max_in_flight;
  return b;
}

}  // namespace

CommitBatcher::CommitBatcher(Options options, CommitFn commit)
    : batcher_(Convert(options),
               [commit = std::move(commit)](const std::vector<const Call*>& arrived) {
                 // In `order` (then arrival), and each status back to its call.
                 std::vector<size_t> by_order(arrived.size());
                 std::iota(by_order.begin(), by_order.end(), size_t{0});
                 std::stable_sort(by_order.begin(), by_order.end(), [&](size_t a, size_t b) {
                   return arrived[a]->order < arrived[b]->order;
                 });
                 std::vector<const Call*> batch;
                 batch.reserve(arrived.size());
                 for (size_t i : by_order) batch.push_back(arrived[i]);
                 std::vector<Status> committed = commit(batch);
                 if (committed.size() != batch.size())
                   return committed;  // the batcher fails every call
                 std::vector<Status> statuses(batch.size());
                 for (size_t i = 0; i < by_order.size(); ++i)
                   statuses[by_order[i]] = std::move(committed[i]);
                 return statuses;
               }) {}

Status CommitBatcher::Submit(const Call& call) { return batcher_.Submit(call); }

}  // namespace hpo::store
