// `auto`, the default sampler: GP-BO where a Gaussian process models the
// space well and is affordable, TPE elsewhere, decided afresh at every
// Suggest from the space and the history (no state, like every sampler).
//
// The rule (ChooseAutoSampler), in order:
//   1. TPE if the space is conditional (any parameter has a parent): a GP
//      over one flat vector sees an inactive parameter as a constant, and
//      TPE's per-observation kernels handle subtrees natively.
//   2. TPE if categorical parameters are at least max_categorical_fraction
//      of the parameters: one-hot features make the GP's acquisition
//      landscape piecewise flat, and TPE's categorical kernels do better.
//   3. TPE once the history holds max_gp_results results (completed trials,
//      and pruned ones with a curve): past that point the GP conditions on a
//      subsample and costs tens of milliseconds per suggestion, while TPE has
//      caught up. A budget (max_trials) up to that size therefore runs on the
//      GP throughout, a larger one switches there, as the history grows.
//   4. GP otherwise: small budgets on mostly numeric spaces, where it finds
//      good regions in fewer trials.
// Both start with uniform random suggestions (startup_trials), so the switch
// changes nothing before the models start. OptunaHub's AutoSampler follows
// the same idea (GP first, TPE for categorical, conditional or long runs).
//
// The thresholds were chosen on bench/search_compare.py's suite (see
// bench/README.md, "auto").
#pragma once

#include <memory>

#include "search/gp_sampler.h"
#include "search/sampler.h"
#include "search/tpe.h"

namespace hpo::search {

struct AutoOptions {
  double max_categorical_fraction = 0.5;
  int max_gp_results = 200;
  GpOptions gp;
  TpeOptions tpe;
};

enum class AutoChoice { kGp, kTpe };

// Which sampler `auto` uses for this space and history (the rule above).
AutoChoice ChooseAutoSampler(const SearchSpace& space, const History& history,
                             const AutoOptions& options = {});

std::unique_ptr<Sampler> MakeAutoSampler(AutoOptions options = {});

}  // namespace hpo::search
