// The built-in LibTorch trainers, "fashion-mnist-mlp" and
// "fashion-mnist-cnn" ("fashion-mnist" picks one by the trial's search space,
// named mlp or cnn), on the real Fashion-MNIST data (Debian package
// dataset-fashion-mnist). The whole dataset lives in memory as tensors and
// batches are taken by index, so no per-sample loader sits in the way.
//
// Hyperparameters (params; defaults in brackets): lr [1e-3], optimizer
// sgd|adam|adamw [adam], momentum [0.9], nesterov [false], weight_decay [0],
// depth [2] and width [256] of the dense layers, dropout [0.1], activation
// relu|gelu|tanh [relu], batch_norm [false], lr_schedule
// constant|cosine|step [constant]; CNN only: conv_layers [2], channels [32]
// (doubling per layer).
// System parameters (system): batch_size [128] and threads [all usable
// cores], changed between epochs when the server says so; inter_op_threads
// [1], set once per process (LibTorch takes it only before any parallel
// work), so a later trial in the same worker runs with the first one's.
// The executor declares exactly this (Executor::DeclaredSystemChanges:
// batch_size and threads mid-trial, inter_op_threads at restart); any other
// system parameter is unknown to it and ignored, and the server says so.
// Each report's applied values (Reporter::ReportApplied) are what the epoch
// ran: batch_size, threads and, when the trial has it, inter_op_threads as
// LibTorch really has it.
// Trainer args: validation_fraction [0.1] of the training set, data_dir,
// max_train_samples [all] (quick runs), samples_per_step [0: a full pass].
//
// Steps are epochs (or, with samples_per_step, that many examples drawn
// afresh each step), counted from 1; each reports validation accuracy and
// loss, the training loss and samples/s. The final metrics add the test
// set's accuracy and loss. Deterministic for a seed on one device/thread
// count.
//
// Checkpoints (TrialRun::stop_step / resume_step): on Verdict::kPause the
// trainer writes trainer.pt to TrialRun::checkpoint_dir - the model
// (parameters and batch-norm buffers), the optimizer's state, the number
// of epochs done (the learning-rate schedule's position) and the state of
// LibTorch's default generator (the CPU's, and the CUDA device's on a GPU),
// which draws every shuffle and dropout mask. A resumed trial loads it and
// goes on at the next epoch exactly as the trial that never stopped would
// (bit for bit on one device and thread count; tests/builtin_trainer_test
// checks it). A checkpoint of another trainer, other hyperparameters or
// another epoch is refused (RunResult::restore_error). The generators are
// the process's: two trials running at once in one worker draw from the
// same ones, so there only each trial's own run is reproducible.
//
// This header has no LibTorch in it on purpose.
#pragma once

#include <memory>
#include <string>

#include "worker/executor.h"

namespace hpo::worker {

struct BuiltinOptions {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
};

std::unique_ptr<Executor> MakeBuiltinExecutor(BuiltinOptions options = {});

// Loads the data in `data_dir` (as BuiltinOptions::data_dir) into the
// process's one copy, which every trial of every executor then shares, so
// that no lease pays for it: hpo-worker calls it before it registers. A
// trial whose args name another data_dir loads that one at its lease. The
// error names the directory and the file; the next call, or the next
// trial, tries again. Thread-safe.
Status LoadBuiltinData(const std::string& data_dir);

// Whether `trainer` names a built-in trainer.
bool IsBuiltinTrainer(const std::string& trainer);

}  // namespace hpo::worker
