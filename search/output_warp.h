// Output warping for model-based samplers: makes a sample of objective values
// look more Gaussian before a GP models them, as HEBO does (Cowen-Rivers et
// al., 2022). Objectives such as losses are often heavy-tailed (a few
// diverged runs a thousand times worse than the rest); a GP on the raw values
// spends its signal variance on the tail and sees the good region as flat.
//
// The warp: standardize y, then apply the Yeo-Johnson transform
//   psi(z) = ((z + 1)^l - 1) / l                  z >= 0, l != 0
//          = log(z + 1)                           z >= 0, l == 0
//          = -((1 - z)^(2 - l) - 1) / (2 - l)     z <  0, l != 2
//          = -log(1 - z)                          z <  0, l == 2
// with l in [kMinLambda, kMaxLambda] chosen to maximize the Gaussian
// log-likelihood of psi(z) (the profile likelihood, with its Jacobian term),
// by golden-section search. psi is strictly increasing for every l, so the
// order of the values, and so which one is best, is kept.
//
// Pure and deterministic.
#pragma once

#include <vector>

namespace hpo::search {

struct OutputWarp {
  static constexpr double kMinLambda = -2;
  static constexpr double kMaxLambda = 4;

  double mean = 0;
  double sd = 1;
  double lambda = 1;  // 1 is the identity on standardized values

  // Fitted to `y`; the identity (on standardized values) for fewer than 3
  // values or a constant sample.
  static OutputWarp Fit(const std::vector<double>& y);
  // The warped value of one y (any y, not only the fitted ones).
  double operator()(double y) const;
  // log of d/dy of the warp at y (its Jacobian, for comparing likelihoods
  // of warped and unwarped models in the units of y).
  double LogDerivative(double y) const;
  std::vector<double> Apply(const std::vector<double>& y) const;
};

}  // namespace hpo::search
