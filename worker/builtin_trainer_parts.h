// The parts of the built-in trainers (worker/builtin_trainer.h) that their
// test and bench/trainer_bench reach one by one: the shared dataset, the
// models, the evaluation and the checkpoint file. LibTorch is in here on
// purpose: include it only from worker/builtin_trainer.cc, its test and its
// bench, never from a header others include.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

#include "common/status.h"
#include "worker/executor.h"

namespace hpo::worker::builtin {

struct Split {
  torch::Tensor images;  // [N, 1, 28, 28] float, normalized
  torch::Tensor labels;  // [N] int64
};

struct Dataset {
  Split train, test;
};

// Fashion-MNIST's four IDX files in `dir`, loaded on the first call for that
// directory and shared, read-only, by every later call and every trial of
// the process (about 220 MB as float tensors). A failure is not kept: the
// next call tries again. Thread-safe; a second caller for the same
// directory waits for the first.
Result<std::shared_ptr<const Dataset>> LoadDataset(const std::string& dir);

struct ModelConfig {
  bool cnn = false;
  int depth = 2, width = 256, conv_layers = 2, channels = 32;
  double dropout = 0.1;
  bool batch_norm = false;
  std::string activation = "relu";
};

torch::nn::Sequential BuildModel(const ModelConfig& c);

// How many examples one forward pass of Evaluate takes on `device` for the
// model `c`. On a CPU, as many as keep the largest activation (the first
// convolution's output, or the widest dense layer) near 12.5 MiB, at most
// 2,000: glibc maps a block above its mmap threshold (which it raises, up
// to 32 MB, to the size of the mapped blocks it frees) afresh and unmaps it
// when freed, so 2,000 examples of the default CNN (200 MB for the first
// convolution) faulted their pages in again on every evaluation: on 6,000
// examples and one thread, 3.1-3.2 s (1.7 s of it system time) against
// 1.35-1.5 s (none) in chunks of 130, the default CNN's here; on two
// threads 1.8 s against 0.9-1.2 s. The MLP's chunk stays 2,000 (38 ms; its
// time hardly depends on the chunk). bench/trainer_bench --eval-chunks
// prints these figures. A GPU's caching allocator keeps its blocks: 2,000
// there.
int64_t EvalChunk(const ModelConfig& c, const torch::Device& device);

struct Evaluation {
  double loss = 0;      // mean cross-entropy
  double accuracy = 0;  // fraction of argmax hits
};

// `net` in eval mode (no gradients) on the examples `rows` of `data` (all
// of them when `rows` is undefined), `chunk` at a time; `net` is back in
// training mode after. The examples are gathered into one buffer reused by
// every chunk, not copied per split.
// REQUIRES: chunk > 0; rows, when defined, is int64 on the CPU.
Evaluation Evaluate(torch::nn::Sequential& net, const Split& data, const torch::Tensor& rows,
                    const torch::Device& device, int64_t chunk);

// The checkpoint file (trainer.pt in run.checkpoint_dir; its layout is in
// builtin_trainer.cc). Save: the model, the optimizer, `epochs_done` and
// the random generators, written whole or not at all, with its SHA-256
// beside it (taken as it is written). Load: reads the file once, and
// refuses, with the reason, one that is missing, damaged, of another
// trainer, other hyperparameters or another epoch; after an error `net`
// and `opt` are not to be used.
Status SaveCheckpoint(const TrialRun& run, torch::nn::Sequential& net, torch::optim::Optimizer& opt,
                      int64_t epochs_done, const torch::Device& device);
Status LoadCheckpoint(const TrialRun& run, torch::nn::Sequential& net, torch::optim::Optimizer& opt,
                      int64_t epochs_done, const torch::Device& device);

}  // namespace hpo::worker::builtin
