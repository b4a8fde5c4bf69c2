#include "agent/replica_client.h"

#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <system_error>

#include "base/log.h"
#include "base/random_bits.h"

namespace crun {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using asio::ip::tcp;

namespace {

constexpr std::chrono::seconds kRetryAfter{1};
constexpr std::chrono::seconds kConnectTimeout{5};

// Connects to `peer`; `done` gets a link (hello sent) or the error's text.
void connect_link(asio::io_context& io, const ReplicaPeer& peer, const ReplicaClientOptions& options,
                  ReplicaLinkHandlers handlers,
                  std::function<void(std::shared_ptr<ReplicaLink>, std::string error)> done) {
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(peer.address, ec);
  if (ec) return done(nullptr, "bad address " + peer.address);
  // Close-on-exec from the start (Asio's open sets no flag): no worker may inherit it.
  const int raw = ::socket(address.is_v6() ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (raw < 0) return done(nullptr, std::string("socket: ") + std::strerror(errno));
  auto socket = std::make_shared<tcp::socket>(io);
  socket->assign(address.is_v6() ? tcp::v6() : tcp::v4(), raw, ec);
  if (ec) {
    ::close(raw);
    return done(nullptr, ec.message());
  }
  auto timer = std::make_shared<asio::steady_timer>(io, kConnectTimeout);
  timer->async_wait([socket](boost::system::error_code e) {
    if (!e) {
      boost::system::error_code ignored;
      socket->close(ignored);
    }
  });
  socket->async_connect(tcp::endpoint(address, peer.port),
                        [&io, socket, timer, options, handlers = std::move(handlers), done = std::move(done)](
                            boost::system::error_code e) mutable {
    timer->cancel();
    if (e) return done(nullptr, e == asio::error::operation_aborted ? "timed out" : e.message());
    boost::system::error_code released;
    const int fd = socket->release(released);
    if (released) return done(nullptr, released.message());
    std::shared_ptr<ReplicaLink> link;
    try {
      link = make_replica_link(io, fd, replica::ReplicaDecoder::Side::kClient, options.max_set_bytes,
                               options.incoming_root, std::move(handlers));
    } catch (const std::exception& ex) {
      return done(nullptr, ex.what());
    }
    link->send(replica::encode_hello(options.token));
    link->start();
    done(link, "");
  });
}

}  // namespace

std::string ReplicaPeer::str() const {
  const bool v6 = address.find(':') != std::string::npos;
  return (v6 ? "[" + address + "]" : address) + ":" + std::to_string(port);
}

// ---- the ring's sender ----

struct ReplicaPusher::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& io, ReplicaClientOptions o, std::function<std::optional<OutgoingSet>(int)> s)
      : io(io), options(std::move(o)), snapshot(std::move(s)), retry(io) {}

  void retarget(std::optional<ReplicaPeer> peer, std::vector<int> ranks) {
    if (peer != successor && link) {
      link->close();
      link.reset();
    }
    successor = std::move(peer);
    mine = std::set<int>(ranks.begin(), ranks.end());
    due = mine;
    sending = false;
    pump();
  }

  void changed(int rank) {
    if (!mine.count(rank)) return;
    due.insert(rank);
    pump();
  }

  // The next due rank's newest set, once the one before is written.
  void pump() {
    if (!successor || sending || connecting || waiting_retry || due.empty()) return;
    if (!link || !link->open()) return connect();
    while (!due.empty()) {
      const int rank = *due.begin();
      due.erase(due.begin());
      auto set = snapshot ? snapshot(rank) : std::nullopt;
      if (!set) continue;  // nothing committed (or deleted meanwhile: its next change comes)
      sending = true;
      in_flight_bytes[rank] = set->bytes();
      link->send_set(std::move(*set));
      return;
    }
  }

  void connect() {
    connecting = true;
    ReplicaLinkHandlers h;
    auto weak = weak_from_this();
    h.on_ack = [weak](int rank, std::uint64_t sequence) {
      auto self = weak.lock();
      if (!self) return;
      auto it = self->in_flight_bytes.find(rank);
      const std::uint64_t bytes = it == self->in_flight_bytes.end() ? 0 : it->second;
      if (self->acked) self->acked(rank, sequence, bytes);
    };
    h.on_drained = [weak] {
      auto self = weak.lock();
      if (!self || !self->sending) return;
      self->sending = false;
      asio::post(self->io, [weak] {
        if (auto s = weak.lock()) s->pump();
      });
    };
    const ReplicaPeer peer = *successor;
    h.on_closed = [weak, peer](const std::string& why) {
      auto self = weak.lock();
      if (!self || !(self->successor == peer)) return;
      self->link.reset();
      const bool idle = !self->sending && self->due.empty();
      if (self->sending) self->due = self->mine;  // what was on its way may not have arrived
      self->sending = false;
      // An idle connection the peer closed (it is leaving, or restarted): the next change reconnects.
      if (!why.empty() && !idle) self->failed(why);
    };
    connect_link(io, peer, options, std::move(h), [weak, peer](std::shared_ptr<ReplicaLink> l, std::string error) {
      auto self = weak.lock();
      if (!self) {
        if (l) l->close();
        return;
      }
      self->connecting = false;
      if (!(self->successor == peer)) {  // retargeted meanwhile
        if (l) l->close();
        return self->pump();
      }
      if (!l) return self->failed(error);
      self->link = std::move(l);
      self->failing = false;
      self->pump();
    });
  }

  void failed(const std::string& why) {
    if (!failing) log_line("state replication to " + successor->str() + " failed: " + why + "; retrying every second");
    failing = true;
    waiting_retry = true;
    retry.expires_after(kRetryAfter);
    retry.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
      auto self = weak.lock();
      if (!self || ec) return;
      self->waiting_retry = false;
      self->pump();
    });
  }

  asio::io_context& io;
  ReplicaClientOptions options;
  std::function<std::optional<OutgoingSet>(int)> snapshot;
  std::function<void(int, std::uint64_t, std::uint64_t)> acked;
  std::optional<ReplicaPeer> successor;
  std::set<int> mine;
  std::set<int> due;
  std::map<int, std::uint64_t> in_flight_bytes;
  std::shared_ptr<ReplicaLink> link;
  bool sending = false;
  bool connecting = false;
  bool waiting_retry = false;
  bool failing = false;
  asio::steady_timer retry;
};

ReplicaPusher::ReplicaPusher(asio::io_context& io, ReplicaClientOptions options,
                             std::function<std::optional<OutgoingSet>(int rank)> snapshot)
    : impl_(std::make_shared<Impl>(io, std::move(options), std::move(snapshot))) {}

ReplicaPusher::~ReplicaPusher() {
  impl_->retry.cancel();
  if (impl_->link) impl_->link->close();
}

void ReplicaPusher::retarget(std::optional<ReplicaPeer> successor, std::vector<int> ranks) {
  impl_->retarget(std::move(successor), std::move(ranks));
}
void ReplicaPusher::changed(int rank) { impl_->changed(rank); }
void ReplicaPusher::on_acked(std::function<void(int, std::uint64_t, std::uint64_t)> f) { impl_->acked = std::move(f); }
bool ReplicaPusher::busy() const { return impl_->sending || !impl_->due.empty(); }

// ---- a fetch ----

namespace {

class Fetch final : public FetchHandle, public std::enable_shared_from_this<Fetch> {
 public:
  Fetch(asio::io_context& io, std::vector<ReplicaPeer> peers, std::vector<int> ranks, ReplicaClientOptions options,
        std::function<void(std::map<int, FetchedSet>, std::string)> done)
      : io_(io), peers_(std::move(peers)), ranks_(std::move(ranks)), options_(std::move(options)), done_(std::move(done)),
        timer_(io), links_(peers_.size()), answers_(peers_.size()) {}

  void start(std::chrono::milliseconds timeout) {
    timer_.expires_after(timeout);
    timer_.async_wait([weak = weak_from_this(), timeout](boost::system::error_code ec) {
      auto self = weak.lock();
      if (!self || ec) return;
      self->note("no answer within " + std::to_string(timeout.count()) + " ms");
      self->finish();
    });
    if (peers_.empty() || ranks_.empty()) return asio::post(io_, [self = shared_from_this()] { self->finish(); });
    for (std::size_t i = 0; i < peers_.size(); ++i) open(i);
  }

  void cancel() override {
    finished_ = true;
    close_all();
  }

 private:
  void open(std::size_t i) {
    ReplicaLinkHandlers h;
    auto weak = weak_from_this();
    h.on_have = [weak, i](int rank, std::uint64_t sequence) {
      auto self = weak.lock();
      if (!self) return;
      if (self->phase_ == 1) return self->answered(i, rank, sequence);
      self->got_none(rank);  // a get answered "none": the peer dropped it meanwhile
    };
    h.on_set = [weak, i](ReceivedSet& set) {
      if (auto self = weak.lock()) self->received(i, set);
    };
    h.on_closed = [weak, i](const std::string& why) {
      auto self = weak.lock();
      if (!self || self->finished_) return;
      self->links_[i].reset();
      self->peer_gone(i, why.empty() ? "closed" : why);
    };
    connect_link(io_, peers_[i], options_, std::move(h), [weak, i](std::shared_ptr<ReplicaLink> l, std::string error) {
      auto self = weak.lock();
      if (!self || self->finished_) {
        if (l) l->close();
        return;
      }
      if (!l) return self->peer_gone(i, error);
      self->links_[i] = l;
      for (int rank : self->ranks_) l->send(replica::encode_query(rank));
    });
  }

  void note(const std::string& e) {
    if (!error_.empty()) error_ += "; ";
    error_ += e;
  }

  // Phase 1: every peer's sequences.
  void answered(std::size_t i, int rank, std::uint64_t sequence) {
    answers_[i][rank] = sequence;
    if (answers_[i].size() == ranks_.size()) ++peers_answered_;
    maybe_get();
  }

  void peer_gone(std::size_t i, const std::string& why) {
    if (gone_.count(i)) return;
    gone_.insert(i);
    note(peers_[i].str() + ": " + why);
    if (phase_ == 1) return maybe_get();
    // Phase 2: the ranks asked of it are missing.
    for (auto it = asked_.begin(); it != asked_.end();) {
      if (it->second == i) it = asked_.erase(it);
      else ++it;
    }
    if (asked_.empty()) finish();
  }

  void maybe_get() {
    if (phase_ != 1 || peers_answered_ + static_cast<int>(gone_.size()) < static_cast<int>(peers_.size())) return;
    phase_ = 2;
    for (int rank : ranks_) {
      std::optional<std::size_t> best;
      std::uint64_t newest = 0;
      for (std::size_t i = 0; i < peers_.size(); ++i) {
        if (gone_.count(i) || !links_[i]) continue;
        auto it = answers_[i].find(rank);
        if (it != answers_[i].end() && it->second > newest) {
          newest = it->second;
          best = i;
        }
      }
      if (!best) continue;
      asked_[rank] = *best;
      links_[*best]->send(replica::encode_get(rank));
    }
    if (asked_.empty()) finish();
  }

  void received(std::size_t i, ReceivedSet& set) {
    if (!asked_.count(set.rank) || asked_[set.rank] != i) return;  // not asked of it: dropped
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, "%016llx", static_cast<unsigned long long>(random_bits()));
    const fs::path dir = options_.incoming_root / (".fetched-" + std::to_string(set.rank) + "-" + suffix);
    std::error_code ec;
    fs::rename(set.dir, dir, ec);
    if (ec) {
      note("cannot keep the set of rank " + std::to_string(set.rank) + ": " + ec.message());
    } else {
      FetchedSet f{set.rank, set.sequence, dir, set.files, set.bytes, peers_[i].str()};
      sets_[set.rank] = std::move(f);
      set.dir.clear();
    }
    asked_.erase(set.rank);
    if (asked_.empty()) finish();
  }

  void got_none(int rank) {
    asked_.erase(rank);
    if (asked_.empty()) finish();
  }

  void close_all() {
    timer_.cancel();
    for (auto& l : links_) {
      if (l) l->close();
      l.reset();
    }
  }

  void finish() {
    if (finished_) return;
    finished_ = true;
    close_all();
    auto done = std::move(done_);
    done(std::move(sets_), error_);
  }

  asio::io_context& io_;
  std::vector<ReplicaPeer> peers_;
  std::vector<int> ranks_;
  ReplicaClientOptions options_;
  std::function<void(std::map<int, FetchedSet>, std::string)> done_;
  asio::steady_timer timer_;
  std::vector<std::shared_ptr<ReplicaLink>> links_;
  std::vector<std::map<int, std::uint64_t>> answers_;  // per peer: rank -> sequence
  std::set<std::size_t> gone_;
  int peers_answered_ = 0;
  int phase_ = 1;
  std::map<int, std::size_t> asked_;  // phase 2: rank -> the peer asked
  std::map<int, FetchedSet> sets_;
  std::string error_;
  bool finished_ = false;
};

}  // namespace

std::shared_ptr<FetchHandle> fetch_replicas(asio::io_context& io, std::vector<ReplicaPeer> peers, std::vector<int> ranks,
                                            ReplicaClientOptions options, std::chrono::milliseconds timeout,
                                            std::function<void(std::map<int, FetchedSet>, std::string)> done) {
  auto f = std::make_shared<Fetch>(io, std::move(peers), std::move(ranks), std::move(options), std::move(done));
  f->start(timeout);
  return f;
}

}  // namespace crun
