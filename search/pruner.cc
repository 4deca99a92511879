#include "search/pruner.h"

namespace hpo::search {
namespace {
class NopPruner final : public Pruner {
 public:
  std::string_view name() const override { return "none"; }
  bool ShouldPrune(const History&, const Observation&) const override { return false; }
};
}  // namespace

std::unique_ptr<Pruner> MakeNopPruner() { return std::make_unique<NopPruner>(); }

}  // namespace hpo::search
