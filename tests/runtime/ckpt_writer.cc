// Helper for the "checkpoint write killed midway" test: `ckpt_writer <dir>` writes a good
// checkpoint at step 1, then starts step 2 (16 MiB) and stops itself (SIGSTOP) after the first
// chunk is on disk, so the test can SIGKILL it in the middle of the write.
#include <signal.h>

#include <cstdio>

#include "worker_runtime/checkpoint.h"

using namespace crun::rt;

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  Checkpoint good;
  good.step = 1;
  good.sections["w"] = std::string(1000, 'a');
  write_checkpoint_file(argv[1], good);
  Checkpoint big;
  big.step = 2;
  big.sections["w"] = std::string(16u << 20, 'b');
  write_checkpoint_file(argv[1], big, 2, [](std::size_t written, std::size_t total) {
    if (written < total) ::raise(SIGSTOP);
  });
  std::puts("finished (unexpected)");
  return 0;
}
