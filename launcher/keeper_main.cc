// crun-keeper: the keeper of a crun agent (agent/keeper_process.h), a small program installed
// beside crun, which starts it from there. Run by hand it does nothing (exit 2).
#include "agent/keeper_process.h"
#include "base/log.h"

int main(int argc, char** argv) {
  crun::set_log_program("crun-keeper");
  return crun::run_keeper(argc, argv);
}
