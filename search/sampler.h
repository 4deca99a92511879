// Samplers: what to try next in one search space.
//
// Call order: the server builds a History (all trials of the space, running
// ones included) and calls Suggest(space, history, count, rng) whenever it
// needs `count` new trials (one per idle worker slot). A sampler keeps no
// state between calls: everything it knows is in the history, so a restarted
// server suggests exactly what it would have. Deterministic: the same
// arguments and rng state give the same suggestions.
//
// Batches: running trials and the earlier suggestions of the same call are
// treated as pending points, so a batch does not pile onto one spot.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "search/history.h"
#include "search/random.h"
#include "search/space.h"

namespace hpo::search {

class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual std::string_view name() const = 0;
  // Returns `count` assignments, each valid for `space` (Validate passes).
  virtual std::vector<Assignment> Suggest(const SearchSpace& space, const History& history,
                                          int count, Rng& rng) = 0;
};

// Uniform over the space (log-uniform for log params).
std::unique_ptr<Sampler> MakeRandomSampler();

// One random assignment (helper for every sampler's start-up phase).
Assignment SampleUniform(const SearchSpace& space, Rng& rng);

}  // namespace hpo::search
