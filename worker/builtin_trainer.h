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
// System parameters (system): batch_size [128], threads [all usable cores],
// inter_op_threads [1]; changed between epochs when the server says so.
// Trainer args: validation_fraction [0.1] of the training set, data_dir,
// max_train_samples [all] (quick runs).
//
// Steps are epochs, counted from 1; each reports validation accuracy and
// loss, the training loss and samples/s. The final metrics add the test
// set's accuracy and loss. Deterministic for a seed on one device/thread
// count.
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

// Whether `trainer` names a built-in trainer.
bool IsBuiltinTrainer(const std::string& trainer);

}  // namespace hpo::worker
