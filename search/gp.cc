#include "search/gp.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

namespace hpo::search {
namespace {

constexpr double kSqrt5 = 2.23606797749978969641;
constexpr double kLogSqrt2Pi = 0.91893853320467274178;  // log(2 pi) / 2
constexpr double kSqrtHalfPi = 1.25331413731550025121;  // sqrt(pi / 2)
constexpr double kInf = std::numeric_limits<double>::infinity();

// Priors. Lengthscales: LogNormal(sqrt(2) + log(d) / 2, sqrt(3)), the
// dimension-scaled prior of Hvarfner et al., "Vanilla Bayesian Optimization
// Performs Great in High Dimensions" (ICML 2024): weak, and it leans towards
// smooth functions as d grows, which keeps the model from overfitting a
// handful of points. It is a density on the lengthscale l, so in the log
// space the optimizer works in (t = log l) its negative log is
// (t - mu)^2 / (2 sigma^2) + t, with the Jacobian term t: its mode is
// l = exp(mu - sigma^2), 0.5 at d = 6. Without that term (a Gaussian on t,
// as this code had) the mode sat at exp(mu), 10 at d = 6 and 13 at d = 10:
// twenty times too smooth, so with a few dozen points the model was nearly
// flat and GP-BO searched almost at random in 10 dimensions (bench/README.md,
// "Why our GP lost to a plain GP-EI loop").
// Signal and noise variance: Gaussian in log space.
constexpr double kLengthscaleSigma = 1.7320508075688772;
// Signal variance of standardized targets: about 1.
constexpr double kSignalMu = 0;
constexpr double kSignalSigma = 1;
// Noise (excess over the floor): around 2.5e-3 of the target variance, wide
// enough that noiseless functions reach the floor and noisy ones fit theirs.
constexpr double kNoiseMu = -6;
constexpr double kNoiseSigma = 3;

// Box for the optimizer, beyond which nothing changes that matters in the
// unit cube; mostly a guard against drifting on a flat likelihood.
constexpr double kMinLogLengthscale = -5.3;  // 0.005
constexpr double kMaxLogLengthscale = 6.9;   // 1000
constexpr double kMinLogSignal = -7;
constexpr double kMaxLogSignal = 7;
constexpr double kMinLogNoise = -25;
constexpr double kMaxLogNoise = 3;

double LengthscaleMu(int dims) { return std::sqrt(2.0) + 0.5 * std::log(std::max(dims, 1)); }

// Matérn 5/2 in place: `m` holds squared scaled distances on entry and
// signal * correlation on exit. Coefficient-wise, so no aliasing issue.
void Matern52InPlace(double signal, Eigen::Ref<Eigen::MatrixXd> m) {
  m.array() = m.array().max(0.0).sqrt();
  m.array() = signal * (1.0 + kSqrt5 * m.array() + (5.0 / 3.0) * m.array().square()) *
              (-kSqrt5 * m.array()).exp();
}

// out = signal * Matérn(A_i, B_j) for rows of already scaled inputs; b2 holds
// the squared norms of B's rows.
void CrossKernel(const Eigen::Ref<const Eigen::MatrixXd>& A,
                 const Eigen::Ref<const Eigen::MatrixXd>& B,
                 const Eigen::Ref<const Eigen::VectorXd>& b2, double signal, Eigen::MatrixXd* out) {
  out->resize(A.rows(), B.rows());
  out->noalias() = -2.0 * A * B.transpose();
  out->colwise() += A.rowwise().squaredNorm();
  out->rowwise() += b2.transpose();
  Matern52InPlace(signal, *out);
}

Eigen::MatrixXd ScaleColumns(const Eigen::MatrixXd& X, const Eigen::VectorXd& log_lengthscales) {
  return X * (-log_lengthscales.array()).exp().matrix().asDiagonal();
}

// Inverts a lower-triangular matrix in place (the strict upper part must be
// zero). Recursing on 2x2 blocks, [A 0; B C]^-1 = [A^-1 0; -C^-1 B A^-1 C^-1],
// turns the work into triangular matrix products: about three times faster
// than a triangular solve against the identity.
void InvertLowerInPlace(Eigen::Ref<Eigen::MatrixXd> L) {
  const Eigen::Index n = L.rows();
  if (n <= 32) {
    Eigen::MatrixXd inv = Eigen::MatrixXd::Identity(n, n);
    L.triangularView<Eigen::Lower>().solveInPlace(inv);
    L = inv;
    return;
  }
  const Eigen::Index h = n / 2;
  InvertLowerInPlace(L.topLeftCorner(h, h));
  InvertLowerInPlace(L.bottomRightCorner(n - h, n - h));
  const Eigen::MatrixXd t =
      L.bottomLeftCorner(n - h, h) * L.topLeftCorner(h, h).triangularView<Eigen::Lower>();
  L.bottomLeftCorner(n - h, h).noalias() =
      -(L.bottomRightCorner(n - h, n - h).triangularView<Eigen::Lower>() * t);
}

// The negative log posterior of the hyperparameters theta = [log lengthscales,
// log signal variance, log noise excess], for standardized targets. Keeps its
// n x n work matrices between calls: the optimizer calls it dozens of times,
// and fresh allocations of that size cost page faults each time.
class NegLogPosterior {
 public:
  NegLogPosterior(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, double min_noise)
      // Distances do not change with a shift; centering keeps the sums in the
      // lengthscale gradient small, so they cancel less.
      : X_(X.rowwise() - X.colwise().mean()),
        X2_(X_.array().square().matrix()),
        y_(y),
        min_noise_(min_noise),
        ls_mu_(LengthscaleMu(static_cast<int>(X.cols()))) {
    const Eigen::Index n = X.rows();
    Xs_.resize(n, X.cols());
    R_.resize(n, n);
    E_.resize(n, n);
    K_.resize(n, n);
    W_.resize(n, n);
    MX_.resize(n, X.cols());
  }

  double operator()(const Eigen::VectorXd& theta, Eigen::VectorXd* grad) const {
    const Eigen::Index n = X_.rows();
    const Eigen::Index d = X_.cols();
    const Eigen::ArrayXd log_ls = theta.head(d).array();
    const double signal = std::exp(theta(d));
    const double noise_excess = std::exp(theta(d + 1));
    const double noise = min_noise_ + noise_excess;

    Xs_.noalias() = X_ * (-log_ls).exp().matrix().asDiagonal();
    const Eigen::VectorXd sq = Xs_.rowwise().squaredNorm();
    R_.noalias() = -2.0 * Xs_ * Xs_.transpose();
    R_.colwise() += sq;
    R_.rowwise() += sq.transpose();
    R_.diagonal().setZero();
    R_.array() = R_.array().max(0.0).sqrt();
    E_.array() = (-kSqrt5 * R_.array()).exp();
    K_.array() =
        signal * (1.0 + kSqrt5 * R_.array() + (5.0 / 3.0) * R_.array().square()) * E_.array();
    K_.diagonal().array() += noise;
    const Eigen::LLT<Eigen::Ref<Eigen::MatrixXd>> llt(K_);
    if (llt.info() != Eigen::Success) return kInf;
    alpha_ = y_;
    llt.solveInPlace(alpha_);
    const double log_det_half = llt.matrixLLT().diagonal().array().log().sum();
    double value = 0.5 * y_.dot(alpha_) + log_det_half + static_cast<double>(n) * kLogSqrt2Pi;

    // Priors (negated log densities, constants dropped).
    const Eigen::ArrayXd zl = (log_ls - ls_mu_) / kLengthscaleSigma;
    const double zs = (theta(d) - kSignalMu) / kSignalSigma;
    const double zn = (theta(d + 1) - kNoiseMu) / kNoiseSigma;
    value += 0.5 * (zl.square().sum() + zs * zs + zn * zn) + log_ls.sum();
    if (!std::isfinite(value)) return kInf;
    if (grad == nullptr) return value;

    // d(-log p)/d theta_j = -tr(W dK/d theta_j) / 2 with W = alpha alpha^T - K^-1.
    W_.setIdentity();
    llt.solveInPlace(W_);
    W_ = -W_;
    W_.noalias() += alpha_ * alpha_.transpose();
    grad->resize(d + 2);
    // Signal: dK/d log s = signal * correlation.
    const double w_corr =
        (W_.array() * (1.0 + kSqrt5 * R_.array() + (5.0 / 3.0) * R_.array().square()) * E_.array())
            .sum();
    (*grad)(d) = -0.5 * signal * w_corr + zs / kSignalSigma;
    (*grad)(d + 1) = -0.5 * noise_excess * W_.trace() + zn / kNoiseSigma;
    // dK_ab / d log l_j = signal (5/3) (1 + sqrt5 r) e^(-sqrt5 r) (x_aj - x_bj)^2 / l_j^2.
    // With M = W o that factor (in K_), sum_ab M_ab (x_aj - x_bj)^2 is
    // 2 (sum_a x_aj^2 rowsum(M)_a - x_j^T M x_j).
    K_.array() = W_.array() * (signal * (5.0 / 3.0)) * (1.0 + kSqrt5 * R_.array()) * E_.array();
    const Eigen::VectorXd row_sums = K_.rowwise().sum();
    MX_.noalias() = K_ * X_;
    const Eigen::ArrayXd t1 = (X2_.transpose() * row_sums).array();
    const Eigen::ArrayXd t2 = (MX_.array() * X_.array()).colwise().sum().transpose();
    grad->head(d) = (-(t1 - t2) * (-2.0 * log_ls).exp() + zl / kLengthscaleSigma + 1.0).matrix();
    return value;
  }

 private:
  Eigen::MatrixXd X_;
  Eigen::MatrixXd X2_;
  Eigen::VectorXd y_;
  double min_noise_;
  double ls_mu_;
  // Work space (this object is used by one thread, for one fit).
  mutable Eigen::MatrixXd Xs_, R_, E_, K_, W_, MX_;
  mutable Eigen::VectorXd alpha_;
};

Status CheckFinite(const Eigen::MatrixXd& X, const Eigen::VectorXd& y) {
  if (X.rows() != y.size()) {
    return Status::InvalidArgument("gp: " + std::to_string(X.rows()) + " inputs but " +
                                   std::to_string(y.size()) + " targets");
  }
  if (X.rows() == 0) return Status::InvalidArgument("gp: no observations");
  if (!X.allFinite() || !y.allFinite()) {
    return Status::InvalidArgument("gp: inputs and targets must be finite");
  }
  return Status::OK();
}

// Mean and standard deviation of the targets (1 when they are all equal).
void Standardization(const Eigen::VectorXd& y, double* mean, double* sd) {
  *mean = y.mean();
  *sd = std::sqrt((y.array() - *mean).square().mean());
  if (!(*sd > 1e-12 * std::max(1.0, std::abs(*mean)))) *sd = 1;
}

}  // namespace

double GpHyperparameters::noise() const { return min_noise + std::exp(log_noise_excess); }

double GaussianProcess::signal_variance() const { return std::exp(hyper_.log_signal_variance); }
double GaussianProcess::noise() const { return hyper_.noise(); }

Result<GaussianProcess> GaussianProcess::Fit(const Eigen::MatrixXd& X, const Eigen::VectorXd& y,
                                             Rng& rng, const GpFitOptions& options) {
  HPO_RETURN_IF_ERROR(CheckFinite(X, y));
  const int d = static_cast<int>(X.cols());
  double mean, sd;
  Standardization(y, &mean, &sd);
  const Eigen::VectorXd ys = (y.array() - mean) / sd;
  const NegLogPosterior objective(X, ys, options.min_noise);

  Eigen::VectorXd lower(d + 2), upper(d + 2);
  lower << Eigen::VectorXd::Constant(d, kMinLogLengthscale), kMinLogSignal, kMinLogNoise;
  upper << Eigen::VectorXd::Constant(d, kMaxLogLengthscale), kMaxLogSignal, kMaxLogNoise;
  const double ls_mu = LengthscaleMu(d);

  // Starting points: the prior's mode, a wiggly model (short lengthscales),
  // and draws from the priors; the likelihood alone ranks them.
  std::vector<Eigen::VectorXd> starts;
  Eigen::VectorXd mode(d + 2);
  mode << Eigen::VectorXd::Constant(d, ls_mu - kLengthscaleSigma * kLengthscaleSigma), kSignalMu,
      kNoiseMu;
  starts.push_back(mode);
  Eigen::VectorXd wiggly = mode;
  wiggly.head(d).setConstant(std::log(0.3));
  starts.push_back(wiggly);
  for (int i = 0; i < options.num_initial_draws; ++i) {
    Eigen::VectorXd t(d + 2);
    for (int j = 0; j < d; ++j) t(j) = ls_mu + kLengthscaleSigma * rng.Normal();
    t(d) = kSignalMu + kSignalSigma * rng.Normal();
    t(d + 1) = kNoiseMu + kNoiseSigma * rng.Normal();
    starts.push_back(t.cwiseMax(lower).cwiseMin(upper));
  }
  std::vector<std::pair<double, int>> ranked;
  ranked.reserve(starts.size());
  for (int i = 0; i < static_cast<int>(starts.size()); ++i) {
    ranked.emplace_back(objective(starts[i], nullptr), i);
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });

  Eigen::VectorXd best = starts[ranked[0].second];
  double best_value = ranked[0].first;
  const int restarts =
      X.rows() > options.max_observations_for_restarts
          ? 1
          : std::min<int>(std::max(options.num_restarts, 1), static_cast<int>(ranked.size()));
  for (int i = 0; i < restarts; ++i) {
    if (!std::isfinite(ranked[i].first)) break;
    Eigen::VectorXd theta = starts[ranked[i].second];
    const double value = MinimizeInBox(std::cref(objective), lower, upper, options.max_iterations,
                                       options.tolerance, &theta);
    if (value < best_value) {
      best_value = value;
      best = theta;
    }
  }

  GpHyperparameters hyper;
  hyper.log_lengthscales = best.head(d);
  hyper.log_signal_variance = best(d);
  hyper.log_noise_excess = best(d + 1);
  hyper.min_noise = options.min_noise;
  GaussianProcess gp;
  gp.hyper_ = hyper;
  HPO_RETURN_IF_ERROR(gp.Factorize(X, y));
  return gp;
}

Result<GaussianProcess> GaussianProcess::WithHyperparameters(
    const Eigen::MatrixXd& X, const Eigen::VectorXd& y, const GpHyperparameters& hyperparameters) {
  HPO_RETURN_IF_ERROR(CheckFinite(X, y));
  if (hyperparameters.log_lengthscales.size() != X.cols()) {
    return Status::InvalidArgument(
        "gp: " + std::to_string(hyperparameters.log_lengthscales.size()) + " lengthscales for " +
        std::to_string(X.cols()) + " dimensions");
  }
  GaussianProcess gp;
  gp.hyper_ = hyperparameters;
  HPO_RETURN_IF_ERROR(gp.Factorize(X, y));
  return gp;
}

Status GaussianProcess::Factorize(const Eigen::MatrixXd& X, const Eigen::VectorXd& y) {
  const Eigen::Index n = X.rows();
  n_ = n;
  X_ = X;
  Xs_ = ScaleColumns(X, hyper_.log_lengthscales);
  xs_norm2_ = Xs_.rowwise().squaredNorm();
  Standardization(y, &y_mean_, &y_std_);
  y_ = (y.array() - y_mean_) / y_std_;
  const double signal = signal_variance();
  // The noise floor normally suffices; jitter is the fallback for rounding.
  double jitter = 0;
  for (int attempt = 0; attempt < 8; ++attempt) {
    // Factorized and then inverted in place: one n x n matrix in all.
    CrossKernel(Xs_, Xs_, xs_norm2_, signal, &Linv_);
    Linv_.diagonal().setConstant(signal + noise() + jitter);
    const Eigen::LLT<Eigen::Ref<Eigen::MatrixXd>> llt(Linv_);
    jitter = jitter == 0 ? 1e-9 * (signal + noise()) : jitter * 10;
    if (llt.info() != Eigen::Success) continue;
    alpha_ = llt.solve(y_);
    log_marginal_likelihood_ = -0.5 * y_.dot(alpha_) - Linv_.diagonal().array().log().sum() -
                               static_cast<double>(n) * kLogSqrt2Pi;
    // The inverse factor turns every prediction into matrix products, much
    // faster than triangular solves for the sampler's candidate batches.
    Linv_.triangularView<Eigen::StrictlyUpper>().setZero();
    InvertLowerInPlace(Linv_);
    return Status::OK();
  }
  return Status::Internal("gp: kernel matrix is not positive definite even with jitter");
}

void GaussianProcess::Reserve(int capacity) {
  const Eigen::Index cap = std::max<Eigen::Index>(capacity, n_);
  if (cap <= X_.rows()) return;
  X_.conservativeResize(cap, Eigen::NoChange);
  Xs_.conservativeResize(cap, Eigen::NoChange);
  xs_norm2_.conservativeResize(cap);
  y_.conservativeResize(cap);
  alpha_.conservativeResize(cap);
  Linv_.conservativeResize(cap, cap);
}

void GaussianProcess::Predict(const Eigen::MatrixXd& Xs, Eigen::VectorXd* mean,
                              Eigen::VectorXd* var) const {
  const Eigen::Index m = Xs.rows();
  const double signal = signal_variance();
  if (mean != nullptr) mean->resize(m);
  if (var != nullptr) var->resize(m);
  const Eigen::VectorXd inv_ls = (-hyper_.log_lengthscales.array()).exp();
  const auto linv_t = Linv_.topLeftCorner(n_, n_).transpose().triangularView<Eigen::Upper>();
  // Blocks of rows keep the temporaries small enough to be recycled by the
  // allocator instead of being mapped (and faulted in) afresh.
  const Eigen::Index block =
      std::clamp<Eigen::Index>(8192 / std::max<Eigen::Index>(n_, 1), 16, 1024);
  Eigen::MatrixXd Ks, V;
  for (Eigen::Index start = 0; start < m; start += block) {
    const Eigen::Index rows = std::min(block, m - start);
    const Eigen::MatrixXd q = Xs.middleRows(start, rows) * inv_ls.asDiagonal();
    CrossKernel(q, Xs_.topRows(n_), xs_norm2_.head(n_), signal, &Ks);
    if (mean != nullptr) {
      mean->segment(start, rows) = ((Ks * alpha_.head(n_)).array() * y_std_ + y_mean_).matrix();
    }
    if (var != nullptr) {
      V.noalias() = Ks * linv_t;
      var->segment(start, rows) =
          ((signal - V.rowwise().squaredNorm().array()).max(0.0) * y_std_ * y_std_).matrix();
    }
  }
}

void GaussianProcess::Predict(PointCache* cache, Eigen::VectorXd* mean,
                              Eigen::VectorXd* var) const {
  PointCache& c = *cache;
  const Eigen::Index m = c.X_.rows();
  const double signal = signal_variance();
  if (c.n_ == 0 || c.Ks_.cols() < n_) {
    const Eigen::Index cap = std::max<Eigen::Index>(X_.rows(), n_);
    if (c.n_ == 0) {
      c.scaled_ = c.X_ * (-hyper_.log_lengthscales.array()).exp().matrix().asDiagonal();
      Eigen::MatrixXd Ks;
      CrossKernel(c.scaled_, Xs_.topRows(n_), xs_norm2_.head(n_), signal, &Ks);
      c.Ks_.resize(m, cap);
      c.V_.resize(m, cap);
      c.Ks_.leftCols(n_) = Ks;
      c.V_.leftCols(n_).noalias() =
          Ks * Linv_.topLeftCorner(n_, n_).transpose().triangularView<Eigen::Upper>();
      c.n_ = n_;
    } else {
      c.Ks_.conservativeResize(Eigen::NoChange, cap);
      c.V_.conservativeResize(Eigen::NoChange, cap);
    }
  }
  // Observations added since: a column of the cross-kernel each, and the
  // matching column of Ks L^-T from the new row of L^-1 (the older rows of
  // L^-1 do not change when an observation is added).
  Eigen::MatrixXd k;
  for (Eigen::Index t = c.n_; t < n_; ++t) {
    CrossKernel(c.scaled_, Xs_.row(t), xs_norm2_.segment(t, 1), signal, &k);
    c.Ks_.col(t) = k.col(0);
    c.V_.col(t).noalias() = c.Ks_.leftCols(t + 1) * Linv_.row(t).head(t + 1).transpose();
  }
  c.n_ = n_;
  if (mean != nullptr)
    *mean = ((c.Ks_.leftCols(n_) * alpha_.head(n_)).array() * y_std_ + y_mean_).matrix();
  if (var != nullptr) {
    *var = ((signal - c.V_.leftCols(n_).rowwise().squaredNorm().array()).max(0.0) * y_std_ * y_std_)
               .matrix();
  }
}

void GaussianProcess::PredictWithGradient(const Eigen::VectorXd& x, double* mean, double* var,
                                          Eigen::VectorXd* dmean, Eigen::VectorXd* dvar) const {
  const double signal = signal_variance();
  const Eigen::ArrayXd inv_ls = (-hyper_.log_lengthscales.array()).exp();
  const Eigen::RowVectorXd xs = (x.array() * inv_ls).matrix().transpose();
  const Eigen::ArrayXd r = (Xs_.topRows(n_).rowwise() - xs).rowwise().norm().array();
  const Eigen::ArrayXd e = (-kSqrt5 * r).exp();
  const Eigen::VectorXd k = (signal * (1.0 + kSqrt5 * r + (5.0 / 3.0) * r.square()) * e).matrix();
  // dk_i/dx = c_i (x - X_i) / l^2 with c_i = -(5/3) signal (1 + sqrt5 r_i) e^(-sqrt5 r_i).
  const Eigen::ArrayXd c = -(5.0 / 3.0) * signal * (1.0 + kSqrt5 * r) * e;
  const Eigen::ArrayXd inv_ls2 = inv_ls.square();
  // sum_i u_i dk_i/dx for a weight vector u.
  auto weighted_gradient = [&](const Eigen::VectorXd& u) -> Eigen::VectorXd {
    const Eigen::VectorXd cu = (c * u.array()).matrix();
    return ((cu.sum() * x - X_.topRows(n_).transpose() * cu).array() * inv_ls2).matrix();
  };
  if (mean != nullptr) *mean = k.dot(alpha_.head(n_)) * y_std_ + y_mean_;
  if (dmean != nullptr) *dmean = weighted_gradient(alpha_.head(n_)) * y_std_;
  if (var != nullptr || dvar != nullptr) {
    const auto linv = Linv_.topLeftCorner(n_, n_).triangularView<Eigen::Lower>();
    const Eigen::VectorXd v = linv * k;
    if (var != nullptr) *var = std::max(signal - v.squaredNorm(), 0.0) * y_std_ * y_std_;
    if (dvar != nullptr) {
      const Eigen::VectorXd w = linv.transpose() * v;  // K^-1 k
      *dvar = -2.0 * weighted_gradient(w) * y_std_ * y_std_;
    }
  }
}

Status GaussianProcess::AddObservation(const Eigen::VectorXd& x, double y, bool exact) {
  if (x.size() != X_.cols() || !x.allFinite() || !std::isfinite(y)) {
    return Status::InvalidArgument("gp: observation must be finite and of the model's dimension");
  }
  if (n_ == X_.rows()) Reserve(static_cast<int>(n_ + n_ / 2 + 8));
  const Eigen::Index n = n_;
  const double signal = signal_variance();
  const Eigen::RowVectorXd xs =
      (x.array() * (-hyper_.log_lengthscales.array()).exp()).matrix().transpose();
  Eigen::MatrixXd k;
  CrossKernel(Xs_.topRows(n), xs, Eigen::VectorXd::Constant(1, xs.squaredNorm()), signal, &k);
  // With K = L L^T, the new factor row is [l^T, c], l = L^-1 k, and the new
  // inverse row is [-l^T L^-1 / c, 1 / c].
  const auto linv = Linv_.topLeftCorner(n, n).triangularView<Eigen::Lower>();
  const Eigen::VectorXd l = linv * k.col(0);
  // The Schur complement is at least the noise in exact arithmetic.
  const double kss = signal + (exact ? hyper_.min_noise : noise());
  const double c = std::sqrt(std::max(kss - l.squaredNorm(), 1e-12 * kss));
  Linv_.row(n).head(n) = -(l.transpose() * linv) / c;
  Linv_.col(n).head(n).setZero();
  Linv_(n, n) = 1 / c;
  X_.row(n) = x.transpose();
  Xs_.row(n) = xs;
  xs_norm2_(n) = xs.squaredNorm();
  y_(n) = (y - y_mean_) / y_std_;
  n_ = n + 1;
  const auto linv1 = Linv_.topLeftCorner(n_, n_).triangularView<Eigen::Lower>();
  const Eigen::VectorXd t = linv1 * y_.head(n_);
  alpha_.head(n_) = linv1.transpose() * t;
  return Status::OK();
}

double Matern52(const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                const Eigen::VectorXd& lengthscales) {
  Eigen::MatrixXd m(1, 1);
  m(0, 0) = ((a - b).array() / lengthscales.array()).matrix().squaredNorm();
  Matern52InPlace(1.0, m);
  return m(0, 0);
}

double LogH(double z, double* dlogh) {
  const double log_phi = -0.5 * z * z - kLogSqrt2Pi;
  if (z > -1) {
    // No cancellation worth the name here.
    const double cdf = 0.5 * std::erfc(-z / std::sqrt(2.0));
    const double h = std::exp(log_phi) + z * cdf;
    if (dlogh != nullptr) *dlogh = cdf / h;
    return std::log(h);
  }
  // h = phi (1 + z m) with m = Phi / phi, the Mills ratio, so log h never
  // needs h itself (which underflows near z = -38).
  double m;           // Phi(z) / phi(z)
  double h_over_phi;  // 1 + z m, in (0, 1)
  if (z > -30) {
    // erfcx(x) = exp(x^2) erfc(x) is representable for x = -z / sqrt2 < 21.3;
    // 1 + z m loses about log10(z^2) digits, 3 at most.
    const double x = -z / std::sqrt(2.0);
    m = kSqrtHalfPi * std::exp(x * x) * std::erfc(x);
    h_over_phi = 1.0 + z * m;
  } else {
    // Asymptotic series in t = 1/z^2; its terms fall below 1e-12 by the last
    // one kept at |z| >= 30.
    const double t = 1.0 / (z * z);
    m = (1 - t * (1 - t * (3 - t * (15 - t * (105 - t * (945 - t * 10395)))))) / -z;
    h_over_phi = t * (1 - t * (3 - t * (15 - t * (105 - t * (945 - t * (10395 - t * 135135))))));
  }
  if (dlogh != nullptr) *dlogh = m / h_over_phi;  // Phi / h
  return log_phi + std::log(h_over_phi);
}

double LogExpectedImprovement(double mean, double sigma, double best) {
  return std::log(sigma) + LogH((best - mean) / sigma);
}

double MinimizeInBox(const std::function<double(const Eigen::VectorXd&, Eigen::VectorXd*)>& f,
                     const Eigen::VectorXd& lower, const Eigen::VectorXd& upper, int max_iterations,
                     double tolerance, Eigen::VectorXd* x) {
  constexpr int kMemory = 8;
  constexpr double kArmijo = 1e-4;
  const int n = static_cast<int>(x->size());
  Eigen::VectorXd xk = x->cwiseMax(lower).cwiseMin(upper);
  Eigen::VectorXd g(n), gn(n);
  double fk = f(xk, &g);
  if (!std::isfinite(fk) || n == 0) {
    *x = xk;
    return fk;
  }
  std::deque<Eigen::VectorXd> S, Y;
  std::deque<double> rho;
  for (int it = 0; it < max_iterations; ++it) {
    // Variables pinned at a bound by the gradient stay out of this step.
    Eigen::VectorXd free_mask(n);
    for (int i = 0; i < n; ++i) {
      const bool pinned = (xk(i) <= lower(i) && g(i) > 0) || (xk(i) >= upper(i) && g(i) < 0);
      free_mask(i) = pinned ? 0.0 : 1.0;
    }
    const Eigen::VectorXd gf = g.cwiseProduct(free_mask);
    if (gf.lpNorm<Eigen::Infinity>() < 1e-9) break;

    // Two-loop recursion.
    Eigen::VectorXd q = gf;
    std::vector<double> a(S.size());
    for (int i = static_cast<int>(S.size()) - 1; i >= 0; --i) {
      a[i] = rho[i] * S[i].dot(q);
      q -= a[i] * Y[i];
    }
    const double gamma = S.empty() ? 1.0 / std::max(1.0, gf.norm())
                                   : S.back().dot(Y.back()) / Y.back().squaredNorm();
    Eigen::VectorXd dir = gamma * q;
    for (int i = 0; i < static_cast<int>(S.size()); ++i) {
      const double b = rho[i] * Y[i].dot(dir);
      dir += (a[i] - b) * S[i];
    }
    dir = -dir.cwiseProduct(free_mask);
    if (gf.dot(dir) >= 0) {
      dir = -gf / std::max(1.0, gf.norm());
      S.clear();
      Y.clear();
      rho.clear();
    }

    // Backtracking along the projected path.
    double t = 1;
    bool accepted = false;
    double fn = kInf;
    Eigen::VectorXd xn(n);
    for (int ls = 0; ls < 30; ++ls) {
      xn = (xk + t * dir).cwiseMax(lower).cwiseMin(upper);
      const Eigen::VectorXd step = xn - xk;
      if (step.lpNorm<Eigen::Infinity>() < 1e-14) break;
      fn = f(xn, &gn);
      if (std::isfinite(fn) && fn <= fk + kArmijo * g.dot(step)) {
        accepted = true;
        break;
      }
      t *= 0.5;
    }
    if (!accepted) {
      if (S.empty()) break;
      S.clear();  // the quasi-Newton model misled us; retry along the gradient
      Y.clear();
      rho.clear();
      continue;
    }
    const Eigen::VectorXd s = xn - xk;
    const Eigen::VectorXd y = gn - g;
    const double sy = s.dot(y);
    if (sy > 1e-12 * y.squaredNorm()) {
      S.push_back(s);
      Y.push_back(y);
      rho.push_back(1.0 / sy);
      if (static_cast<int>(S.size()) > kMemory) {
        S.pop_front();
        Y.pop_front();
        rho.pop_front();
      }
    }
    const double decrease = fk - fn;
    xk = xn;
    fk = fn;
    g = gn;
    if (decrease <= tolerance * std::max(1.0, std::abs(fk))) break;
  }
  *x = xk;
  return fk;
}

}  // namespace hpo::search
