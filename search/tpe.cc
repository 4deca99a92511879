#include "search/tpe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace hpo::search {
namespace {

constexpr double kSqrt2 = 1.4142135623730951;
constexpr double kLogSqrt2Pi = 0.91893853320467274;

double NormalCdf(double z) { return 0.5 * std::erfc(-z / kSqrt2); }

// One observation's kernel, prepared for fast evaluation.
struct Kernel {
  std::vector<double> mu;        // unit-cube position per param (NaN: inactive)
  std::vector<double> sigma;     // bandwidth per numeric param, in the unit cube
  std::vector<double> log_norm;  // -log(sigma * sqrt(2 pi) * Z), Z: mass inside [0, 1]
  std::vector<double> inv2s2;    // 1 / (2 sigma^2)
  double log_weight = 0;
};

class Mixture {
 public:
  Mixture(const SearchSpace& space, const std::vector<const Assignment*>& points,
          const std::vector<double>& weights, const TpeOptions& o)
      : space_(space) {
    double total = o.prior_weight;
    for (double w : weights) total += w;
    prior_log_weight_ = std::log(o.prior_weight / total);
    const size_t d = space.params.size();
    kernels_.resize(points.size());
    for (size_t k = 0; k < points.size(); ++k) {
      Kernel& kern = kernels_[k];
      kern.log_weight = std::log(weights[k] / total);
      kern.mu.assign(d, kInactive);
      kern.sigma.assign(d, 1);
      kern.log_norm.assign(d, 0);
      kern.inv2s2.assign(d, 0.5);
      for (size_t i = 0; i < d; ++i) {
        const double v = (*points[k])[i];
        if (IsInactive(v)) continue;
        const Param& p = space.params[i];
        kern.mu[i] = p.kind == ParamKind::kCategorical ? v : p.ToUnit(v);
      }
    }
    for (size_t i = 0; i < d; ++i) {
      if (space.params[i].kind != ParamKind::kCategorical) SetBandwidths(static_cast<int>(i), o);
    }
  }

  // Draws one assignment: pick a component, then each active param from it
  // (or from the prior where the component lacks that param).
  Assignment Sample(Rng& rng) const {
    const Kernel* k = PickComponent(rng);
    Assignment a(space_.params.size(), kInactive);
    for (int i = 0; i < space_.size(); ++i) {
      if (!space_.IsActive(i, a)) continue;
      const Param& p = space_.params[i];
      if (!k || IsInactive(k->mu[i])) {
        a[i] = p.FromUnit(rng.Uniform());
      } else if (p.kind == ParamKind::kCategorical) {
        a[i] = SampleCategorical(p, static_cast<int>(k->mu[i]), rng);
      } else {
        double u = -1;
        for (int tries = 0; tries < 64 && (u < 0 || u > 1); ++tries) {
          u = k->mu[i] + k->sigma[i] * rng.Normal();
        }
        a[i] = p.FromUnit(std::clamp(u, 0.0, 1.0));
      }
    }
    return a;
  }

  // log density of `a` under the mixture (up to a constant shared by l and g).
  double LogDensity(const Assignment& a) const {
    // Prior: uniform over the unit cube, 1/k per categorical.
    double prior = prior_log_weight_;
    for (int i = 0; i < space_.size(); ++i) {
      if (!IsInactive(a[i]) && space_.params[i].kind == ParamKind::kCategorical) {
        prior -= std::log(space_.params[i].num_choices());
      }
    }
    // The candidate's unit-cube coordinates, computed once for all kernels.
    unit_.resize(a.size());
    for (int i = 0; i < space_.size(); ++i) {
      unit_[i] = IsInactive(a[i]) || space_.params[i].kind == ParamKind::kCategorical
                     ? a[i]
                     : space_.params[i].ToUnit(a[i]);
    }
    double best = prior;
    scratch_.assign(1, prior);
    for (const Kernel& k : kernels_) {
      double lp = k.log_weight;
      for (int i = 0; i < space_.size(); ++i) {
        if (IsInactive(a[i])) continue;
        const Param& p = space_.params[i];
        if (p.kind == ParamKind::kCategorical) {
          const int n = p.num_choices();
          lp += IsInactive(k.mu[i]) ? -std::log(n) : std::log(CategoricalProb(n, a[i] == k.mu[i]));
        } else if (!IsInactive(k.mu[i])) {
          const double dx = unit_[i] - k.mu[i];
          lp += k.log_norm[i] - dx * dx * k.inv2s2[i];
        }  // else: the prior's density, 1 in the unit cube
      }
      scratch_.push_back(lp);
      best = std::max(best, lp);
    }
    double sum = 0;
    for (double v : scratch_) sum += std::exp(v - best);
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

  const Kernel* PickComponent(Rng& rng) const {
    double u = rng.Uniform();
    u -= std::exp(prior_log_weight_);
    if (u < 0) return nullptr;
    for (const Kernel& k : kernels_) {
      u -= std::exp(k.log_weight);
      if (u < 0) return &k;
    }
    return kernels_.empty() ? nullptr : &kernels_.back();
  }

  // Bandwidths of param i. kNeighbor (Optuna's univariate rule, used per
  // dimension of the joint kernel): the larger gap to the neighbouring
  // observations, clipped to [1 / min(100, n + 1), 1] ("magic clip"), so
  // kernels narrow where good points cluster. kScott: one width for all,
  // f * n^(-1/(d+4)), d = the params an observation has on average.
  void SetBandwidths(int i, const TpeOptions& o) {
    std::vector<std::pair<double, size_t>> pos;
    for (size_t k = 0; k < kernels_.size(); ++k) {
      if (!IsInactive(kernels_[k].mu[i])) pos.emplace_back(kernels_[k].mu[i], k);
    }
    if (pos.empty()) return;
    std::sort(pos.begin(), pos.end());
    const size_t n = pos.size();
    std::vector<double> sig(n);
    if (o.bandwidth == TpeOptions::Bandwidth::kScott) {
      double active = 0;
      for (const auto& k : kernels_) {
        for (double m : k.mu) active += !IsInactive(m);
      }
      const double d = std::max(1.0, active / kernels_.size());
      std::fill(sig.begin(), sig.end(),
                std::max(o.min_bandwidth, o.bandwidth_factor * std::pow(static_cast<double>(n), -1.0 / (d + 4))));
    } else {
      const double lo = 1.0 / std::min(100.0, n + 1.0);
      for (size_t j = 0; j < n; ++j) {
        const double left = j > 0 ? pos[j].first - pos[j - 1].first : 0;
        const double right = j + 1 < n ? pos[j + 1].first - pos[j].first : 0;
        sig[j] = std::clamp(n == 1 ? 1.0 : std::max(left, right), std::max(lo, o.min_bandwidth), 1.0);
      }
    }
    for (size_t j = 0; j < n; ++j) {
      Kernel& kern = kernels_[pos[j].second];
      const double mu = kern.mu[i], sigma = sig[j];
      const double z = NormalCdf((1 - mu) / sigma) - NormalCdf(-mu / sigma);
      kern.sigma[i] = sigma;
      kern.inv2s2[i] = 1 / (2 * sigma * sigma);
      kern.log_norm[i] = -std::log(sigma) - kLogSqrt2Pi - std::log(std::max(z, 1e-300));
    }
  }

  const SearchSpace& space_;
  double prior_log_weight_ = 0;
  std::vector<Kernel> kernels_;
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
      std::vector<const Assignment*> good_pts, bad_pts;
      for (auto* r : good) good_pts.push_back(r->params);
      for (auto* r : bad) bad_pts.push_back(r->params);
      if (o_.constant_liar) {
        for (auto* t : running) bad_pts.push_back(&t->params);
        for (auto& b : batch) bad_pts.push_back(&b);
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
