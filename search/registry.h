// The one registry of sampler names: what `algorithm.sampler` in a spec may
// say, and the factory that makes each. The spec parser (server/spec/spec.cc)
// checks names against it and the engine (server/engine/engine.cc) builds samplers
// from it, so a name the spec accepts is always a sampler the engine has,
// and an unknown name is an error naming the field, never a silent default.
//
// Names: "auto" (the default; search/auto_sampler.h states its rule), "tpe"
// (search/tpe.h), "gp" (search/gp_sampler.h), "random".
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "search/gp_sampler.h"
#include "search/sampler.h"
#include "search/tpe.h"

namespace hpo::search {

// What a factory may use besides the name; the defaults are the product's.
// Benchmarks change the options to compare variants.
struct SamplerContext {
  GpOptions gp;
  TpeOptions tpe;
};

inline constexpr std::string_view kDefaultSampler = "auto";

// Every registered name, in the order error messages list them.
const std::vector<std::string>& SamplerNames();

// OK if `name` is registered; otherwise InvalidArgument
// "<field>: must be one of auto, tpe, gp, random, not '<name>'".
Status CheckSamplerName(std::string_view name, std::string_view field);

// The sampler registered as `name`; the same InvalidArgument as
// CheckSamplerName for an unknown one.
Result<std::unique_ptr<Sampler>> MakeSampler(std::string_view name, const SamplerContext& context = {},
                                             std::string_view field = "algorithm.sampler");

}  // namespace hpo::search
