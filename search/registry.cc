#include "search/registry.h"

#include <functional>
#include <utility>

#include "search/auto_sampler.h"

namespace hpo::search {
namespace {

struct Entry {
  std::string name;
  std::function<std::unique_ptr<Sampler>(const SamplerContext&)> make;
};

const std::vector<Entry>& Entries() {
  static const std::vector<Entry> kEntries = {
      {"auto",
       [](const SamplerContext& c) {
         AutoOptions o;
         o.gp = c.gp;
         o.tpe = c.tpe;
         return MakeAutoSampler(o);
       }},
      {"tpe", [](const SamplerContext& c) { return MakeTpeSampler(c.tpe); }},
      {"gp", [](const SamplerContext& c) { return MakeGpSampler(c.gp); }},
      {"random", [](const SamplerContext&) { return MakeRandomSampler(); }},
  };
  return kEntries;
}

const Entry* Find(std::string_view name) {
  for (const Entry& e : Entries()) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

Status Unknown(std::string_view name, std::string_view field) {
  std::string names;
  for (const Entry& e : Entries()) names += (names.empty() ? "" : ", ") + e.name;
  return Status::InvalidArgument(std::string(field) + ": must be one of " + names + ", not '" +
                                 std::string(name) + "'");
}

}  // namespace

const std::vector<std::string>& SamplerNames() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> out;
    for (const Entry& e : Entries()) out.push_back(e.name);
    return out;
  }();
  return kNames;
}

Status CheckSamplerName(std::string_view name, std::string_view field) {
  return Find(name) ? Status::OK() : Unknown(name, field);
}

Result<std::unique_ptr<Sampler>> MakeSampler(std::string_view name, const SamplerContext& context,
                                             std::string_view field) {
  const Entry* e = Find(name);
  if (!e) return Unknown(name, field);
  return e->make(context);
}

}  // namespace hpo::search
