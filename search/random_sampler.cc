#include "search/sampler.h"

namespace hpo::search {

Assignment SampleUniform(const SearchSpace& space, Rng& rng) {
  Assignment a(space.params.size(), kInactive);
  // Parents come first: a child's condition is known when its turn comes.
  for (int i = 0; i < space.size(); ++i) {
    if (space.IsActive(i, a)) a[i] = space.params[i].FromUnit(rng.Uniform());
  }
  return a;
}

namespace {
class RandomSampler final : public Sampler {
 public:
  std::string_view name() const override { return "random"; }
  std::vector<Assignment> Suggest(const SearchSpace& space, const History&, int count,
                                  Rng& rng) override {
    std::vector<Assignment> out;
    out.reserve(static_cast<size_t>(std::max(count, 0)));
    for (int i = 0; i < count; ++i) out.push_back(SampleUniform(space, rng));
    return out;
  }
};
}  // namespace

std::unique_ptr<Sampler> MakeRandomSampler() { return std::make_unique<RandomSampler>(); }

}  // namespace hpo::search
