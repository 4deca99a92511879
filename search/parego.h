// Several objectives, or constraints, through a single-objective model:
// ParEGO's scalarization (Knowles, 2006), which the GP sampler uses when a
// history has several objectives or constraints.
//
// Each call draws one weight vector w uniformly from the simplex and gives
// every completed trial one value: its objectives, each scaled to [0, 1]
// over the feasible completed trials, folded by the augmented Chebyshev
// function
//     s(f) = max_i w_i f_i + 0.05 sum_i w_i f_i,
// which, unlike a weighted sum, reaches every point of a front, concave
// parts included; a new w at every suggestion moves the model's optimum
// along the front. A trial outside a constraint gets 1.05 + its violation
// over the largest violation, so every feasible trial ranks above every
// infeasible one and the less infeasible above the more (the GP's model of
// this value is then what keeps it away from infeasible regions: a penalty
// rather than a separate feasibility model).
//
// Why ParEGO rather than EHVI: EHVI needs the joint predictive distribution
// of every objective and a hypervolume integral per candidate (costly past
// three objectives, and the GP here models one output); ParEGO needs one
// model and costs what a single objective costs, which keeps the GP's
// suggestion latency goal.
#pragma once

#include "search/history.h"
#include "search/random.h"

namespace hpo::search {

// Whether the GP needs ScalarizeParEgo's view of `history`: a completed
// trial carries several objectives or a constraint violation.
bool NeedsScalarizing(const History& history);

// The history as the single-objective sampler sees it: completed trials'
// `value` the scalarized one (above; with one objective, its value scaled
// to [0, 1], the infeasible ones past it), `values` and `violation`
// cleared; pruned trials, whose partial curves are on another scale, count
// as failed, as does a completed trial with no usable objectives; running
// ones unchanged. Draws the weights from `rng`.
History ScalarizeParEgo(const History& history, Rng& rng);

}  // namespace hpo::search
