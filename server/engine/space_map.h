// An experiment's search spaces three ways: the store's ids, their names,
// and the spec's order (the index into ExperimentSpec::spaces and into the
// trial view's histories). Made once from the stored experiment; the engine
// and the REST API look spaces up through it rather than by walking the
// record.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/spec/spec.h"
#include "server/store/store.h"

namespace hpo::server {

class SpaceMap {
 public:
  SpaceMap() = default;
  // The spaces of `stored` (the experiment's record), in the spec's order;
  // a stored space the spec does not name is left out.
  SpaceMap(const ExperimentSpec& spec, const std::vector<store::SearchSpaceRecord>& stored) {
    for (size_t i = 0; i < spec.spaces.size(); ++i) {
      for (const auto& s : stored) {
        if (s.name != spec.spaces[i].name) continue;
        index_of_id_[s.id] = spaces_.size();
        spaces_.push_back({s.id, s.name});
      }
    }
  }
  // Only the record's spaces, in its order (no spec at hand).
  explicit SpaceMap(const std::vector<store::SearchSpaceRecord>& stored) {
    for (const auto& s : stored) {
      index_of_id_[s.id] = spaces_.size();
      spaces_.push_back({s.id, s.name});
    }
  }

  std::optional<store::Id> IdOf(std::string_view name) const {
    for (const auto& s : spaces_) {
      if (s.name == name) return s.id;
    }
    return std::nullopt;
  }
  // Empty when the experiment has no space with that id.
  const std::string& NameOf(store::Id id) const {
    static const std::string kNone;
    const auto it = index_of_id_.find(id);
    return it == index_of_id_.end() ? kNone : spaces_[it->second].name;
  }
  std::optional<size_t> IndexOf(store::Id id) const {
    const auto it = index_of_id_.find(id);
    return it == index_of_id_.end() ? std::nullopt : std::optional<size_t>(it->second);
  }
  // In the spec's order: the index each space has there.
  const std::map<store::Id, size_t>& IndexById() const { return index_of_id_; }
  size_t size() const { return spaces_.size(); }

 private:
  struct Space {
    store::Id id = 0;
    std::string name;
  };
  std::vector<Space> spaces_;
  std::map<store::Id, size_t> index_of_id_;
};

}  // namespace hpo::server
