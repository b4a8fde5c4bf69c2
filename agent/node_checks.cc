#include "agent/node_checks.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstring>

#include "agent/gpu_memory.h"
#include "base/addresses.h"

namespace crun {

namespace asio = boost::asio;

namespace {

std::string mib(std::uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

bool same_address(const sockaddr_storage& a, const std::string& text) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, buf, sizeof buf);
  } else if (a.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, buf, sizeof buf);
  }
  return text == buf;
}

}  // namespace

std::string check_directories(const std::vector<std::string>& directories, std::uint64_t min_free) {
  for (const auto& dir : directories) {
    if (dir.empty()) continue;
    const std::string probe = dir + "/.crun-node-check-" + std::to_string(::getpid());
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return dir + " is not writable: " + std::strerror(errno);
    ::close(fd);
    ::unlink(probe.c_str());
    struct statvfs fs {};
    if (::statvfs(dir.c_str(), &fs) != 0) return "cannot read the free space of " + dir + ": " + std::strerror(errno);
    const std::uint64_t free = static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
    if (free < min_free) return dir + " has " + mib(free) + " free, under --node-check-min-free " + mib(min_free);
  }
  return "";
}

std::string check_network(const std::string& announced_address, const std::string& rendezvous_host) {
  if (!announced_address.empty()) {
    addrinfo hints{};
    hints.ai_flags = AI_NUMERICHOST;
    addrinfo* numeric = nullptr;
    if (::getaddrinfo(announced_address.c_str(), nullptr, &hints, &numeric) == 0) {  // a name: its resolution below stands for it
      ::freeaddrinfo(numeric);
      bool found = false, up = false;
      std::string interface;
      for (const auto& a : interface_addresses()) {
        if (!same_address(a.address, announced_address)) continue;
        found = true;
        up = up || a.up;
        interface = a.interface;
      }
      if (!found) return "the address this node announces, " + announced_address + ", is on no interface";
      if (!up) return "the interface of " + announced_address + " (" + interface + ") is down";
    }
  }
  if (!rendezvous_host.empty()) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(rendezvous_host.c_str(), nullptr, &hints, &found);
    if (rc != 0) return "the rendezvous host " + rendezvous_host + " does not resolve: " + ::gai_strerror(rc);
    ::freeaddrinfo(found);
  }
  return "";
}

struct NodeChecks::Impl {
  Impl(asio::io_context& context, NodeCheckSettings s, NodeCheckTargets t, std::unique_ptr<GpuMemory> g, WorkerContainment* containment)
      : io(context), settings(std::move(s)), targets(std::move(t)), gpu(std::move(g)), gpu_timer(context) {
    if (settings.disabled.count("gpu")) gpu.reset();
    for (const auto& c : settings.commands) {
      commands.push_back(std::make_unique<CommandCheck>(io, c, settings.timeout, targets.search_path, containment));
    }
  }

  asio::io_context& io;
  NodeCheckSettings settings;
  NodeCheckTargets targets;
  std::unique_ptr<GpuMemory> gpu;
  std::optional<std::vector<std::uint64_t>> baseline;
  std::vector<std::unique_ptr<CommandCheck>> commands;
  asio::steady_timer gpu_timer;
  std::uint64_t pass = 0;  // a stale callback (an abandoned pass's) is ignored

  bool on(const char* name) const { return settings.disabled.count(name) == 0; }

  void finish(std::uint64_t p, const std::function<void(NodeCheckResult)>& done, NodeCheckResult r) {
    if (p != pass) return;
    done(std::move(r));
  }

  void run_builtin(std::uint64_t p, std::function<void(NodeCheckResult)> done, std::function<void(const std::string&)> waiting) {
    if (on("disk")) {
      std::vector<std::string> dirs = targets.directories;
      dirs.insert(dirs.end(), settings.paths.begin(), settings.paths.end());
      if (auto why = check_directories(dirs, settings.min_free); !why.empty()) return finish(p, done, {"disk", why});
    }
    if (on("net") && targets.multi_node) {
      if (auto why = check_network(targets.announced_address, targets.rendezvous_host); !why.empty()) {
        return finish(p, done, {"net", why});
      }
    }
    if (gpu) {
      const auto deadline = std::chrono::steady_clock::now() + settings.timeout;
      return wait_gpu(p, deadline, std::move(done), std::move(waiting), false);
    }
    run_command(p, 0, std::move(done));
  }

  void wait_gpu(std::uint64_t p, std::chrono::steady_clock::time_point deadline, std::function<void(NodeCheckResult)> done,
                std::function<void(const std::string&)> waiting, bool said) {
    if (p != pass) return;
    const GpuMemoryReading now = gpu->read();
    if (!now.error.empty()) return finish(p, done, {"gpu", now.error});
    if (!baseline) baseline = now.used_bytes;
    const std::string why = gpu_memory_back(*baseline, now.used_bytes, kGpuMargin);
    if (why.empty()) return run_command(p, 0, std::move(done));
    if (std::chrono::steady_clock::now() >= deadline) {
      return finish(p, done, {"gpu", why + " after " + std::to_string(settings.timeout.count() / 1000) + " s"});
    }
    if (!said && waiting) waiting("waiting for GPU memory to be freed: " + why);
    gpu_timer.expires_after(std::min<std::chrono::steady_clock::duration>(kGpuPoll, deadline - std::chrono::steady_clock::now()));
    gpu_timer.async_wait([this, p, deadline, done = std::move(done), waiting = std::move(waiting)](const boost::system::error_code& ec) mutable {
      if (ec) return;
      wait_gpu(p, deadline, std::move(done), std::move(waiting), true);
    });
  }

  void run_command(std::uint64_t p, std::size_t i, std::function<void(NodeCheckResult)> done) {
    if (p != pass) return;
    if (i >= commands.size()) return finish(p, done, {"", ""});
    commands[i]->run([this, p, i, done = std::move(done)](NodeCheckResult r) mutable {
      if (p != pass) return;
      if (!r.healthy()) return finish(p, done, std::move(r));
      run_command(p, i + 1, std::move(done));
    });
  }
};

NodeChecks::NodeChecks(asio::io_context& io, NodeCheckSettings settings, NodeCheckTargets targets, std::unique_ptr<GpuMemory> gpu,
                       WorkerContainment* containment)
    : impl_(std::make_unique<Impl>(io, std::move(settings), std::move(targets), std::move(gpu), containment)) {}

NodeChecks::~NodeChecks() = default;

void NodeChecks::take_baseline() {
  if (!impl_->gpu || impl_->baseline) return;
  const GpuMemoryReading now = impl_->gpu->read();
  if (now.error.empty()) impl_->baseline = now.used_bytes;
}

void NodeChecks::run(std::function<void(NodeCheckResult)> done, std::function<void(const std::string&)> waiting) {
  const std::uint64_t p = ++impl_->pass;
  impl_->gpu_timer.cancel();
  // Posted: `done` never runs inside run().
  asio::post(impl_->io, [this, p, done = std::move(done), waiting = std::move(waiting)]() mutable {
    impl_->run_builtin(p, std::move(done), std::move(waiting));
  });
}

const NodeCheckSettings& NodeChecks::settings() const { return impl_->settings; }

std::vector<std::string> NodeChecks::names() const {
  std::vector<std::string> out;
  if (impl_->on("disk")) out.push_back("disk");
  if (impl_->on("net") && impl_->targets.multi_node) out.push_back("net");
  if (impl_->gpu) out.push_back("gpu");
  for (const auto& c : impl_->settings.commands) out.push_back(c);
  return out;
}

}  // namespace crun
