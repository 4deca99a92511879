#include "search/output_warp.h"

#include <cmath>

namespace hpo::search {
namespace {

double YeoJohnson(double z, double lambda) {
  constexpr double kEps = 1e-9;
  if (z >= 0) {
    return std::abs(lambda) < kEps ? std::log1p(z) : (std::pow(z + 1, lambda) - 1) / lambda;
  }
  return std::abs(lambda - 2) < kEps ? -std::log1p(-z)
                                     : -(std::pow(1 - z, 2 - lambda) - 1) / (2 - lambda);
}

// Profile log-likelihood of lambda: the warped sample's Gaussian fit with
// its own mean and variance, plus the log-Jacobian of the transform.
double LogLikelihood(const std::vector<double>& z, double lambda) {
  const double n = static_cast<double>(z.size());
  double sum = 0, sum_sq = 0, log_jacobian = 0;
  for (double v : z) {
    const double w = YeoJohnson(v, lambda);
    sum += w;
    sum_sq += w * w;
    log_jacobian += (lambda - 1) * std::copysign(std::log1p(std::abs(v)), v);
  }
  const double var = sum_sq / n - (sum / n) * (sum / n);
  if (!(var > 0) || !std::isfinite(var)) return -HUGE_VAL;
  return -0.5 * n * std::log(var) + log_jacobian;
}

}  // namespace

OutputWarp OutputWarp::Fit(const std::vector<double>& y) {
  OutputWarp w;
  const double n = static_cast<double>(y.size());
  if (y.empty()) return w;
  double sum = 0;
  for (double v : y) sum += v;
  w.mean = sum / n;
  double ss = 0;
  for (double v : y) ss += (v - w.mean) * (v - w.mean);
  const double sd = std::sqrt(ss / n);
  if (y.size() < 3 || !(sd > 0) || !std::isfinite(sd)) return w;
  w.sd = sd;
  std::vector<double> z;
  z.reserve(y.size());
  for (double v : y) z.push_back((v - w.mean) / w.sd);

  // The likelihood is unimodal in lambda for all but contrived samples;
  // golden-section search to a tolerance far below what the GP can tell.
  const double phi = (std::sqrt(5.0) - 1) / 2;
  double a = kMinLambda, b = kMaxLambda;
  double c = b - phi * (b - a), d = a + phi * (b - a);
  double fc = LogLikelihood(z, c), fd = LogLikelihood(z, d);
  while (b - a > 1e-3) {
    if (fc > fd) {
      b = d, d = c, fd = fc;
      c = b - phi * (b - a);
      fc = LogLikelihood(z, c);
    } else {
      a = c, c = d, fc = fd;
      d = a + phi * (b - a);
      fd = LogLikelihood(z, d);
    }
  }
  w.lambda = 0.5 * (a + b);
  return w;
}

double OutputWarp::operator()(double y) const { return YeoJohnson((y - mean) / sd, lambda); }

double OutputWarp::LogDerivative(double y) const {
  const double z = (y - mean) / sd;
  return (lambda - 1) * std::copysign(std::log1p(std::abs(z)), z) - std::log(sd);
}

std::vector<double> OutputWarp::Apply(const std::vector<double>& y) const {
  std::vector<double> out;
  out.reserve(y.size());
  for (double v : y) out.push_back((*this)(v));
  return out;
}

}  // namespace hpo::search
