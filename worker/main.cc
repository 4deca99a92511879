// hpo-worker: leases trials from hpo-server and runs them. This first cut
// lists the devices LibTorch sees; leasing and training arrive with issue #5.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <thread>

int main(int argc, char** argv) {
  CLI::App app{"hpo-worker: runs HeteroTune trials on this machine's CPUs and GPUs"};
  bool list_devices = false;
  app.add_flag("--list-devices", list_devices, "print the devices LibTorch can use and exit");
  CLI11_PARSE(app, argc, argv);
  std::printf("cpu: %u hardware threads, LibTorch intra-op threads %d\n",
              std::thread::hardware_concurrency(), torch::get_num_threads());
  const bool cuda = torch::cuda::is_available();
  std::printf("cuda: %s (%d devices)\n", cuda ? "available" : "not available",
              cuda ? static_cast<int>(torch::cuda::device_count()) : 0);
  if (list_devices) return 0;
  std::fprintf(stderr, "hpo-worker: leasing trials is not part of this build yet (issue #5)\n");
  return 2;
}
