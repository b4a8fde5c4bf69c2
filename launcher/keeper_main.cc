// crun-keeper: the keeper process of a crun agent (agent/keeper_process.h), as a small program of
// its own that crun starts from beside its own executable. Run by hand it does nothing (exit 2).
#include <cstdio>

#include "agent/keeper_process.h"

int main(int argc, char** argv) {
  std::fprintf(stderr, "crun-keeper: started by crun, not by hand\n");
  return crun::run_keeper(argc, argv);
}
