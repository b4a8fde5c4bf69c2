#include "agent/state_replication.h"

#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cstdio>
#include <mutex>
#include <set>
#include <system_error>

#include "agent/replica_client.h"
#include "agent/replica_server.h"
#include "agent/replica_store.h"
#include "agent/state_directory.h"
#include "base/log.h"
#include "base/random_bits.h"

namespace crun {

namespace asio = boost::asio;
namespace fs = std::filesystem;

bool parse_state_endpoint(const std::string& text, std::string& address, std::uint16_t& port) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return false;
  std::string host = text.substr(0, colon);
  if (host.front() == '[') {
    if (host.back() != ']') return false;
    host = host.substr(1, host.size() - 2);
  }
  unsigned long p = 0;
  try {
    std::size_t used = 0;
    p = std::stoul(text.substr(colon + 1), &used);
    if (used != text.size() - colon - 1) return false;
  } catch (const std::exception&) {
    return false;
  }
  if (p == 0 || p > 65535) return false;
  address = host;
  port = static_cast<std::uint16_t>(p);
  return true;
}

std::optional<OutgoingSet> committed_snapshot(const StateDirectory& state, int rank) {
  std::vector<std::pair<std::string, fs::path>> files;
  for (const auto& f : state.committed(rank)) files.emplace_back(f.name, f.path);
  if (files.empty() && state.sequence(rank) == 0) return std::nullopt;
  return open_set(rank, state.sequence(rank), files);
}

namespace {

std::string mib(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

std::string random_suffix() {
  char text[32];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(random_bits()));
  return text;
}

}  // namespace

struct StateReplication::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& io, StateDirectory& state, int nproc, StateReplicationOptions o)
      : io(io), state(state), nproc(nproc), options(std::move(o)), store(state.job_root() / "replicas") {}

  ReplicaClientOptions client_options() const {
    return ReplicaClientOptions{options.token, state.max_bytes(), store.root()};
  }

  // This node's committed set of `rank`, opened: what the ring sends and what a fetcher gets.
  std::optional<OutgoingSet> own_snapshot(int rank) const { return committed_snapshot(state, rank); }

  void start_server(int fd) {
    if (closed) {
      ::close(fd);
      return;
    }
    try {
      server = std::make_unique<ReplicaServer>(
          io, fd, ReplicaServerOptions{options.token, state.max_bytes(), 64}, store,
          SetSource{[this](int rank) { return state.sequence(rank); }, [this](int rank) { return own_snapshot(rank); }});
    } catch (const std::exception& e) {
      log_line(std::string("state replication: ") + e.what() + "; this node keeps no replicas");
    }
  }

  void on_round(int round, const RoundInfo& info, std::function<void(const FetchSummary&)> ready) {
    cancel();
    std::vector<int> ranks;
    for (int lr = 0; lr < nproc; ++lr) ranks.push_back(info.rank_offset + lr);
    // The ring.
    std::optional<ReplicaPeer> successor;
    std::vector<ReplicaPeer> peers;
    const int n = static_cast<int>(info.state_endpoints.size());
    for (int i = 0; i < n; ++i) {
      ReplicaPeer p;
      if (i == info.group_rank || !parse_state_endpoint(info.state_endpoints[i], p.address, p.port)) continue;
      peers.push_back(p);
      if (i == (info.group_rank + 1) % n) successor = p;
    }
    if (!pusher) {
      pusher = std::make_unique<ReplicaPusher>(io, client_options(), [this](int rank) { return own_snapshot(rank); });
    }
    pusher->retarget(successor, ranks);
    // What this node must fetch: ranks it did not run last round (or holds nothing of).
    std::vector<int> need;
    for (int rank : ranks) {
      if (!previous.count(rank) || state.sequence(rank) == 0) need.push_back(rank);
    }
    previous = std::set<int>(ranks.begin(), ranks.end());
    const auto started = std::chrono::steady_clock::now();
    if (round == 0 || need.empty()) {
      asio::post(io, [weak = weak_from_this(), ready = std::move(ready), generation = ++generation_]() {
        auto self = weak.lock();
        if (self && self->generation_ == generation) ready(FetchSummary{});
      });
      return;
    }
    const std::uint64_t generation = ++generation_;
    fetch = fetch_replicas(io, peers, need, client_options(), options.fetch_timeout,
                           [weak = weak_from_this(), need, started, generation, ready = std::move(ready)](
                               std::map<int, FetchedSet> sets, std::string error) {
      auto self = weak.lock();
      if (!self || self->generation_ != generation) {
        for (auto& [rank, set] : sets) {
          std::error_code ec;
          fs::remove_all(set.dir, ec);
        }
        return;
      }
      self->fetch.reset();
      ready(self->install(need, std::move(sets), std::move(error), started));
    });
  }

  // The newest of: what peers sent, this node's own replicas; installed when newer than what
  // this node holds.
  FetchSummary install(const std::vector<int>& need, std::map<int, FetchedSet> sets, std::string error,
                       std::chrono::steady_clock::time_point started) {
    FetchSummary summary;
    std::string from;
    for (int rank : need) {
      const std::uint64_t mine = state.sequence(rank);
      auto fetched = sets.find(rank);
      const std::uint64_t remote = fetched == sets.end() ? 0 : fetched->second.sequence;
      auto local = store.newest(rank);
      std::error_code ec;
      try {
        if (local && local->sequence > remote && local->sequence > mine) {
          // Linked out of this node's replicas (kept there for the ring's next loss).
          const fs::path dir = store.root() / (".installing-" + std::to_string(rank) + "-" + random_suffix());
          fs::create_directories(dir);
          std::vector<std::pair<std::string, fs::path>> files;
          for (const auto& [name, size] : local->files) {
            fs::create_hard_link(local->dir / name, dir / name);
            files.emplace_back(name, dir / name);
          }
          state.install(rank, std::move(files), local->sequence);
          if (pusher) pusher->changed(rank);
          fs::remove_all(dir, ec);
          ++summary.ranks;
          summary.bytes += local->bytes;
          from += " rank " + std::to_string(rank) + " from this node's replicas;";
        } else if (remote > mine) {
          const FetchedSet& f = fetched->second;
          std::vector<std::pair<std::string, fs::path>> files;
          for (const auto& [name, size] : f.files) files.emplace_back(name, f.dir / name);
          state.install(rank, std::move(files), f.sequence);
          if (pusher) pusher->changed(rank);  // the successor of this round holds none of it yet
          ++summary.ranks;
          summary.bytes += f.bytes;
          from += " rank " + std::to_string(rank) + " from " + f.from + ";";
        }
      } catch (const std::exception& e) {
        error += (error.empty() ? "" : "; ") + std::string("cannot install rank ") + std::to_string(rank) + ": " + e.what();
      }
      if (fetched != sets.end()) fs::remove_all(fetched->second.dir, ec);
    }
    summary.took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
    summary.error = error;
    char took[32];
    std::snprintf(took, sizeof took, "%.3f s", summary.took.count() / 1000.0);
    if (!from.empty()) from.pop_back();
    if (summary.ranks > 0) {
      log_line("state of " + std::to_string(summary.ranks) + " rank(s) fetched, " + mib(summary.bytes) + " in " + took +
               ":" + from + (error.empty() ? "" : " (" + error + ")"));
    } else if (!error.empty()) {
      log_line("no state fetched for rank(s) this node was given (" + error + "); its workers start without it");
    }
    return summary;
  }

  void cancel() {
    ++generation_;
    if (fetch) fetch->cancel();
    fetch.reset();
  }

  asio::io_context& io;
  StateDirectory& state;
  const int nproc;
  StateReplicationOptions options;
  ReplicaStore store;
  std::unique_ptr<ReplicaServer> server;
  std::unique_ptr<ReplicaPusher> pusher;
  std::shared_ptr<FetchHandle> fetch;
  std::set<int> previous;  // this node's ranks in its last round
  std::uint64_t generation_ = 0;
  std::mutex mu;            // listen(), from the rendezvous' thread
  std::uint16_t port = 0;
  bool listening = false;
  bool closed = false;  // close() ran
};

StateReplication::StateReplication(asio::io_context& io, StateDirectory& state, int nproc, StateReplicationOptions options)
    : impl_(std::make_shared<Impl>(io, state, nproc, std::move(options))) {}

StateReplication::~StateReplication() { close(); }

void StateReplication::close() {
  impl_->closed = true;
  impl_->cancel();
  impl_->pusher.reset();
  impl_->server.reset();
}

std::uint16_t StateReplication::listen(const std::string& addr) {
  std::lock_guard lock(impl_->mu);
  if (impl_->listening) return impl_->port;
  impl_->listening = true;
  int fd = -1;
  try {
    fd = listen_tcp(addr, impl_->port);
  } catch (const std::exception& e) {
    log_line(std::string("state replication: ") + e.what() + "; this node's state is not replicated to it");
    impl_->port = 0;
    return 0;
  }
  asio::post(impl_->io, [weak = std::weak_ptr<Impl>(impl_), fd] {
    if (auto self = weak.lock()) self->start_server(fd);
    else ::close(fd);
  });
  return impl_->port;
}

void StateReplication::on_round(int rendezvous_round, const RoundInfo& info, std::function<void(const FetchSummary&)> ready) {
  impl_->on_round(rendezvous_round, info, std::move(ready));
}

void StateReplication::changed(int rank) {
  if (impl_->pusher) impl_->pusher->changed(rank);
}

void StateReplication::cancel() { impl_->cancel(); }

}  // namespace crun
