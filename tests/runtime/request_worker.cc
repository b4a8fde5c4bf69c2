// request_worker: a native worker that asks crun for something through crun::rt's calls
// (worker_runtime/control.h), for tests/runtime/control_test.cc.
//
//   request_worker VERB REASON EXIT_CODE [LOCAL_RANK]
//
// The worker of LOCAL_RANK (every worker when none is given) calls request_stop_job (VERB
// "stop-job") or request_exclude_node ("exclude-node") with REASON, prints "requested rank=<RANK>
// written=<1|0>" (0: not under crun) and exits EXIT_CODE; the others wait until a signal ends them.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "worker_runtime/control.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: request_worker VERB REASON EXIT_CODE [LOCAL_RANK]\n");
    return 64;
  }
  const std::string verb = argv[1];
  const char* local_rank = std::getenv("LOCAL_RANK");
  const char* rank = std::getenv("RANK");
  if (argc > 4 && (local_rank == nullptr || std::strcmp(local_rank, argv[4]) != 0)) {
    for (;;) ::pause();
  }
  try {
    bool written = false;
    if (verb == "stop-job") written = crun::rt::request_stop_job(argv[2]);
    else if (verb == "exclude-node") written = crun::rt::request_exclude_node(argv[2]);
    else {
      std::fprintf(stderr, "request_worker: unknown verb %s\n", verb.c_str());
      return 64;
    }
    std::printf("requested rank=%s written=%d\n", rank != nullptr ? rank : "-", written ? 1 : 0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "request_worker: %s\n", e.what());
    return 65;
  }
  std::fflush(stdout);
  return std::atoi(argv[3]);
}
