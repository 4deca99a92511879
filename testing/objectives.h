// Test functions for samplers, shared by tests/ and bench/. Each is
// minimized over its box and knows its optimum, so regret = f(x) - f*.
#pragma once

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "search/space.h"

namespace hpo::testing {

struct Objective {
  std::string name;
  search::SearchSpace space;
  double optimum;
  // Takes the assignment in JSON form (what a trainer would see).
  std::function<double(const nlohmann::json&)> f;
};

inline search::SearchSpace Box(const std::string& name, int dims, double low, double high) {
  search::SearchSpace s;
  s.name = name;
  for (int i = 0; i < dims; ++i) {
    search::Param p;
    p.name = "x" + std::to_string(i);
    p.low = low;
    p.high = high;
    s.params.push_back(p);
  }
  return s;
}

inline std::vector<double> Xs(const nlohmann::json& j, int dims) {
  std::vector<double> x(dims);
  for (int i = 0; i < dims; ++i) x[i] = j.at("x" + std::to_string(i)).get<double>();
  return x;
}

inline double Branin(double x1, double x2) {
  const double pi = 3.14159265358979323846;
  const double b = 5.1 / (4 * pi * pi), c = 5 / pi, t = 1 / (8 * pi);
  return std::pow(x2 - b * x1 * x1 + c * x1 - 6, 2) + 10 * (1 - t) * std::cos(x1) + 10;
}

inline Objective BraninObjective() {
  auto s = Box("branin", 2, 0, 1);
  s.params[0].low = -5;
  s.params[0].high = 10;
  s.params[1].low = 0;
  s.params[1].high = 15;
  return {"branin", s, 0.397887357729739, [](const nlohmann::json& j) {
            auto x = Xs(j, 2);
            return Branin(x[0], x[1]);
          }};
}

inline Objective Hartmann6() {
  static const double a[4] = {1.0, 1.2, 3.0, 3.2};
  static const double A[4][6] = {{10, 3, 17, 3.5, 1.7, 8},
                                 {0.05, 10, 17, 0.1, 8, 14},
                                 {3, 3.5, 1.7, 10, 17, 8},
                                 {17, 8, 0.05, 10, 0.1, 14}};
  static const double P[4][6] = {{0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886},
                                 {0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991},
                                 {0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650},
                                 {0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381}};
  return {"hartmann6", Box("hartmann6", 6, 0, 1), -3.32236801141551, [](const nlohmann::json& j) {
            auto x = Xs(j, 6);
            double f = 0;
            for (int i = 0; i < 4; ++i) {
              double e = 0;
              for (int k = 0; k < 6; ++k) e += A[i][k] * (x[k] - P[i][k]) * (x[k] - P[i][k]);
              f -= a[i] * std::exp(-e);
            }
            return f;
          }};
}

inline Objective Rosenbrock4() {
  return {"rosenbrock4", Box("rosenbrock4", 4, -2.048, 2.048), 0, [](const nlohmann::json& j) {
            auto x = Xs(j, 4);
            double f = 0;
            for (int i = 0; i + 1 < 4; ++i) {
              f += 100 * std::pow(x[i + 1] - x[i] * x[i], 2) + std::pow(1 - x[i], 2);
            }
            return f;
          }};
}

inline Objective Ackley5() {
  return {"ackley5", Box("ackley5", 5, -32.768, 32.768), 0, [](const nlohmann::json& j) {
            auto x = Xs(j, 5);
            const double pi2 = 6.283185307179586;
            double s1 = 0, s2 = 0;
            for (double v : x) {
              s1 += v * v;
              s2 += std::cos(pi2 * v);
            }
            return -20 * std::exp(-0.2 * std::sqrt(s1 / 5)) - std::exp(s2 / 5) + 20 + std::exp(1.0);
          }};
}

inline Objective Levy5() {
  return {"levy5", Box("levy5", 5, -10, 10), 0, [](const nlohmann::json& j) {
            auto x = Xs(j, 5);
            const double pi = 3.14159265358979323846;
            std::vector<double> w(5);
            for (int i = 0; i < 5; ++i) w[i] = 1 + (x[i] - 1) / 4;
            double f = std::pow(std::sin(pi * w[0]), 2);
            for (int i = 0; i < 4; ++i) {
              f += std::pow(w[i] - 1, 2) * (1 + 10 * std::pow(std::sin(pi * w[i] + 1), 2));
            }
            f += std::pow(w[4] - 1, 2) * (1 + std::pow(std::sin(2 * pi * w[4]), 2));
            return f;
          }};
}

// Two models behind a categorical: "branin" (x0, x1) or "bowl" (y0..y2, a
// quadratic that bottoms out at 1.0, easy to reach: a trap for greedy samplers), plus a log-scale
// "lr" that matters for both. The optimum is Branin's, at lr = 1e-2.
inline Objective Conditional() {
  auto r = search::ParseSearchSpace(nlohmann::json::parse(R"({"name": "conditional", "params": {
      "lr": {"type": "float", "low": 1e-5, "high": 1, "log": true},
      "model": {"type": "categorical", "choices": ["branin", "bowl"], "conditional": {
        "branin": {"x0": {"type": "float", "low": -5, "high": 10},
                   "x1": {"type": "float", "low": 0, "high": 15}},
        "bowl": {"y0": {"type": "float", "low": 0, "high": 1},
                 "y1": {"type": "float", "low": 0, "high": 1},
                 "y2": {"type": "int", "low": 0, "high": 10}}}}}})"),
                                    "conditional");
  return {"conditional", *r, 0.397887357729739, [](const nlohmann::json& j) {
            const double lr_pen = std::pow(std::log10(j.at("lr").get<double>()) + 2, 2);
            if (j.at("model") == "branin") {
              return Branin(j.at("x0").get<double>(), j.at("x1").get<double>()) + lr_pen;
            }
            const double y0 = j.at("y0").get<double>(), y1 = j.at("y1").get<double>();
            const double y2 = j.at("y2").get<double>();
            return 1.0 + 10 * (std::pow(y0 - 0.3, 2) + std::pow(y1 - 0.7, 2)) +
                   0.1 * std::pow(y2 - 4, 2) + lr_pen;
          }};
}

inline std::vector<Objective> AllObjectives() {
  return {BraninObjective(), Hartmann6(), Rosenbrock4(), Ackley5(), Levy5(), Conditional()};
}

}  // namespace hpo::testing
