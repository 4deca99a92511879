#include "search/gp_sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <string_view>
#include <utility>
#include <vector>

#include "search/numeric.h"
#include "search/output_warp.h"
#include "search/parego.h"

namespace hpo::search {
namespace {

constexpr double kInactiveUnit = 0.5;
constexpr int kWarpFitValues = 256;

bool IsNumeric(const Param& p) { return p.kind != ParamKind::kCategorical; }

// HEBO's input warp (Cowen-Rivers et al., 2022): a number's unit value u
// becomes the Kumaraswamy CDF 1 - (1 - u^a)^b, which stretches the part of
// the range where the objective changes fast (a < 1 near 0, b < 1 near 1)
// so that one stationary kernel fits it. a = b = 1 is the identity.
struct InputWarp {
  double a = 1, b = 1;

  bool identity() const { return a == 1 && b == 1; }
  double operator()(double u) const {
    if (identity()) return u;
    u = std::clamp(u, 0.0, 1.0);
    return 1 - std::pow(1 - std::pow(u, a), b);
  }
  // d/du; finite inside (0, 1) (the ends are clipped by a hair).
  double Derivative(double u) const {
    if (identity()) return 1;
    u = std::clamp(u, 1e-9, 1 - 1e-9);
    const double ua = std::pow(u, a);
    return a * b * ua / u * std::pow(1 - ua, b - 1);
  }
};

// A point while the acquisition is optimized: one value per param, for all of
// them, active or not: the unit value of a number, the choice index of a
// categorical. Which ones are active follows from the categorical values, so
// switching a choice brings back the values its children had.
using Latent = std::vector<double>;

class Codec {
 public:
  Codec(const SearchSpace& space, const GpEncoding& encoding)
      : space_(space), encoding_(encoding) {}

  std::vector<char> Active(const Latent& z) const {
    std::vector<char> active(z.size());
    for (int i = 0; i < space_.size(); ++i) {
      const Param& p = space_.params[i];
      active[i] = !p.conditional() ||
                  (active[p.parent] &&
                   IndexIn(z[p.parent], space_.params[p.parent].num_choices()) == p.parent_choice);
    }
    return active;
  }

  // The GP features of z, its numbers taken as they are (snapped or not)
  // and then through their input warp.
  Eigen::VectorXd Features(const Latent& z) const {
    Eigen::VectorXd x = Eigen::VectorXd::Zero(encoding_.dims());
    const std::vector<char> active = Active(z);
    for (int i = 0; i < space_.size(); ++i) {
      const Param& p = space_.params[i];
      if (IsNumeric(p)) {
        x(encoding_.column(i)) = active[i] ? Warp(i)(z[i]) : kInactiveUnit;
      } else if (active[i]) {
        x(encoding_.column(i) + static_cast<int>(IndexIn(z[i], p.num_choices()))) = 1;
      }
    }
    return x;
  }

  Assignment Decode(const Latent& z) const {
    Assignment a(z.size(), kInactive);
    const std::vector<char> active = Active(z);
    for (int i = 0; i < space_.size(); ++i) {
      if (!active[i]) continue;
      const Param& p = space_.params[i];
      a[i] = IsNumeric(p) ? p.FromUnit(z[i]) : z[i];
    }
    return a;
  }

  // Puts every number on its grid (integers, steps), so that Features(z)
  // is what the decoded assignment encodes to.
  void Snap(Latent* z) const {
    for (int i = 0; i < space_.size(); ++i) {
      const Param& p = space_.params[i];
      if (IsNumeric(p)) (*z)[i] = std::clamp(p.ToUnit(p.FromUnit((*z)[i])), 0.0, 1.0);
    }
  }

  Latent FromAssignment(const Assignment& a) const {
    Latent z(a.size());
    for (int i = 0; i < space_.size(); ++i) {
      const Param& p = space_.params[i];
      if (IsNumeric(p)) {
        z[i] = IsInactive(a[i]) ? kInactiveUnit : std::clamp(p.ToUnit(a[i]), 0.0, 1.0);
      } else {
        z[i] = IsInactive(a[i]) ? 0 : a[i];
      }
    }
    Snap(&z);
    return z;
  }

  Latent Random(Rng& rng) const {
    Latent z(space_.size());
    for (int i = 0; i < space_.size(); ++i) {
      const Param& p = space_.params[i];
      z[i] = IsNumeric(p) ? Lower(i) + (Upper(i) - Lower(i)) * rng.Uniform()
                          : static_cast<double>(rng.Below(std::max(p.num_choices(), 1)));
    }
    Snap(&z);
    return z;
  }

  // Where numbers may go (unit values): [0, 1] unless a trust region set a
  // box around the incumbent.
  void SetBox(std::vector<double> lower, std::vector<double> upper) {
    lower_ = std::move(lower);
    upper_ = std::move(upper);
  }
  double Lower(int i) const { return lower_.empty() ? 0.0 : lower_[i]; }
  double Upper(int i) const { return upper_.empty() ? 1.0 : upper_[i]; }

  // The Kumaraswamy warp of number i's unit value (identity unless set).
  const InputWarp& Warp(int i) const { return warps_.empty() ? kIdentity : warps_[i]; }
  void SetWarps(std::vector<InputWarp> warps) { warps_ = std::move(warps); }

  // The features of an observed or pending assignment.
  Eigen::VectorXd Encode(const Assignment& a) const {
    Eigen::VectorXd x = encoding_.Encode(a);
    if (warps_.empty()) return x;
    for (int i = 0; i < space_.size(); ++i) {
      if (!IsNumeric(space_.params[i]) || IsInactive(a[i])) continue;
      double& u = x(encoding_.column(i));
      u = warps_[i](u);
    }
    return x;
  }

  const SearchSpace& space() const { return space_; }
  const GpEncoding& encoding() const { return encoding_; }

 private:
  static constexpr InputWarp kIdentity{};
  const SearchSpace& space_;
  const GpEncoding& encoding_;
  std::vector<double> lower_, upper_;
  std::vector<InputWarp> warps_;  // per param; empty: all identity
};

// TuRBO's trust-region side length (Eriksson et al., NeurIPS 2019), replayed
// from the values in trial order, so that no state is kept between calls:
// after `startup` values it starts at kInitial; a value better than the best
// so far by 1e-3 of its size is a success, anything else a failure; 3
// successes in a row double it (at most kMax), max(4, dims) failures in a
// row halve it, and below kMin it starts over at kInitial.
double TrustRegionLength(const std::vector<double>& values, int startup, int dims) {
  constexpr double kInitial = 0.8, kMax = 1.6, kMin = 0.5 / 128;
  double length = kInitial, best = std::numeric_limits<double>::infinity();
  int successes = 0, failures = 0;
  const int patience = std::max(4, dims);
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    if (static_cast<int>(i) >= startup) {
      if (v < best - 1e-3 * std::abs(best)) {
        ++successes;
        failures = 0;
      } else {
        ++failures;
        successes = 0;
      }
      if (successes >= 3) {
        length = std::min(2 * length, kMax);
        successes = 0;
      } else if (failures >= patience) {
        length /= 2;
        failures = 0;
      }
      if (length < kMin) length = kInitial;
    }
    best = std::min(best, v);
  }
  return length;
}

// log EI below `best` under the GP, in the GP's features; -infinity within
// `min_distance` of an excluded point (pending ones, see GpOptions).
class Acquisition {
 public:
  Acquisition(const GaussianProcess& gp, double best, double min_distance)
      : gp_(gp),
        best_(best),
        var_floor_(1e-12 * gp.target_std() * gp.target_std()),
        min_distance_sq_(min_distance * min_distance) {}

  void Exclude(const Eigen::VectorXd& x) { excluded_.push_back(x); }

  Eigen::VectorXd Score(const Eigen::MatrixXd& X) const {
    Eigen::VectorXd mean, var;
    gp_.Predict(X, &mean, &var);
    return Finish(X, mean, var);
  }

  Eigen::VectorXd Score(GaussianProcess::PointCache* cache) const {
    Eigen::VectorXd mean, var;
    gp_.Predict(cache, &mean, &var);
    return Finish(cache->points(), mean, var);
  }

  Eigen::VectorXd Finish(const Eigen::MatrixXd& X, const Eigen::VectorXd& mean,
                         const Eigen::VectorXd& var) const {
    Eigen::VectorXd out(X.rows());
    for (int i = 0; i < X.rows(); ++i) {
      out(i) =
          Excluded(X.row(i).transpose())
              ? -std::numeric_limits<double>::infinity()
              : LogExpectedImprovement(mean(i), std::sqrt(std::max(var(i), var_floor_)), best_);
    }
    return out;
  }

  double Score(const Eigen::VectorXd& x) const { return Score(Eigen::MatrixXd(x.transpose()))(0); }

  double ValueAndGradient(const Eigen::VectorXd& x, Eigen::VectorXd* grad) const {
    double mean, var;
    Eigen::VectorXd dmean, dvar;
    gp_.PredictWithGradient(x, &mean, &var, &dmean, &dvar);
    const bool floored = var < var_floor_;
    const double sigma = std::sqrt(std::max(var, var_floor_));
    const Eigen::VectorXd dsigma =
        floored ? Eigen::VectorXd::Zero(x.size()) : Eigen::VectorXd(dvar / (2 * sigma));
    const double z = (best_ - mean) / sigma;
    double dlogh = 0;
    const double value = std::log(sigma) + LogH(z, &dlogh);
    // d/dx [log sigma + log h(z)], z = (best - mean) / sigma.
    *grad = dsigma / sigma + dlogh * (-dmean / sigma - z * dsigma / sigma);
    return value;
  }

 private:
  bool Excluded(const Eigen::VectorXd& x) const {
    for (const Eigen::VectorXd& e : excluded_) {
      if ((x - e).squaredNorm() < min_distance_sq_) return true;
    }
    return false;
  }

  const GaussianProcess& gp_;
  double best_;
  double var_floor_;
  double min_distance_sq_;
  std::vector<Eigen::VectorXd> excluded_;
};

bool Usable(const SearchSpace& space, const Assignment& a) {
  if (static_cast<int>(a.size()) != space.size()) return false;
  for (int i = 0; i < space.size(); ++i) {
    const Param& p = space.params[i];
    if (IsInactive(a[i])) continue;
    if (!std::isfinite(a[i])) return false;
    if (!IsNumeric(p) && (a[i] != std::floor(a[i]) || a[i] < 0 || a[i] >= p.num_choices())) {
      return false;
    }
  }
  return true;
}

// What the model is fitted on.
struct Data {
  std::vector<const Assignment*> points;
  std::vector<double> values;
  std::vector<const Observation*> pending;  // running trials not among `points`
};

// The rule of "Which values" in gp_sampler.h. `needed` is N.
Data Collect(const SearchSpace& space, const History& history, int needed) {
  Data data;
  std::vector<const Observation*> usable;
  for (const Observation& t : history.trials) {
    if (t.status != TrialStatus::kFailed && Usable(space, t.params)) usable.push_back(&t);
  }
  for (const Observation* t : usable) {
    if (t->status == TrialStatus::kCompleted && t->value && std::isfinite(*t->value)) {
      data.points.push_back(&t->params);
      data.values.push_back(*t->value);
    }
  }
  std::vector<char> in_model(usable.size(), 0);
  if (static_cast<int>(data.points.size()) >= needed) {
    for (size_t i = 0; i < usable.size(); ++i) {
      in_model[i] = usable[i]->status == TrialStatus::kCompleted;
    }
  } else {
    data.points.clear();
    data.values.clear();
    // The furthest step a trial reached; completed trials reached the end.
    constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();
    std::vector<int64_t> reached;
    for (const Observation* t : usable) {
      if (t->status == TrialStatus::kCompleted) {
        reached.push_back(kEnd);
      } else if (!t->curve.empty()) {
        reached.push_back(t->curve.back().first);
      }
    }
    if (static_cast<int>(reached.size()) >= needed) {
      std::nth_element(reached.begin(), reached.begin() + (needed - 1), reached.end(),
                       std::greater<int64_t>());
      const int64_t step = reached[needed - 1];
      for (size_t i = 0; i < usable.size(); ++i) {
        const Observation& t = *usable[i];
        std::optional<double> v;
        if (t.status == TrialStatus::kCompleted) {
          v = t.curve.empty() ? t.value : t.ValueAt(step);
        } else if (!t.curve.empty() && t.curve.back().first >= step) {
          v = t.ValueAt(step);
        }
        if (v && std::isfinite(*v)) {
          data.points.push_back(&t.params);
          data.values.push_back(*v);
          in_model[i] = 1;
        }
      }
    }
  }
  for (size_t i = 0; i < usable.size(); ++i) {
    if (!in_model[i] && usable[i]->status == TrialStatus::kRunning) {
      data.pending.push_back(usable[i]);
    }
  }
  return data;
}

// Indices of `values` by increasing value (ties by position).
std::vector<int> Ranked(const std::vector<double>& values) {
  std::vector<int> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return values[a] < values[b]; });
  return order;
}

// `count` entries of `ranked` at evenly spaced positions, first and last included.
std::vector<int> Spread(const std::vector<int>& ranked, int count) {
  const int n = static_cast<int>(ranked.size());
  if (n <= count) return ranked;
  std::vector<int> out;
  for (int k = 0; k < count; ++k) {
    const int64_t pos = count == 1 ? 0 : static_cast<int64_t>(k) * (n - 1) / (count - 1);
    out.push_back(ranked[pos]);
  }
  return out;
}

class GpSampler : public Sampler {
 public:
  explicit GpSampler(GpOptions options) : options_(options) {}

  std::string_view name() const override { return "gp"; }

  std::vector<Assignment> Suggest(const SearchSpace& space, const History& history, int count,
                                  Rng& rng) override {
    // Several objectives or constraints: one GP on ParEGO's scalarization,
    // new weights at every call (parego.h). The scalarized view needs none.
    if (NeedsScalarizing(history)) return Suggest(space, ScalarizeParEgo(history, rng), count, rng);
    std::vector<Assignment> out;
    if (count <= 0) return out;
    out.reserve(count);
    SuggestWithModel(space, history, count, rng, &out);
    while (static_cast<int>(out.size()) < count) out.push_back(SampleUniform(space, rng));
    return out;
  }

 private:
  // Appends as many suggestions as the model allows (none while starting up
  // or if the model cannot be built; the caller fills in at random).
  void SuggestWithModel(const SearchSpace& space, const History& history, int count, Rng& rng,
                        std::vector<Assignment>* out) const {
    if (space.size() == 0) return;
    const int needed = std::max(options_.startup_trials, space.size() + 1);
    Data data = Collect(space, history, needed);
    if (static_cast<int>(data.points.size()) < needed) return;

    const GpEncoding encoding(space);
    Codec codec(space, encoding);
    const std::vector<int> ranked = Ranked(data.values);
    // The best half, then a spread over the rest.
    std::vector<int> chosen = ranked;
    const int max_obs = std::max(options_.max_observations, 2);
    if (static_cast<int>(ranked.size()) > max_obs) {
      const int best = max_obs / 2;
      chosen.assign(ranked.begin(), ranked.begin() + best);
      const std::vector<int> rest(ranked.begin() + best, ranked.end());
      for (int i : Spread(rest, max_obs - best)) chosen.push_back(i);
    }
    // `chosen` is ordered by value, so evenly spaced positions in it are
    // evenly spaced ranks.
    const std::vector<int> fit_set = Spread(chosen, std::max(options_.max_fit_observations, 2));

    auto matrix_of = [&](const std::vector<int>& idx, Eigen::MatrixXd* X, Eigen::VectorXd* y) {
      X->resize(static_cast<Eigen::Index>(idx.size()), encoding.dims());
      y->resize(static_cast<Eigen::Index>(idx.size()));
      for (size_t r = 0; r < idx.size(); ++r) {
        X->row(r) = codec.Encode(*data.points[idx[r]]).transpose();
        (*y)(r) = data.values[idx[r]];
      }
    };
    Eigen::MatrixXd X_fit, X;
    Eigen::VectorXd y_fit, y;
    matrix_of(fit_set, &X_fit, &y_fit);
    Result<GaussianProcess> fitted = GaussianProcess::Fit(X_fit, y_fit, rng, options_.fit);
    if (!fitted.ok()) return;
    int numeric = 0;
    for (const Param& p : space.params) numeric += IsNumeric(p);
    const bool trust_region =
        options_.trust_region_dims > 0 && numeric >= options_.trust_region_dims;
    // Replayed from the values as reported, before the output warp below
    // may replace them: the warp changes from one suggestion to the next,
    // and the rule's threshold (1e-3 of the best) would change with it.
    const double trust_region_length =
        trust_region ? TrustRegionLength(data.values, needed, numeric) : 1.0;
    if (options_.warp_output) {
      // The warped model is used if it explains the raw values better: both
      // likelihoods are taken in the units of y (the warp's and each GP's
      // standardization enter through their Jacobians).
      // Fitted to evenly spaced ranks (quantiles) of all values, which
      // stand for their distribution at a fraction of the cost.
      std::vector<double> quantiles;
      for (int i : Spread(ranked, kWarpFitValues)) quantiles.push_back(data.values[i]);
      const OutputWarp warp = OutputWarp::Fit(quantiles);
      Eigen::VectorXd w_fit(y_fit.size());
      double log_jacobian = 0;
      for (Eigen::Index i = 0; i < y_fit.size(); ++i) {
        w_fit(i) = warp(y_fit(i));
        log_jacobian += warp.LogDerivative(y_fit(i));
      }
      Result<GaussianProcess> warped = GaussianProcess::Fit(X_fit, w_fit, rng, options_.fit);
      const double n = static_cast<double>(y_fit.size());
      if (warped.ok() &&
          warped->log_marginal_likelihood() - n * std::log(warped->target_std()) + log_jacobian >
              fitted->log_marginal_likelihood() - n * std::log(fitted->target_std())) {
        fitted = std::move(warped);
        data.values = warp.Apply(data.values);
      }
    }
    if (options_.warp_inputs) WarpInputs(codec, fit_set, matrix_of, rng, &*fitted);
    if (fit_set.size() != chosen.size()) {
      matrix_of(chosen, &X, &y);
      fitted = GaussianProcess::WithHyperparameters(X, y, fitted->hyperparameters());
      if (!fitted.ok()) return;
    }
    GaussianProcess& gp = *fitted;
    int incumbent = ranked[0];
    double best = data.values[incumbent];
    if (options_.incumbent_by_mean) {
      // `chosen` holds the best values, so the lowest mean is among them.
      if (X.rows() == 0) matrix_of(chosen, &X, &y);
      Eigen::VectorXd mean, var;
      gp.Predict(X, &mean, &var);
      Eigen::Index at = 0;
      best = mean.minCoeff(&at);
      incumbent = chosen[at];
    }
    if (trust_region) {
      // A box around the incumbent, each side in proportion to its
      // lengthscale (relative to their geometric mean, clipped to [1/4, 4]
      // as TuRBO does), of volume length^numeric.
      const Latent center = codec.FromAssignment(*data.points[incumbent]);
      const Eigen::VectorXd ls = gp.lengthscales();
      std::vector<double> w(space.size(), 1.0);
      double log_mean = 0;
      for (int i = 0; i < space.size(); ++i) {
        if (IsNumeric(space.params[i])) log_mean += std::log(ls(encoding.column(i))) / numeric;
      }
      std::vector<double> lower(space.size(), 0.0), upper(space.size(), 1.0);
      for (int i = 0; i < space.size(); ++i) {
        if (!IsNumeric(space.params[i])) continue;
        w[i] = std::clamp(std::exp(std::log(ls(encoding.column(i))) - log_mean), 0.25, 4.0);
      }
      double log_volume = 0;
      for (int i = 0; i < space.size(); ++i) {
        if (IsNumeric(space.params[i])) log_volume += std::log(w[i]) / numeric;
      }
      for (int i = 0; i < space.size(); ++i) {
        if (!IsNumeric(space.params[i])) continue;
        const double half = 0.5 * trust_region_length * w[i] / std::exp(log_volume);
        lower[i] = std::clamp(center[i] - half, 0.0, 1.0);
        upper[i] = std::clamp(center[i] + half, 0.0, 1.0);
      }
      codec.SetBox(std::move(lower), std::move(upper));
    }

    // Constant liar: a pending point is taken to have scored the best value,
    // and exactly so (its latent value, not a noisy reading of it): where the
    // model is confident, a noisy lie would leave the acquisition's peak in
    // place and the batch would pile up within a hair of one point.
    // The newest max_pending running trials are fantasized up front; the
    // others wait in `later` until one comes near a promising candidate
    // (see Maximize), so every running trial repels, however many there are.
    std::vector<const Observation*> pending = data.pending;
    std::stable_sort(
        pending.begin(), pending.end(),
        [](const Observation* a, const Observation* b) { return a->number > b->number; });
    gp.Reserve(gp.num_observations() + static_cast<int>(pending.size()) + count);
    Acquisition acquisition(gp, best, options_.min_pending_distance);
    Pending later;
    for (size_t i = 0; i < pending.size(); ++i) {
      const Eigen::VectorXd x = codec.Encode(pending[i]->params);
      if (static_cast<int>(i) >= options_.max_pending) {
        later.push_back(x);
        continue;
      }
      if (!gp.AddObservation(x, best, true).ok()) return;
      acquisition.Exclude(x);
    }

    std::vector<Latent> elite;
    for (int k = 0; k < std::min<int>(5, chosen.size()); ++k) {
      elite.push_back(codec.FromAssignment(*data.points[chosen[k]]));
    }
    Pool pool = Candidates(codec, elite, rng);
    pool.use_cache = count > 1;
    for (int k = 0; k < count; ++k) {
      // Later points of a batch refine fewer candidates: the fantasies
      // already spread them, and refining is most of a point's cost.
      const int refined = k == 0 ? options_.num_local : std::min(options_.num_local, 2);
      Latent z = Maximize(codec, gp, acquisition, best, pool, refined, &later);
      // A refined point may have moved next to a running trial not yet
      // fantasized: fantasize those and choose again (once).
      if (FantasizeNear(gp, acquisition, best, {codec.Features(z)}, &later)) {
        z = Maximize(codec, gp, acquisition, best, pool, refined, &later);
      }
      out->push_back(codec.Decode(z));
      if (k + 1 == count) break;
      const Eigen::VectorXd x = codec.Features(z);
      if (!gp.AddObservation(x, best, true).ok()) return;
      acquisition.Exclude(x);
    }
  }

  // Chooses input warps (GpOptions::warp_inputs) for the numbers and, if
  // they are kept (set in the codec), replaces `gp` by a refit with them.
  // A coordinate search, at the fitted hyperparameters, over a few
  // warps per number (one factorization each), then one refit with the
  // chosen ones; they are kept if its likelihood beats the unwarped model's
  // by more than BIC's penalty, log n per warped number (two parameters).
  template <typename MatrixOf>
  void WarpInputs(Codec& codec, const std::vector<int>& fit_set, const MatrixOf& matrix_of,
                  Rng& rng, GaussianProcess* gp) const {
    static constexpr InputWarp kCandidates[] = {{0.5, 1}, {2, 1}, {1, 0.5}, {1, 2}};
    const SearchSpace& space = codec.space();
    Eigen::MatrixXd X;
    Eigen::VectorXd y;
    std::vector<InputWarp> warps(space.size());
    const double unwarped = gp->log_marginal_likelihood();
    double best = unwarped;
    int warped = 0;
    for (int i = 0; i < space.size(); ++i) {
      if (!IsNumeric(space.params[i])) continue;
      InputWarp keep;
      for (const InputWarp& w : kCandidates) {
        warps[i] = w;
        codec.SetWarps(warps);
        matrix_of(fit_set, &X, &y);
        const Result<GaussianProcess> trial =
            GaussianProcess::WithHyperparameters(X, y, gp->hyperparameters());
        if (trial.ok() && trial->log_marginal_likelihood() > best) {
          best = trial->log_marginal_likelihood();
          keep = w;
        }
      }
      warps[i] = keep;
      warped += !keep.identity();
    }
    codec.SetWarps({});
    if (warped == 0) return;
    codec.SetWarps(warps);
    matrix_of(fit_set, &X, &y);
    Result<GaussianProcess> refit = GaussianProcess::Fit(X, y, rng, options_.fit);
    const double penalty = warped * std::log(static_cast<double>(y.size()));
    if (refit.ok() && refit->log_marginal_likelihood() - penalty > unwarped) {
      *gp = std::move(*refit);
    } else {
      codec.SetWarps({});
    }
  }

  using Pending = std::vector<Eigen::VectorXd>;

  // Fantasizes (and excludes) every point of `later` whose correlation with
  // one of `near` under the fitted kernel exceeds kNearCorrelation, taking
  // them out of `later`. Returns whether it added any.
  static bool FantasizeNear(GaussianProcess& gp, Acquisition& acquisition, double lie,
                            const std::vector<Eigen::VectorXd>& near, Pending* later) {
    // About 1.45 lengthscales: farther, a fantasy barely moves the posterior.
    constexpr double kNearCorrelation = 0.3;
    if (later->empty() || near.empty()) return false;
    const Eigen::VectorXd ls = gp.lengthscales();
    bool added = false;
    for (size_t i = 0; i < later->size();) {
      bool close = false;
      for (const Eigen::VectorXd& x : near) {
        if (Matern52((*later)[i], x, ls) > kNearCorrelation) {
          close = true;
          break;
        }
      }
      if (!close) {
        ++i;
        continue;
      }
      if (!gp.AddObservation((*later)[i], lie, true).ok()) return added;
      acquisition.Exclude((*later)[i]);
      (*later)[i] = std::move(later->back());
      later->pop_back();
      added = true;
    }
    return added;
  }

  // The candidates of one Suggest call, shared by all its suggestions (their
  // scores follow the fantasies through GaussianProcess::PointCache, so a
  // batch costs little more than one suggestion).
  struct Pool {
    std::vector<Latent> candidates;
    std::unique_ptr<GaussianProcess::PointCache> cache;
    // One suggestion scores the pool once or twice: plain Predict, blocked
    // and without the cache's large matrices, is faster there.
    bool use_cache = false;

    Eigen::VectorXd Score(const Acquisition& acquisition) {
      return use_cache ? acquisition.Score(cache.get()) : acquisition.Score(cache->points());
    }
  };

  Pool Candidates(const Codec& codec, const std::vector<Latent>& elite, Rng& rng) const {
    const SearchSpace& space = codec.space();
    std::vector<Latent> candidates;
    const int num_random = std::max(options_.num_candidates, 1);
    candidates.reserve(static_cast<size_t>(num_random));
    for (int i = 0; i < num_random; ++i) candidates.push_back(codec.Random(rng));
    // Local moves around the best points, at three scales: exploitation that
    // uniform points in d dimensions rarely get close enough for.
    constexpr double kScales[] = {0.01, 0.05, 0.2};
    const int num_local_moves = elite.empty() ? 0 : num_random / 4;
    for (int i = 0; i < num_local_moves; ++i) {
      Latent z = elite[i % elite.size()];
      const double scale = kScales[(i / elite.size()) % 3];
      for (int j = 0; j < space.size(); ++j) {
        const Param& p = space.params[j];
        if (IsNumeric(p)) {
          z[j] = std::clamp(z[j] + scale * rng.Normal(), codec.Lower(j), codec.Upper(j));
        } else if (rng.Uniform() < 0.1) {
          z[j] = static_cast<double>(rng.Below(std::max(p.num_choices(), 1)));
        }
      }
      codec.Snap(&z);
      candidates.push_back(std::move(z));
    }

    Eigen::MatrixXd X(static_cast<Eigen::Index>(candidates.size()), codec.encoding().dims());
    for (size_t i = 0; i < candidates.size(); ++i) {
      X.row(i) = codec.Features(candidates[i]).transpose();
    }
    Pool pool;
    pool.candidates = std::move(candidates);
    pool.cache = std::make_unique<GaussianProcess::PointCache>(std::move(X));
    return pool;
  }

  // The best candidate of the pool by log EI, refined from the num_local
  // best (`num_refined` of them). Running trials in `later` near the
  // best-scored candidates are fantasized first (see FantasizeNear).
  Latent Maximize(const Codec& codec, GaussianProcess& gp, Acquisition& acquisition, double lie,
                  Pool& pool, int num_refined, Pending* later) const {
    const std::vector<Latent>& candidates = pool.candidates;
    const Eigen::MatrixXd& X = pool.cache->points();
    Eigen::VectorXd scores = pool.Score(acquisition);
    std::vector<int> order(candidates.size());
    std::iota(order.begin(), order.end(), 0);
    num_refined = std::clamp(num_refined, 0, static_cast<int>(order.size()));
    for (int round = 0; round < 3 && !later->empty(); ++round) {
      const int top = std::min<int>(4 * std::max(num_refined, 1), static_cast<int>(order.size()));
      std::partial_sort(order.begin(), order.begin() + top, order.end(), [&](int a, int b) {
        return scores(a) > scores(b) || (scores(a) == scores(b) && a < b);
      });
      std::vector<Eigen::VectorXd> near;
      near.reserve(static_cast<size_t>(top));
      for (int k = 0; k < top; ++k) near.push_back(X.row(order[k]).transpose());
      if (!FantasizeNear(gp, acquisition, lie, near, later)) break;
      scores = pool.Score(acquisition);
    }
    std::partial_sort(
        order.begin(), order.begin() + std::max(num_refined, 1), order.end(),
        [&](int a, int b) { return scores(a) > scores(b) || (scores(a) == scores(b) && a < b); });

    Latent best = candidates[order[0]];
    double best_score = scores(order[0]);
    for (int k = 0; k < num_refined; ++k) {
      Latent z = candidates[order[k]];
      double score = scores(order[k]);
      Refine(codec, acquisition, &z, &score);
      if (score > best_score) {
        best_score = score;
        best = std::move(z);
      }
    }
    return best;
  }

  // Gradient ascent on the active numbers, then each choice of each active
  // categorical. z stays snapped; it changes only where the score improves.
  void Refine(const Codec& codec, const Acquisition& acquisition, Latent* z, double* score) const {
    const SearchSpace& space = codec.space();
    const GpEncoding& encoding = codec.encoding();
    std::vector<int> vars;
    const std::vector<char> active = codec.Active(*z);
    for (int i = 0; i < space.size(); ++i) {
      if (active[i] && IsNumeric(space.params[i])) vars.push_back(i);
    }
    if (!vars.empty() && options_.local_iterations > 0) {
      const int n = static_cast<int>(vars.size());
      Eigen::VectorXd v(n);
      for (int j = 0; j < n; ++j) v(j) = (*z)[vars[j]];
      Latent work = *z;
      auto objective = [&](const Eigen::VectorXd& u, Eigen::VectorXd* grad) {
        for (int j = 0; j < n; ++j) work[vars[j]] = u(j);
        Eigen::VectorXd gx;
        const double value = acquisition.ValueAndGradient(codec.Features(work), &gx);
        if (!std::isfinite(value)) return std::numeric_limits<double>::infinity();
        grad->resize(n);
        for (int j = 0; j < n; ++j) {
          (*grad)(j) = -gx(encoding.column(vars[j])) * codec.Warp(vars[j]).Derivative(u(j));
        }
        return -value;
      };
      Eigen::VectorXd lower(n), upper(n);
      for (int j = 0; j < n; ++j) {
        lower(j) = codec.Lower(vars[j]);
        upper(j) = codec.Upper(vars[j]);
      }
      MinimizeInBox(objective, lower, upper, options_.local_iterations, 1e-9, &v);
      for (int j = 0; j < n; ++j) work[vars[j]] = v(j);
      codec.Snap(&work);
      const double s = acquisition.Score(codec.Features(work));
      if (s > *score) {
        *score = s;
        *z = std::move(work);
      }
    }
    for (int i = 0; i < space.size(); ++i) {
      const Param& p = space.params[i];
      if (IsNumeric(p) || !codec.Active(*z)[i]) continue;
      const double current = (*z)[i];
      for (int c = 0; c < p.num_choices(); ++c) {
        if (c == current) continue;
        Latent other = *z;
        other[i] = c;
        const double s = acquisition.Score(codec.Features(other));
        if (s > *score) {
          *score = s;
          *z = std::move(other);
        }
      }
    }
  }

  GpOptions options_;
};

}  // namespace

GpEncoding::GpEncoding(const SearchSpace& space) : space_(&space) {
  for (const Param& p : space.params) {
    columns_.push_back(dims_);
    dims_ += IsNumeric(p) ? 1 : std::max(p.num_choices(), 1);
  }
}

Eigen::VectorXd GpEncoding::Encode(const Assignment& a) const {
  Eigen::VectorXd x = Eigen::VectorXd::Zero(dims_);
  for (int i = 0; i < space_->size(); ++i) {
    const Param& p = space_->params[i];
    if (IsNumeric(p)) {
      x(columns_[i]) = IsInactive(a[i]) ? kInactiveUnit : std::clamp(p.ToUnit(a[i]), 0.0, 1.0);
    } else if (!IsInactive(a[i]) && a[i] >= 0 && a[i] < p.num_choices()) {
      x(columns_[i] + static_cast<int>(IndexIn(a[i], p.num_choices()))) = 1;
    }
  }
  return x;
}

Eigen::MatrixXd GpEncoding::EncodeAll(const std::vector<Assignment>& assignments) const {
  Eigen::MatrixXd X(static_cast<Eigen::Index>(assignments.size()), dims_);
  for (size_t i = 0; i < assignments.size(); ++i) X.row(i) = Encode(assignments[i]).transpose();
  return X;
}

std::unique_ptr<Sampler> MakeGpSampler(GpOptions options) {
  return std::make_unique<GpSampler>(options);
}

}  // namespace hpo::search
