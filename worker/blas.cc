#include "worker/blas.h"

#include <dlfcn.h>

namespace hpo::worker {

// Looked up at run time, so that another BLAS, or none, is fine.
int BlasThreads() {
  using Get = int (*)();
  static const auto get = reinterpret_cast<Get>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return get != nullptr ? get() : 0;
}

void SetBlasThreads(int threads) {
  using Set = void (*)(int);
  static const auto set = reinterpret_cast<Set>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (set != nullptr) set(threads);
}

}  // namespace hpo::worker
