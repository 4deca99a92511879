// search/output_warp.h: the Yeo-Johnson warp keeps the order of values,
// leaves Gaussian data nearly alone, pulls in a heavy right tail, and
// degrades to standardization where it cannot be fitted.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "search/output_warp.h"
#include "search/random.h"

namespace hpo::search {
namespace {

double Skewness(const std::vector<double>& v) {
  double mean = 0;
  for (double x : v) mean += x;
  mean /= v.size();
  double m2 = 0, m3 = 0;
  for (double x : v) {
    m2 += (x - mean) * (x - mean);
    m3 += (x - mean) * (x - mean) * (x - mean);
  }
  m2 /= v.size();
  m3 /= v.size();
  return m3 / std::pow(m2, 1.5);
}

TEST(OutputWarp, GaussianDataIsNearlyUntouched) {
  Rng rng(3);
  std::vector<double> y;
  for (int i = 0; i < 500; ++i) y.push_back(5 + 2 * rng.Normal());
  const OutputWarp w = OutputWarp::Fit(y);
  EXPECT_NEAR(w.lambda, 1.0, 0.25);
  EXPECT_NEAR(w.mean, 5, 0.3);
  EXPECT_NEAR(w.sd, 2, 0.3);
}

TEST(OutputWarp, HeavyRightTailIsCompressedAndOrderKept) {
  // A loss that is mostly small with a few diverged runs (log-normal).
  Rng rng(7);
  std::vector<double> y;
  for (int i = 0; i < 200; ++i) y.push_back(std::exp(1.5 * rng.Normal()));
  const OutputWarp w = OutputWarp::Fit(y);
  EXPECT_LT(w.lambda, 0.7);
  const std::vector<double> warped = w.Apply(y);
  EXPECT_GT(Skewness(y), 2.0);
  EXPECT_LT(std::abs(Skewness(warped)), 0.5 * Skewness(y));
  for (size_t i = 0; i < y.size(); ++i) {
    for (size_t j = 0; j < y.size(); ++j) {
      if (y[i] < y[j]) {
        ASSERT_LT(warped[i], warped[j]) << i << " " << j;
      }
    }
  }
}

TEST(OutputWarp, LeftTailIsStretchedApartNotMerged) {
  // A minimization that found a few much better points: they must stay
  // distinct and below everything else.
  std::vector<double> y(50, 20.0);
  for (int i = 0; i < 50; ++i) y[i] += 0.01 * i;
  y[3] = 2.0;
  y[17] = 5.0;
  const OutputWarp w = OutputWarp::Fit(y);
  EXPECT_LT(w(2.0), w(5.0));
  EXPECT_LT(w(5.0), w(20.0));
  EXPECT_TRUE(std::isfinite(w(-100.0)));
  EXPECT_TRUE(std::isfinite(w(1e6)));
}

TEST(OutputWarp, TooFewOrConstantValuesOnlyStandardize) {
  const OutputWarp two = OutputWarp::Fit({1.0, 3.0});
  EXPECT_EQ(two.lambda, 1.0);
  EXPECT_DOUBLE_EQ(two(3.0) - two(1.0), 2.0 / two.sd);
  const OutputWarp flat = OutputWarp::Fit({4.0, 4.0, 4.0, 4.0});
  EXPECT_EQ(flat.lambda, 1.0);
  EXPECT_EQ(flat.sd, 1.0);
  EXPECT_DOUBLE_EQ(flat(5.0), 1.0);
  const OutputWarp none = OutputWarp::Fit({});
  EXPECT_DOUBLE_EQ(none(2.5), 2.5);
}

}  // namespace
}  // namespace hpo::search
