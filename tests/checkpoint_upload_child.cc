// A worker process that dies mid-upload, for grpc_checkpoints_test: it
// starts an UploadCheckpoint of `total_bytes` for a trial whose lease it
// holds, sends `chunks` chunks of 1 MiB, says so on standard output
// ("sent N chunks") and waits to be killed (kill -9) before the rest.
//
//   checkpoint_upload_child ADDRESS TOKEN WORKER_ID SESSION TRIAL_ID STEP TOTAL_BYTES CHUNKS
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "hpo/v1/worker.grpc.pb.h"

int main(int argc, char** argv) {
  if (argc != 9) {
    std::fprintf(stderr,
                 "usage: %s ADDRESS TOKEN WORKER_ID SESSION TRIAL_ID STEP TOTAL_BYTES CHUNKS\n",
                 argv[0]);
    return 2;
  }
  auto stub = hpo::v1::WorkerService::NewStub(
      grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", std::string("Bearer ") + argv[2]);
  hpo::v1::UploadCheckpointResponse res;
  auto writer = stub->UploadCheckpoint(&ctx, &res);
  const int chunks = std::atoi(argv[8]);
  for (int i = 0; i < chunks; ++i) {
    hpo::v1::CheckpointChunk chunk;
    if (i == 0) {
      chunk.set_worker_id(std::atoll(argv[3]));
      chunk.set_session(argv[4]);
      chunk.set_trial_id(std::atoll(argv[5]));
      chunk.set_step(std::atoll(argv[6]));
      chunk.set_total_bytes(std::atoll(argv[7]));
    }
    chunk.set_data(std::string(size_t{1} << 20, static_cast<char>('a' + i % 26)));
    if (!writer->Write(chunk)) {
      std::printf("the server ended the upload: %s\n", writer->Finish().error_message().c_str());
      return 1;
    }
  }
  std::printf("sent %d chunks\n", chunks);
  std::fflush(stdout);
  for (;;) pause();
}
