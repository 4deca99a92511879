// Gaussian-process regression for Bayesian optimization: a Matérn 5/2 kernel
// with one lengthscale per input dimension (ARD), a signal variance and
// Gaussian observation noise, fitted by maximizing the log marginal
// likelihood plus mild log priors (MAP), and the log of expected improvement.
//
// Inputs are meant to lie in the unit cube (the priors assume it); targets
// are standardized inside (mean 0, standard deviation 1), and everything a
// caller passes in or gets back is in the caller's units unless a comment says
// "standardized". Pure: no I/O, no threads, no clock; the only randomness is
// the Rng passed to Fit, so a fit is deterministic for a seed.
//
// Cost: one likelihood evaluation is O(n^3); Fit runs a few dozen of them, so
// callers with many observations fit on a subsample (see gp_sampler.h) and
// condition a larger set on the hyperparameters it found (WithHyperparameters).
#pragma once

#include <Eigen/Dense>
#include <functional>
#include <utility>

#include "common/status.h"
#include "search/random.h"

namespace hpo::search {

struct GpFitOptions {
  // Hyperparameter vectors drawn from the priors and scored by the likelihood
  // alone (one Cholesky each), besides two fixed ones (the prior mode and
  // short lengthscales).
  int num_initial_draws = 8;
  // L-BFGS runs, each from one of the best-scored initial vectors; only one
  // with more than max_observations_for_restarts observations, where the
  // likelihood has one clear peak and each step costs O(n^3).
  int num_restarts = 2;
  int max_observations_for_restarts = 40;
  // L-BFGS iterations per run, and its stopping rule: a run ends at a step
  // that lowers the negative log posterior by less than
  // tolerance * max(1, |its value|).
  int max_iterations = 30;
  double tolerance = 1e-7;
  // Lower bound on the noise variance (standardized units), which keeps the
  // kernel matrix well conditioned even for noiseless data with duplicates.
  double min_noise = 1e-6;
};

// The kernel's hyperparameters, relative to standardized targets: a signal
// variance of 1 means "as large as the spread of the data".
struct GpHyperparameters {
  Eigen::VectorXd log_lengthscales;  // one per input dimension
  double log_signal_variance = 0;
  // The noise variance is min_noise + exp(log_noise_excess), so that the
  // lower bound holds without a constrained optimizer.
  double log_noise_excess = -6;
  double min_noise = 1e-6;

  double noise() const;
};

// Const methods may be called from several threads at once; AddObservation
// and Reserve need exclusive access.
class GaussianProcess {
 public:
  // Fits the hyperparameters to (X, y) (one row of X per observation) and
  // returns the posterior. InvalidArgument for empty, mismatched or
  // non-finite input; Internal if no jitter makes the kernel matrix
  // positive definite (not seen in practice: the noise floor prevents it).
  static Result<GaussianProcess> Fit(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, Rng& rng,
                                     const GpFitOptions& options = {});
  // The posterior on (X, y) with given hyperparameters (for instance fitted on
  // a subsample): no optimization, one O(n^3) factorization. y is
  // standardized with its own mean and deviation.
  static Result<GaussianProcess> WithHyperparameters(const Eigen::MatrixXd& X,
                                                     const Eigen::VectorXd& y,
                                                     const GpHyperparameters& hyperparameters);

  // Posterior mean and variance of the latent function (noise excluded) at
  // each row of Xs. Either output may be null.
  void Predict(const Eigen::MatrixXd& Xs, Eigen::VectorXd* mean, Eigen::VectorXd* var) const;
  // Predictions at a fixed set of points (rows of X), kept current as
  // observations are added: the first Predict(cache) costs what Predict
  // does, O(m n^2) for m points, and after each AddObservation the next
  // one costs O(m n). For scoring one candidate set against a growing
  // batch of fantasies. REQUIRES: used with one GaussianProcess only.
  class PointCache {
   public:
    explicit PointCache(Eigen::MatrixXd X) : X_(std::move(X)) {}
    const Eigen::MatrixXd& points() const { return X_; }

   private:
    friend class GaussianProcess;
    Eigen::MatrixXd X_;
    Eigen::MatrixXd scaled_;  // X_ divided by the lengthscales
    Eigen::MatrixXd Ks_;      // cross-kernel with the first n_ observations
    Eigen::MatrixXd V_;       // Ks_ L^-T
    Eigen::Index n_ = 0;
  };
  void Predict(PointCache* cache, Eigen::VectorXd* mean, Eigen::VectorXd* var) const;

  // The same at one point, with the gradients of both with respect to x.
  void PredictWithGradient(const Eigen::VectorXd& x, double* mean, double* var,
                           Eigen::VectorXd* dmean, Eigen::VectorXd* dvar) const;

  // Conditions on one more observation, keeping the hyperparameters and the
  // standardization (O(n^2)). Used to fantasize pending points: `exact`
  // conditions on the latent value itself (noise floor only), so the
  // variance at x collapses and the point repels the acquisition.
  Status AddObservation(const Eigen::VectorXd& x, double y, bool exact = false);
  // Makes room for that many observations in all, so that AddObservation
  // does not reallocate (it grows by half otherwise).
  void Reserve(int capacity);

  // Log marginal likelihood of the standardized targets at the fitted
  // hyperparameters (priors excluded); of the data given to Fit or
  // WithHyperparameters, before any AddObservation.
  double log_marginal_likelihood() const { return log_marginal_likelihood_; }
  const GpHyperparameters& hyperparameters() const { return hyper_; }
  Eigen::VectorXd lengthscales() const { return hyper_.log_lengthscales.array().exp(); }
  double signal_variance() const;  // standardized units
  double noise() const;            // noise variance, standardized units
  int num_observations() const { return static_cast<int>(n_); }
  int dims() const { return static_cast<int>(X_.cols()); }
  double target_mean() const { return y_mean_; }
  double target_std() const { return y_std_; }

 private:
  GaussianProcess() = default;
  // Sets the data, standardizes y and factorizes with hyper_.
  Status Factorize(const Eigen::MatrixXd& X, const Eigen::VectorXd& y);

  GpHyperparameters hyper_;
  // n_ observations; the storage below may have room for more (Reserve), so
  // only its first n_ rows (and the top-left n_ x n_ of Linv_) are the model.
  Eigen::Index n_ = 0;
  Eigen::MatrixXd X_;         // n x d
  Eigen::MatrixXd Xs_;        // X_ with each column divided by its lengthscale
  Eigen::VectorXd xs_norm2_;  // squared norms of Xs_'s rows
  Eigen::VectorXd y_;         // standardized
  double y_mean_ = 0;
  double y_std_ = 1;
  Eigen::MatrixXd Linv_;   // L^-1, L the Cholesky factor of K + noise I (+ jitter)
  Eigen::VectorXd alpha_;  // K^-1 y
  double log_marginal_likelihood_ = 0;
};

// Matérn 5/2 correlation between two points, given the lengthscales.
double Matern52(const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                const Eigen::VectorXd& lengthscales);

// log h(z) with h(z) = phi(z) + z Phi(z), so that for minimization
// EI = sigma h((best - mean) / sigma). Accurate to a few ulps-times-z^2 where
// h is representable and beyond, where it underflows (asymptotic series for
// z <= -30), following Ament et al., "Unexpected Improvements to Expected
// Improvement for Bayesian Optimization" (NeurIPS 2023). `dlogh`, when not
// null, receives d log h / dz = Phi(z) / h(z), also computed stably.
double LogH(double z, double* dlogh = nullptr);
// log EI for minimization below `best`. REQUIRES: sigma > 0.
double LogExpectedImprovement(double mean, double sigma, double best);

// Minimizes f over the box [lower, upper] with a projected L-BFGS and a
// backtracking (Armijo) line search. f returns the value and writes the
// gradient; it may return +infinity to reject a point (the step shrinks).
// It stops after max_iterations, or when a step improves f by less than
// tolerance * max(1, |f|). Returns the best value found; x holds its
// argument. Used for the GP's hyperparameters and the acquisition function.
double MinimizeInBox(const std::function<double(const Eigen::VectorXd&, Eigen::VectorXd*)>& f,
                     const Eigen::VectorXd& lower, const Eigen::VectorXd& upper, int max_iterations,
                     double tolerance, Eigen::VectorXd* x);

}  // namespace hpo::search
