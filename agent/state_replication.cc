#include "agent/state_replication.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cstdio>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

#include "agent/replica_client.h"
#include "agent/replica_server.h"
#include "agent/replica_store.h"
#include "agent/state_directory.h"
#include "base/log.h"
#include "base/quiet_thread.h"
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

// A set whose descriptors another holds too (dup): the one kept per rank, sent as often as asked.
OutgoingSet copy_of(const OutgoingSet& set) {
  OutgoingSet out;
  out.rank = set.rank;
  out.sequence = set.sequence;
  for (const auto& f : set.files) out.files.push_back(OutgoingFile{f.name, ::fcntl(f.fd, F_DUPFD_CLOEXEC, 0), f.size});
  return out;
}

// What a round's fetch decided for one rank, carried from the replication thread to the loop.
struct Install {
  int rank = 0;
  std::uint64_t sequence = 0;
  fs::path dir;  // the files, named as in the set
  std::vector<std::pair<std::string, std::uint64_t>> files;
  std::uint64_t bytes = 0;
  std::string from;
};

}  // namespace

std::vector<int> ranks_to_fetch(int round, const std::set<int>& previous, const std::vector<int>& ranks) {
  std::vector<int> out;
  if (round == 0) return out;
  for (int rank : ranks) {
    if (!previous.count(rank)) out.push_back(rank);
  }
  return out;
}

struct StateReplication::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& loop, StateDirectory& state, int nproc, StateReplicationOptions o)
      : loop(loop), state(state), nproc(nproc), options(std::move(o)), store(state.job_root() / "replicas"),
        max_bytes(state.max_bytes()), work(asio::make_work_guard(io)) {}

  void start() {
    thread = quiet_thread([this] {
      // Below the loop and the workers: on a host whose CPUs training keeps busy, copies take what
      // is left over (docs/decisions.md, "State that outlives a node").
      ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), kNice);
      ::pthread_setname_np(::pthread_self(), "crun-replica");  // ps -L, /proc/<pid>/task/*/comm
      io.run();
    });
  }

  ReplicaClientOptions client_options() const { return ReplicaClientOptions{options.token, max_bytes, store.root()}; }

  // ---- the replication thread ----

  std::optional<OutgoingSet> own_set(int rank) const {
    auto it = own.find(rank);
    if (it == own.end()) return std::nullopt;
    return copy_of(*it->second);
  }

  void start_server(int fd) {
    try {
      server = std::make_unique<ReplicaServer>(
          io, fd, ReplicaServerOptions{options.token, max_bytes, 64}, store,
          SetSource{[this](int rank) -> std::uint64_t {
                      auto it = own.find(rank);
                      return it == own.end() ? 0 : it->second->sequence;
                    },
                    [this](int rank) { return own_set(rank); }});
    } catch (const std::exception& e) {
      log_line(std::string("state replication: ") + e.what() + "; this node keeps no replicas");
    }
  }

  void keep_own(std::map<int, std::shared_ptr<OutgoingSet>> sets) {
    for (auto& [rank, set] : sets) {
      own[rank] = std::move(set);
      if (pusher) pusher->changed(rank);
    }
  }

  void retarget(const RoundInfo& info, const std::vector<int>& ranks) {
    std::optional<ReplicaPeer> successor;
    const int n = static_cast<int>(info.state_endpoints.size());
    ReplicaPeer p;
    if (n > 1 && parse_state_endpoint(info.state_endpoints[(info.group_rank + 1) % n], p.address, p.port)) successor = p;
    if (!pusher) pusher = std::make_unique<ReplicaPusher>(io, client_options(), [this](int rank) { return own_set(rank); });
    pusher->retarget(successor, ranks);
  }

  // The newest of what the peers sent and this node's replicas, for each rank newer than `mine`.
  std::vector<Install> choose(const std::map<int, std::uint64_t>& mine, std::map<int, FetchedSet>& sets, std::string& error) {
    std::vector<Install> out;
    for (const auto& [rank, have] : mine) {
      auto fetched = sets.find(rank);
      const std::uint64_t remote = fetched == sets.end() ? 0 : fetched->second.sequence;
      auto local = store.newest(rank);
      std::error_code ec;
      if (local && local->sequence > remote && local->sequence > have) {
        // Linked out of this node's replicas (kept there for the ring's next loss).
        Install in{rank, local->sequence, store.root() / (".installing-" + std::to_string(rank) + "-" + random_suffix()),
                   local->files, local->bytes, "this node's replicas"};
        fs::create_directories(in.dir, ec);
        for (const auto& [name, size] : local->files) {
          if (!ec) fs::create_hard_link(local->dir / name, in.dir / name, ec);
        }
        if (ec) {
          error += (error.empty() ? "" : "; ") + std::string("cannot link the replica of rank ") + std::to_string(rank) + ": " + ec.message();
          fs::remove_all(in.dir, ec);
        } else {
          out.push_back(std::move(in));
        }
      } else if (remote > have) {
        FetchedSet& f = fetched->second;
        out.push_back(Install{rank, f.sequence, f.dir, f.files, f.bytes, f.from});
        f.dir.clear();
      }
      if (fetched != sets.end() && !fetched->second.dir.empty()) fs::remove_all(fetched->second.dir, ec);
    }
    return out;
  }

  // ---- the agent's loop ----

  // Moves what the fetch chose into the state directory; one line.
  FetchSummary install(std::vector<Install> chosen, std::string error, std::chrono::steady_clock::time_point started) {
    FetchSummary summary;
    std::string from;
    for (auto& in : chosen) {
      std::vector<std::pair<std::string, fs::path>> files;
      for (const auto& [name, size] : in.files) files.emplace_back(name, in.dir / name);
      try {
        state.install(in.rank, std::move(files), in.sequence);
        ++summary.ranks;
        summary.bytes += in.bytes;
        from += " rank " + std::to_string(in.rank) + " from " + in.from + ";";
        changed(in.rank);  // the ring's successor of this round holds none of it yet
      } catch (const std::exception& e) {
        error += (error.empty() ? "" : "; ") + std::string("cannot install rank ") + std::to_string(in.rank) + ": " + e.what();
      }
      std::error_code ec;
      fs::remove_all(in.dir, ec);
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

  void changed(int rank) {
    if (closed) return;
    std::map<int, std::shared_ptr<OutgoingSet>> sets;
    auto set = committed_snapshot(state, rank);
    if (!set) return;
    sets[rank] = std::make_shared<OutgoingSet>(std::move(*set));
    asio::post(io, [self = shared_from_this(), sets = std::move(sets)]() mutable { self->keep_own(std::move(sets)); });
  }

  void on_round(int round, const RoundInfo& info, std::function<void(const FetchSummary&)> ready) {
    cancel();
    const std::uint64_t generation = ++generation_;
    std::vector<int> ranks;
    std::map<int, std::shared_ptr<OutgoingSet>> sets;  // this node's committed sets now
    std::map<int, std::uint64_t> need;                 // ranks to fetch -> the sequence held here
    for (int lr = 0; lr < nproc; ++lr) {
      const int rank = info.rank_offset + lr;
      ranks.push_back(rank);
      if (auto set = committed_snapshot(state, rank)) sets[rank] = std::make_shared<OutgoingSet>(std::move(*set));
    }
    for (int rank : ranks_to_fetch(round, previous, ranks)) need[rank] = state.sequence(rank);
    previous = std::set<int>(ranks.begin(), ranks.end());
    std::vector<ReplicaPeer> peers;
    for (int i = 0; i < static_cast<int>(info.state_endpoints.size()); ++i) {
      ReplicaPeer p;
      if (i != info.group_rank && parse_state_endpoint(info.state_endpoints[i], p.address, p.port)) peers.push_back(p);
    }
    const auto started = std::chrono::steady_clock::now();
    auto back = [weak = weak_from_this(), generation, ready = std::move(ready), started](std::vector<Install> chosen,
                                                                                          std::string error) mutable {
      auto self = weak.lock();
      if (!self || self->generation_ != generation || self->closed) {
        std::error_code ec;
        for (auto& in : chosen) fs::remove_all(in.dir, ec);
        return;
      }
      const FetchSummary summary =
          chosen.empty() && error.empty() ? FetchSummary{} : self->install(std::move(chosen), std::move(error), started);
      ready(summary);
    };
    asio::post(io, [self = shared_from_this(), info, ranks, sets = std::move(sets), need, peers, back = std::move(back)]() mutable {
      self->keep_own(std::move(sets));
      self->retarget(info, ranks);
      if (need.empty()) {
        asio::post(self->loop, [back = std::move(back)]() mutable { back({}, ""); });
        return;
      }
      std::vector<int> wanted;
      for (const auto& [rank, have] : need) wanted.push_back(rank);
      self->fetch = fetch_replicas(self->io, peers, wanted, self->client_options(), self->options.fetch_timeout,
                                   [weak = std::weak_ptr<Impl>(self), need, back = std::move(back)](
                                       std::map<int, FetchedSet> got, std::string error) mutable {
        auto s = weak.lock();
        if (!s) return;
        s->fetch.reset();
        auto chosen = s->choose(need, got, error);
        asio::post(s->loop, [back = std::move(back), chosen = std::move(chosen), error]() mutable {
          back(std::move(chosen), error);
        });
      });
    });
  }

  void cancel() {
    ++generation_;
    if (closed) return;
    asio::post(io, [self = shared_from_this()] {
      if (self->fetch) self->fetch->cancel();
      self->fetch.reset();
    });
  }

  void close() {
    if (closed) return;
    closed = true;
    ++generation_;
    {
      std::lock_guard lock(mu);
      shut = true;
    }
    asio::post(io, [this] {
      if (fetch) fetch->cancel();
      fetch.reset();
      pusher.reset();
      server.reset();
      own.clear();
      work.reset();
    });
    if (thread.joinable()) thread.join();
  }

  static constexpr int kNice = 19;
  asio::io_context& loop;
  StateDirectory& state;  // the loop's
  const int nproc;
  StateReplicationOptions options;
  // The replication thread's.
  asio::io_context io{1};
  ReplicaStore store;
  const std::uint64_t max_bytes;
  std::unique_ptr<ReplicaServer> server;
  std::unique_ptr<ReplicaPusher> pusher;
  std::shared_ptr<FetchHandle> fetch;
  std::map<int, std::shared_ptr<OutgoingSet>> own;  // this node's newest committed set per rank (served, sent)
  asio::executor_work_guard<asio::io_context::executor_type> work;
  std::thread thread;
  // The loop's.
  std::set<int> previous;  // this node's ranks in its last round
  std::uint64_t generation_ = 0;
  bool closed = false;
  // listen(), from any thread.
  std::mutex mu;
  std::uint16_t port = 0;
  bool listening = false;
  bool shut = false;
};

StateReplication::StateReplication(asio::io_context& io, StateDirectory& state, int nproc, StateReplicationOptions options)
    : impl_(std::make_shared<Impl>(io, state, nproc, std::move(options))) {
  impl_->start();
}

StateReplication::~StateReplication() { close(); }

void StateReplication::close() { impl_->close(); }

std::uint16_t StateReplication::listen(const std::string& addr) {
  std::lock_guard lock(impl_->mu);
  if (impl_->listening || impl_->shut) return impl_->port;
  impl_->listening = true;
  int fd = -1;
  try {
    fd = listen_tcp(addr, impl_->port);
  } catch (const std::exception& e) {
    log_line(std::string("state replication: ") + e.what() + "; this node's state is not replicated to it");
    impl_->port = 0;
    return 0;
  }
  asio::post(impl_->io, [self = impl_, fd] { self->start_server(fd); });
  return impl_->port;
}

void StateReplication::on_round(int rendezvous_round, const RoundInfo& info, std::function<void(const FetchSummary&)> ready) {
  impl_->on_round(rendezvous_round, info, std::move(ready));
}

void StateReplication::changed(int rank) { impl_->changed(rank); }

void StateReplication::cancel() { impl_->cancel(); }

}  // namespace crun
