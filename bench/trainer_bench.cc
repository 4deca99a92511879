// bench/trainer_bench: training speed of the built-in trainers per system
// setting (intra-op threads, batch size), one epoch on a slice of
// Fashion-MNIST. Run it under OMP_WAIT_POLICY=ACTIVE and PASSIVE to see why
// hpo-worker picks passive.
//
//   trainer_bench [--samples N] [--threads 1,2] [--batch 128]
//   bench=trainer model=mlp threads=1 batch_size=128 omp_wait=PASSIVE samples_per_sec=X accuracy=Y
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "worker/builtin_trainer.h"

using namespace hpo::worker;

namespace {

struct Recorder : Reporter {
  double sps = 0, accuracy = 0;
  Verdict Report(int64_t, const std::map<std::string, double>& m, double samples_per_sec,
                 const nlohmann::json&) override {
    sps = samples_per_sec;
    accuracy = m.at("accuracy");
    return Verdict::kContinue;
  }
  bool stop_requested() const override { return false; }
};

std::vector<int> Ints(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) out.push_back(std::atoi(x.c_str()));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int samples = 10000;
  std::string threads = "1,2", batches = "128";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--samples") samples = std::atoi(argv[i + 1]);
    else if (a == "--threads") threads = argv[i + 1];
    else if (a == "--batch") batches = argv[i + 1];
  }
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  auto exec = MakeBuiltinExecutor();
  for (const char* model : {"mlp", "cnn"}) {
    for (int t : Ints(threads)) {
      for (int b : Ints(batches)) {
        TrialRun r;
        r.seed = 1;
        r.trainer = std::string("fashion-mnist-") + model;
        r.max_steps = 1;
        r.threads = t;
        r.params = {{"lr", 1e-3}};
        r.system = {{"batch_size", b}, {"threads", t}};
        r.trainer_args = {{"max_train_samples", samples}};
        Recorder rec;
        auto res = exec->Run(r, rec);
        if (!res.ok()) {
          std::fprintf(stderr, "trainer_bench: %s\n", res.status().ToString().c_str());
          return 1;
        }
        std::printf("bench=trainer model=%s threads=%d batch_size=%d omp_wait=%s samples=%d "
                    "samples_per_sec=%.0f accuracy=%.3f\n",
                    model, t, b, wait ? wait : "default", samples, rec.sps, rec.accuracy);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
