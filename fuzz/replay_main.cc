// Runs a libFuzzer target's LLVMFuzzerTestOneInput on every file under the
// directories (or files) given, once each: the fuzz corpora as regression
// tests, built with the ordinary compiler. A crash or an abort fails the test.
// Inputs run on a thread with a small stack (kStackBytes), so that deep
// recursion shows up on small inputs.
#include <pthread.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "testing/files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// Each input runs on a thread with this much stack: less than any thread
// of the server has (8 MiB by default), so handling that recurses once per
// level of nesting in the input overflows it at tens of thousands of
// levels, and the corpus entries that guard against such recursion stay a
// few dozen KB instead of the megabyte an 8 MiB stack would need.
constexpr size_t kStackBytes = size_t{1} << 20;

struct Input {
  const std::string* bytes;
};

void* RunOne(void* arg) {
  const std::string& bytes = *static_cast<Input*>(arg)->bytes;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return nullptr;
}

// Runs the input on a thread with kStackBytes of stack and waits for it.
void RunWithSmallStack(const std::string& bytes) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kStackBytes);
  Input input{&bytes};
  pthread_t thread;
  if (pthread_create(&thread, &attr, RunOne, &input) != 0) {
    std::fprintf(stderr, "cannot start a thread; running on the main one\n");
    RunOne(&input);
  } else {
    pthread_join(thread, nullptr);
  }
  pthread_attr_destroy(&attr);
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    std::error_code ec;
    if (fs::is_regular_file(argv[i], ec)) {
      files.emplace_back(argv[i]);
      continue;
    }
    if (!fs::is_directory(argv[i], ec)) {
      std::fprintf(stderr, "%s: no such file or directory\n", argv[i]);
      return 2;
    }
    for (const auto& e : fs::recursive_directory_iterator(argv[i])) {
      if (e.is_regular_file()) files.push_back(e.path());
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "no inputs under the given paths\n");
    return 2;
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    const std::string bytes = hpo::testing::ReadFile(f);
    // Printed before the call, so a crash names its input.
    std::fprintf(stderr, "replay %s\n", f.c_str());
    RunWithSmallStack(bytes);
  }
  std::printf("replayed %zu inputs\n", files.size());
  return 0;
}
