// GP-BO: a sampler that fits a Gaussian process (search/gp.h) to the trials
// of a space and suggests where the log of expected improvement is highest.
//
// What it models:
// - Encoding (GpEncoding): each parameter becomes features in [0, 1]: a
//   number its Param::ToUnit value (so log parameters are log-warped and
//   steps live on the unit scale), a categorical one feature per choice
//   (one-hot). An inactive number sits at 0.5, the middle of its range, and
//   an inactive categorical is 0 in all its features: constant, so trials of
//   one branch compare only on what they share, and close to every active
//   value, so the parent's own features carry the difference between branches.
// - Which values: if at least N = max(startup_trials, number of params + 1)
//   trials completed, the completed trials' final values; otherwise, as in
//   BOHB, the intermediate values at the largest step that at least N trials
//   (completed, pruned or running) reached, each trial's value at that step
//   being its last report at or before it (a completed trial that never
//   reported a curve counts with its final value). With fewer than N of
//   either, suggestions are uniform random. Failed trials are ignored, and so
//   are pruned ones once completed trials suffice.
// - Output warping (warp_output): heavy-tailed values (a loss with a few
//   diverged runs) make a GP on raw values see the good region as flat. A
//   second GP is fitted to the values after a Yeo-Johnson warp
//   (search/output_warp.h), and the model whose marginal likelihood of the
//   raw values is higher (the warp's Jacobian included) is used. Always
//   warping (as HEBO does) helped on every smooth bench function but
//   trapped the conditional one in its easy branch; choosing by likelihood
//   keeps most of the gain without the trap. It doubles the fitting cost.
// - Input warps (warp_inputs, HEBO's): each number may go through a
//   Kumaraswamy CDF before the kernel sees it, chosen per number among a
//   few shapes by the marginal likelihood and kept only if the refitted
//   model beats the unwarped one by more than a BIC penalty; a stationary
//   kernel then fits an objective that changes fast near one end of a range.
// - Trust region (trust_region_dims, TuRBO's): with 5 numbers or more the
//   candidates and their refinement stay in a box around the best point,
//   its side shrinking after failures and growing after successes.
// - Pending points: running trials without a value in the model and the
//   earlier suggestions of the same call are fantasized with the constant
//   liar at the best observed value, taken
//   as the exact latent value (no noise): the variance there collapses and
//   log EI drops around them, so a batch spreads out even where the model is
//   confident (a noisy lie would leave the acquisition's peak in place). Where
//   the model's mean slopes below the lie, log EI can still peak right next
//   to one, so points within min_pending_distance of them are excluded.
//   The newest max_pending running trials are fantasized up front; each
//   older one is fantasized as soon as it comes near (correlation above 0.3
//   under the fitted kernel, about 1.45 lengthscales) one of the best-scored
//   candidates or the chosen point, which is then chosen again. So every
//   running trial repels, however large the fleet, at the cost of the few
//   that matter.
// - Cost: with more than max_observations values, the GP conditions on the
//   best half plus evenly spaced ranks of the rest, and its hyperparameters
//   are fitted on at most max_fit_observations of those (evenly spaced ranks):
//   a fit costs O(m^3) per likelihood evaluation, the acquisition O(m^2) per
//   candidate, so suggest time stops growing with the history (bench/README.md
//   has the figures). A batch scores one candidate pool for all its points,
//   kept current through the fantasies (GaussianProcess::PointCache, O(m n)
//   per fantasy instead of O(m n^2)), and refines fewer candidates after its
//   first point, so 16 suggestions cost about 3 times one.
//
// Acquisition optimizer: num_candidates uniform points plus num_candidates / 4
// Gaussian perturbations (three scales) of the five best observed points are
// scored; the num_local best are refined by
// L-BFGS in the unit cube over their active numeric parameters (categorical
// choices fixed), then each categorical choice of theirs is tried in turn.
// Integer and stepped parameters are optimized relaxed and snapped through
// Param::FromUnit; a refined point replaces its start only if it still scores
// better after snapping.
//
// Deterministic for the rng's state; no state between calls.
#pragma once

#include <Eigen/Dense>
#include <memory>
#include <vector>

#include "search/gp.h"
#include "search/sampler.h"

namespace hpo::search {

// No seed here: all randomness comes from the Rng given to Suggest.
struct GpOptions {
  // Uniform random suggestions until this many observations (or number of
  // params + 1, if larger) exist; see "Which values" above.
  int startup_trials = 10;
  // Also fit a GP to Yeo-Johnson-warped values (search/output_warp.h) and
  // use it where it explains the data better (see "Which values").
  bool warp_output = true;
  // Values the GP conditions on; more are subsampled. The acquisition costs
  // O(n^2) per candidate: 160 keeps one suggestion near 20 ms on this
  // project's 2-core machine at 10,000 observations of 8 params (200 took 25).
  int max_observations = 160;
  // Values the hyperparameters are fitted on, out of those (O(n^3) per step
  // of the fit; lengthscales need far fewer points than the posterior).
  int max_fit_observations = 64;
  // Running trials fantasized up front (the most recent ones); older ones
  // when they come near a candidate (see "Pending points").
  int max_pending = 64;
  // No suggestion within this distance (Euclidean, in the unit-cube
  // features) of a pending point or an earlier suggestion of the same batch:
  // where the model is confident, log EI can peak a hair away from a
  // fantasized point, and that trial would teach nothing new.
  double min_pending_distance = 0.02;
  // Random points scored per suggestion, and how many of the best are refined.
  int num_candidates = 1000;
  int num_local = 5;
  // L-BFGS iterations per refined candidate.
  int local_iterations = 30;
  // With at least this many numeric parameters (0: never), candidates and
  // refinement stay inside a TuRBO trust region around the best point (its
  // side replayed from the values in trial order: see TrustRegionLength in
  // gp_sampler.cc). On bench/search_compare.py's suite (bench/README.md,
  // "search suite") it lowered the median regret on 14 of the 17 tasks with
  // 5 to 10 numbers, at 50 trials and at 100, often by several times (bent
  // cigar 10-D 1.2e6 -> 6.1e4 at 100, mixed Ackley 2.41 -> 0.53); it cost
  // most on Levy 5-D at 100 (0.22 -> 1.73), whose many equal basins reward
  // leaving the first one. Below 5 numbers a global model covers the space
  // well enough.
  int trust_region_dims = 5;
  // HEBO's Kumaraswamy input warps for the numbers, chosen by likelihood
  // (see WarpInputs in gp_sampler.cc). On the suite's 31 synthetic tasks the
  // median regret fell on 21 at 50 trials (geometric mean of the ratios
  // 0.84) and the mean ratio was 0.75 at 100 (bench/README.md, "search
  // suite"), at the cost of 4 factorizations per number per suggestion.
  bool warp_inputs = true;
  // The incumbent (EI's threshold, the trust region's center, the value
  // pending points are taken to score) is the observed point with the
  // lowest posterior mean, not the lowest value seen: under noise the
  // lowest value is partly luck (noisy EI's plug-in rule, Picheny et al.
  // 2013). On noise-free data the two nearly agree.
  bool incumbent_by_mean = true;
  GpFitOptions fit;
};

std::unique_ptr<Sampler> MakeGpSampler(GpOptions options = {});

// How the GP sees assignments of one space (see "Encoding" above), for any
// code that models a space's trials with a GP (space ranking, say).
class GpEncoding {
 public:
  // REQUIRES: `space` outlives this object.
  explicit GpEncoding(const SearchSpace& space);

  int dims() const { return dims_; }
  // The first feature of param i (a categorical has num_choices() of them).
  int column(int i) const { return columns_[i]; }
  // REQUIRES: a.size() == space.size(). Out-of-range values are clamped;
  // a categorical index out of range leaves its features at 0.
  Eigen::VectorXd Encode(const Assignment& a) const;
  // One row per assignment.
  Eigen::MatrixXd EncodeAll(const std::vector<Assignment>& assignments) const;

 private:
  const SearchSpace* space_;
  std::vector<int> columns_;
  int dims_ = 0;
};

}  // namespace hpo::search
