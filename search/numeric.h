// Conversions from double to integer that are defined for every double.
// C++ leaves converting a double outside the target type's range, or NaN,
// undefined (it is what -fsanitize=float-cast-overflow reports; on x86 the
// result is INT64_MIN, which is how an int parameter in [-(2^63-1), 2^63-1]
// was once suggested -2^63). search/ converts only through these.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace hpo::search {

// 2^53: every integer of at most this magnitude is exactly a double, and
// some just beyond it are not. Samplers work in doubles, so an int
// parameter's bounds must lie within it.
inline constexpr double kMaxExactInteger = 9007199254740992.0;

// x rounded to the nearest integer (halves away from zero), saturated to
// int64's range; NaN gives 0.
inline int64_t RoundToInt64(double x) {
  if (std::isnan(x)) return 0;
  const double r = std::round(x);
  if (r >= 0x1p63) return std::numeric_limits<int64_t>::max();
  if (r < -0x1p63) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(r);
}

// floor(x) as an index into n things, clamped into [0, n - 1]; NaN gives 0.
// REQUIRES: n > 0.
inline int64_t IndexIn(double x, int64_t n) {
  if (!(x >= 0)) return 0;
  if (x >= static_cast<double>(n - 1)) return n - 1;
  return static_cast<int64_t>(x);
}

}  // namespace hpo::search
