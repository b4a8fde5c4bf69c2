#include "agent/worker_containment.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <cstdio>
#include <vector>

#include "agent/job_cgroup.h"
#include "base/log.h"
#include "base/random_bits.h"
#include "agent/keeper.h"
#include "agent/orphans.h"

namespace crun {

namespace asio = boost::asio;

namespace {

constexpr std::chrono::milliseconds kSweepBound{5000};

std::string make_agent_id() {
  char id[64];
  std::snprintf(id, sizeof(id), "%d-%016llx", static_cast<int>(::getpid()), static_cast<unsigned long long>(random_bits()));
  return id;
}


}  // namespace

struct WorkerContainment::Impl {
  Impl(asio::io_context& io, const std::string& run_dir, bool job_cgroup)
      : agent_id(make_agent_id()),
        orphans(io),
        cgroup(job_cgroup ? JobCgroup::create(agent_id) : nullptr),
        keeper(keeper_beside_this_program(), cgroup ? cgroup->dir() : std::string(), "CRUN_AGENT_ID=" + agent_id, run_dir),
        keeper_exit(io, ::fcntl(keeper.pidfd(), F_DUPFD_CLOEXEC, 3)) {
    if (cgroup) cgroup->keeper_removes();  // the keeper's job now (keeper.finish()'s if it fails)
    orphans.track(keeper.pid());  // reaped here, by keeper.finish() or on its early death
    watch_keeper();
  }

  std::string agent_id;
  Orphans orphans;
  std::unique_ptr<JobCgroup> cgroup;
  Keeper keeper;
  asio::posix::stream_descriptor keeper_exit;  // a duplicate of the keeper's pidfd
  bool finished = false;
  std::vector<int> standbys;  // pids kept apart from the groups (group_over)

  void forget_standby(int pid) { std::erase(standbys, pid); }

  void watch_keeper() {
    keeper_exit.async_wait(asio::posix::stream_descriptor::wait_read, [this](const boost::system::error_code& ec) {
      if (ec || finished) return;
      const int pid = keeper.pid();
      const std::string how = keeper.reap_early_death();
      if (how.empty()) {
        watch_keeper();
        return;
      }
      log_line("the keeper process (pid " + std::to_string(pid) + ") " + how +
               "; the workers' descendants are no longer guarded against a SIGKILL of crun");
      orphans.untrack(pid);
      orphans.reap();
    });
  }
};

WorkerContainment::WorkerContainment(asio::io_context& io, const std::string& run_dir, bool job_cgroup)
    : impl_(std::make_unique<Impl>(io, run_dir, job_cgroup)) {}

WorkerContainment::~WorkerContainment() { finish(); }

const std::string& WorkerContainment::agent_id() const { return impl_->agent_id; }

int WorkerContainment::cgroup_procs_fd() const { return impl_->cgroup ? impl_->cgroup->procs_fd() : -1; }
int WorkerContainment::cgroup_dir_fd() const { return impl_->cgroup ? impl_->cgroup->dir_fd() : -1; }

void WorkerContainment::worker_started(int pid) {
  impl_->orphans.track(pid);
  impl_->keeper.worker_started(pid);
}

void WorkerContainment::standby_started(int pid) {
  worker_started(pid);
  impl_->standbys.push_back(pid);
}

void WorkerContainment::standby_taken(int pid) { impl_->forget_standby(pid); }

void WorkerContainment::worker_reaped(int pid) {
  impl_->forget_standby(pid);
  impl_->orphans.untrack(pid);
  impl_->orphans.reap();  // an orphan's zombie may have waited behind the worker's
}

void WorkerContainment::group_over() {
  impl_->orphans.kill_untracked(kSweepBound);  // standbys are tracked: spared
  impl_->keeper.group_over();
  for (int pid : impl_->standbys) impl_->keeper.worker_started(pid);  // still the keeper's to kill
}

bool WorkerContainment::remove_if_agent_dies(const std::string& dir) { return impl_->keeper.remove_if_agent_dies(dir); }

void WorkerContainment::release() { impl_->keeper.release(); }

void WorkerContainment::finish() {
  if (impl_->finished) return;
  impl_->finished = true;
  boost::system::error_code ignored;
  impl_->keeper_exit.close(ignored);
  const int pid = impl_->keeper.pid();
  impl_->keeper.finish();
  impl_->orphans.untrack(pid);
}

}  // namespace crun
