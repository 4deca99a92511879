// The BLAS library's own thread pool. Debian's LibTorch does its matrix
// products in OpenBLAS, whose pool torch::set_num_threads leaves at every
// core the process can see (a cgroup quota does not narrow that), so the
// trainer and the speed benchmark size it themselves.
#pragma once

namespace hpo::worker {

// OpenBLAS's thread count, read at run time, or 0 when the BLAS in the
// process cannot say (another BLAS, or none).
int BlasThreads();

// Sets OpenBLAS's thread count; does nothing under another BLAS.
void SetBlasThreads(int threads);

}  // namespace hpo::worker
