#include "search/tpe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace hpo::search {
namespace {

constexpr double kSqrt2 = 1.4142135623730951;
constexpr double kLogSqrt2Pi = 0.91893853320467274;

double NormalCdf(double z) { return 0.5 * std::erfc(-z / kSqrt2); }

// A Parzen mixture: one kernel per observation plus a uniform prior
// component. Kernels are stored as flat arrays (kernel-major), since a
// suggestion scores every candidate against every kernel.
class Mixture {
 public:
  Mixture(const SearchSpace& space, const std::vector<const Assignment*>& points,
          const std::vector<double>& weights, const TpeOptions& o)
      : space_(space), d_(space.params.size()), n_(points.size()) {
    double total = o.prior_weight;
    for (double w : weights) total += w;
    prior_log_weight_ = std::log(o.prior_weight / total);
    mu_.assign(n_ * d_, kInactive);
    sigma_.assign(n_ * d_, 1);
    log_norm_.assign(n_ * d_, 0);
    inv2s2_.assign(n_ * d_, 0.5);
    log_weight_.resize(n_);
    cumulative_.resize(n_);
    double acc = o.prior_weight / total;
    for (size_t k = 0; k < n_; ++k) {
      log_weight_[k] = std::log(weights[k] / total);
      acc += weights[k] / total;
      cumulative_[k] = acc;
      for (size_t i = 0; i < d_; ++i) {
        const double v = (*points[k])[i];
        if (IsInactive(v)) continue;
        const Param& p = space.params[i];
        mu_[k * d_ + i] = p.kind == ParamKind::kCategorical ? v : p.ToUnit(v);
      }
    }
    categorical_.resize(d_);
    log_same_.resize(d_);
    log_other_.resize(d_);
    log_uniform_.resize(d_);
    for (size_t i = 0; i < d_; ++i) {
      const Param& p = space.params[i];
      categorical_[i] = p.kind == ParamKind::kCategorical;
      if (categorical_[i]) {
        const int n = p.num_choices();
        log_same_[i] = std::log(CategoricalProb(n, true));
        log_other_[i] = std::log(CategoricalProb(n, false));
        log_uniform_[i] = -std::log(n);
      } else {
        SetBandwidths(i, o);
      }
    }
  }

  // Draws one assignment: pick a component, then each active param from it
  // (or from the prior where the component lacks that param).
  Assignment Sample(Rng& rng) const {
    const double* k = PickComponent(rng);
    const size_t row = k ? static_cast<size_t>(k - mu_.data()) : 0;
    Assignment a(d_, kInactive);
    for (int i = 0; i < space_.size(); ++i) {
      if (!space_.IsActive(i, a)) continue;
      const Param& p = space_.params[i];
      if (!k || IsInactive(k[i])) {
        a[i] = p.FromUnit(rng.Uniform());
      } else if (categorical_[i]) {
        a[i] = SampleCategorical(p, static_cast<int>(k[i]), rng);
      } else {
        double u = -1;
        for (int tries = 0; tries < 64 && (u < 0 || u > 1); ++tries) {
          u = k[i] + sigma_[row + i] * rng.Normal();
        }
        a[i] = p.FromUnit(std::clamp(u, 0.0, 1.0));
      }
    }
    return a;
  }

  // log density of `a` under the mixture.
  double LogDensity(const Assignment& a) const {
    // Prior: uniform over the unit cube, 1/k per categorical.
    double prior = prior_log_weight_;
    unit_.resize(d_);
    for (size_t i = 0; i < d_; ++i) {
      if (IsInactive(a[i])) {
        unit_[i] = kInactive;
      } else if (categorical_[i]) {
        unit_[i] = a[i];
        prior += log_uniform_[i];
      } else {
        unit_[i] = space_.params[i].ToUnit(a[i]);
      }
    }
    scratch_.resize(n_);
    double best = prior;
    for (size_t k = 0; k < n_; ++k) {
      const double* mu = &mu_[k * d_];
      const double* log_norm = &log_norm_[k * d_];
      const double* inv2s2 = &inv2s2_[k * d_];
      double lp = log_weight_[k];
      for (size_t i = 0; i < d_; ++i) {
        const double x = unit_[i];
        if (IsInactive(x)) continue;
        if (categorical_[i]) {
          lp += IsInactive(mu[i]) ? log_uniform_[i] : (x == mu[i] ? log_same_[i] : log_other_[i]);
        } else if (!IsInactive(mu[i])) {
          const double dx = x - mu[i];
          lp += log_norm[i] - dx * dx * inv2s2[i];
        }  // else: the prior's density, 1 in the unit cube
      }
      scratch_[k] = lp;
      best = std::max(best, lp);
    }
    // Terms below e^-700 vanish next to the largest (which is 1); skipping
    // them avoids exp's slow underflow path.
    double sum = prior - best > -700 ? std::exp(prior - best) : 0;
    for (double v : scratch_) {
      if (v - best > -700) sum += std::exp(v - best);
    }
    return best + std::log(sum);
  }

 private:
  // A kernel keeps half its mass on the observed choice and spreads the
  // rest evenly, so unseen choices stay reachable.
  static double CategoricalProb(int n, bool same) { return same ? 0.5 + 0.5 / n : 0.5 / n; }

  static double SampleCategorical(const Param& p, int observed, Rng& rng) {
    const int n = p.num_choices();
    double u = rng.Uniform();
    for (int c = 0; c < n; ++c) {
      u -= CategoricalProb(n, c == observed);
      if (u < 0) return c;
    }
    return n - 1;
  }

  // The chosen kernel's row of mu_, or null for the prior.
  const double* PickComponent(Rng& rng) const {
    const double u = rng.Uniform();
    if (n_ == 0 || u < std::exp(prior_log_weight_)) return nullptr;
    const size_t k = std::min<size_t>(
        n_ - 1, std::upper_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin());
    return &mu_[k * d_];
  }

  // Bandwidths of param i. kNeighbor (Optuna's univariate rule, used per
  // dimension of the joint kernel): the larger gap to the neighbouring
  // observations, clipped to [1 / min(100, n + 1), 1] ("magic clip"), so
  // kernels narrow where good points cluster. kScott: one width for all,
  // f * n^(-1/(d+4)), d = the params an observation has on average.
  void SetBandwidths(size_t i, const TpeOptions& o) {
    std::vector<std::pair<double, size_t>> pos;
    for (size_t k = 0; k < n_; ++k) {
      if (!IsInactive(mu_[k * d_ + i])) pos.emplace_back(mu_[k * d_ + i], k);
    }
    if (pos.empty()) return;
    std::sort(pos.begin(), pos.end());
    const size_t n = pos.size();
    std::vector<double> sig(n);
    if (o.bandwidth == TpeOptions::Bandwidth::kScott) {
      double active = 0;
      for (double m : mu_) active += !IsInactive(m);
      const double d = std::max(1.0, active / n_);
      std::fill(sig.begin(), sig.end(),
                std::max(o.min_bandwidth,
                         o.bandwidth_factor * std::pow(static_cast<double>(n), -1.0 / (d + 4))));
    } else {
      const double lo = 1.0 / std::min(100.0, n + 1.0);
      for (size_t j = 0; j < n; ++j) {
        const double left = j > 0 ? pos[j].first - pos[j - 1].first : 0;
        const double right = j + 1 < n ? pos[j + 1].first - pos[j].first : 0;
        sig[j] = std::clamp(n == 1 ? 1.0 : std::max(left, right), std::max(lo, o.min_bandwidth), 1.0);
      }
    }
    double last_sigma = -1, log_sigma = 0;
    for (size_t j = 0; j < n; ++j) {
      const size_t at = pos[j].second * d_ + i;
      const double mu = mu_[at], sigma = sig[j];
      if (sigma != last_sigma) {  // many kernels share the clipped width
        last_sigma = sigma;
        log_sigma = std::log(sigma);
      }
      // Mass inside [0, 1]; 1 to double precision when the kernel sits
      // more than 8 sigma from both ends, the common case.
      double log_z = 0;
      if (mu < 8 * sigma || 1 - mu < 8 * sigma) {
        log_z = std::log(std::max(NormalCdf((1 - mu) / sigma) - NormalCdf(-mu / sigma), 1e-300));
      }
      sigma_[at] = sigma;
      inv2s2_[at] = 1 / (2 * sigma * sigma);
      log_norm_[at] = -log_sigma - kLogSqrt2Pi - log_z;
    }
  }

  const SearchSpace& space_;
  size_t d_, n_;
  double prior_log_weight_ = 0;
  std::vector<double> mu_, sigma_, log_norm_, inv2s2_;  // n_ x d_, kernel-major
  std::vector<double> log_weight_, cumulative_;        // per kernel
  std::vector<char> categorical_;                       // per param
  std::vector<double> log_same_, log_other_, log_uniform_;
  mutable std::vector<double> scratch_, unit_;
};

// Optuna's default weights: the 25 newest observations weigh 1, older ones
// ramp down linearly, so a long history does not freeze the model.
std::vector<double> RecencyWeights(size_t n) {
  std::vector<double> w(n, 1.0);
  if (n <= 25) return w;
  const size_t ramp = n - 25;
  for (size_t i = 0; i < ramp; ++i) {
    w[i] = 1.0 / n + (1.0 - 1.0 / n) * (ramp == 1 ? 0.0 : static_cast<double>(i) / (ramp - 1));
  }
  return w;
}

class TpeSampler final : public Sampler {
 public:
  explicit TpeSampler(TpeOptions o) : o_(o) {}
  std::string_view name() const override { return "tpe"; }

  std::vector<Assignment> Suggest(const SearchSpace& space, const History& history, int count,
                                  Rng& rng) override {
    // Ranked results: (completed?, -steps, value, number) ascending = better first.
    struct Ranked {
      int tier;
      double neg_steps, value;
      int64_t number;
      const Assignment* params;
    };
    std::vector<Ranked> ranked;
    std::vector<const Observation*> running;
    for (const Observation& t : history.trials) {
      if (t.params.size() != space.params.size()) continue;
      if (t.status == TrialStatus::kCompleted && t.value && std::isfinite(*t.value)) {
        ranked.push_back({0, 0, *t.value, t.number, &t.params});
      } else if (t.status == TrialStatus::kPruned && !t.curve.empty() &&
                 std::isfinite(t.curve.back().second)) {
        ranked.push_back({1, -static_cast<double>(t.curve.back().first), t.curve.back().second,
                          t.number, &t.params});
      } else if (t.status == TrialStatus::kRunning) {
        running.push_back(&t);
      }
    }
    std::sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
      return std::tie(a.tier, a.neg_steps, a.value, a.number) <
             std::tie(b.tier, b.neg_steps, b.value, b.number);
    });

    std::vector<Assignment> out;
    std::vector<Assignment> batch;  // this call's earlier suggestions
    for (int s = 0; s < count; ++s) {
      if (static_cast<int>(ranked.size()) < o_.startup_trials) {
        out.push_back(SampleUniform(space, rng));
        continue;
      }
      const size_t n = ranked.size();
      const size_t n_good = std::min<size_t>(
          static_cast<size_t>(std::ceil(o_.gamma_fraction * n)), static_cast<size_t>(o_.gamma_cap));
      // Each set in trial order, so recency weights apply to the right ones.
      std::vector<const Ranked*> good, bad;
      for (size_t i = 0; i < n; ++i) (i < std::max<size_t>(1, n_good) ? good : bad).push_back(&ranked[i]);
      auto by_number = [](const Ranked* a, const Ranked* b) { return a->number < b->number; };
      std::sort(good.begin(), good.end(), by_number);
      std::sort(bad.begin(), bad.end(), by_number);
      // g(x) from the newest max_bad_observations only: older ones weigh
      // little under the recency weights, and scoring against thousands of
      // kernels would make a suggestion cost tens of milliseconds.
      if (bad.size() > static_cast<size_t>(o_.max_bad_observations)) {
        bad.erase(bad.begin(), bad.end() - o_.max_bad_observations);
      }
      std::vector<const Assignment*> good_pts, bad_pts;
      for (auto* r : good) good_pts.push_back(r->params);
      for (auto* r : bad) bad_pts.push_back(r->params);
      if (o_.constant_liar) {
        for (auto* t : running) bad_pts.push_back(&t->params);
        for (auto& b : batch) bad_pts.push_back(&b);
      }
      // The same cap with thousands of running trials (a large fleet): keep
      // the newest, which include this batch's own lies.
      if (bad_pts.size() > static_cast<size_t>(o_.max_bad_observations)) {
        bad_pts.erase(bad_pts.begin(), bad_pts.end() - o_.max_bad_observations);
      }
      const Mixture l(space, good_pts, RecencyWeights(good_pts.size()), o_);
      const Mixture g(space, bad_pts, RecencyWeights(bad_pts.size()), o_);
      Assignment best;
      double best_score = -std::numeric_limits<double>::infinity();
      for (int c = 0; c < o_.candidates; ++c) {
        Assignment a = l.Sample(rng);
        const double score = l.LogDensity(a) - g.LogDensity(a);
        if (score > best_score || best.empty()) {
          best_score = score;
          best = std::move(a);
        }
      }
      batch.push_back(best);
      out.push_back(std::move(best));
    }
    return out;
  }

 private:
  TpeOptions o_;
};

}  // namespace

std::unique_ptr<Sampler> MakeTpeSampler(TpeOptions options) {
  return std::make_unique<TpeSampler>(options);
}

}  // namespace hpo::search
