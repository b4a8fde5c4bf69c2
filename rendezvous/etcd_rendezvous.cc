#include "rendezvous/etcd_rendezvous.h"

#include <atomic>
#include <boost/asio.hpp>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "base/addresses.h"
#include "base/exit_codes.h"
#include "base/quiet_thread.h"
#include "rendezvous/etcd_client.h"
#include "rendezvous/etcd_round_core.h"
#include "rendezvous/rendezvous_participant.h"

namespace crun {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::chrono::milliseconds kElection{5000};  // room for an etcd leader election

// How often the lease is kept alive: every third of lease_ttl.
std::chrono::milliseconds keep_alive_interval(const EtcdSettings& e) { return e.lease_ttl / 3; }

// The TTL the lease is granted with, whole seconds: lease_ttl after the next keep-alive was due.
// An agent stalled (stopped, descheduled) for less than lease_ttl keeps its lease whatever the
// time since its last keep-alive; granted lease_ttl alone, a stall of two thirds of it could end
// the lease, and with it this node's part in the round (every worker restarted).
std::chrono::seconds granted_ttl(const EtcdSettings& e) {
  return std::chrono::ceil<std::chrono::seconds>(e.lease_ttl + keep_alive_interval(e));
}

EtcdClientOptions client_options(const EtcdSettings& e) {
  EtcdClientOptions o;
  for (const auto& ep : e.endpoints) o.endpoints.push_back({ep.host, ep.port});
  o.tls = e.tls;
  o.cacert = e.cacert;
  o.cert = e.cert;
  o.key = e.key;
  o.first_endpoint = e.first_endpoint;
  // A keep-alive goes every third of the TTL; a member that does not answer within that moves the
  // client on, so that the next member still renews the lease in time.
  o.attempt_timeout = std::clamp(keep_alive_interval(e),
                                 std::chrono::milliseconds(500), std::chrono::milliseconds(3000));
  // Past the lease's TTL: while etcd elects a new leader (1-2.5 s with its default election
  // timeout) nothing answers, and the new leader extends every lease, so giving up at the TTL
  // would end healthy agents. Cut off for this long, this agent's lease is gone.
  o.give_up_after = granted_ttl(e) + kElection;
  return o;
}

// What an etcd error (an EtcdError; never null) means for this node: its one line, and the exit
// code a round request is answered with.
struct EtcdLoss {
  std::string why;
  int exit_code = kExitStoreLost;
};

EtcdLoss loss_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const EtcdRejected& e) {
    return {e.what(), kExitRendezvousRejected};
  } catch (const std::exception& e) {
    return {e.what(), kExitStoreLost};
  }
}

// Node rank 0's gathering of one round's stacks records (EtcdRendezvous::await_stacks): who waits
// for which node rank's record, until when; the records seen; the watch of the round's keys.
struct StacksWaiter {
  int node_rank = 0;
  Clock::time_point deadline;
  std::function<void(std::optional<std::string>)> done;
};
struct StacksRead {
  int round = 0;
  std::vector<StacksWaiter> waiters;
  std::map<int, std::string> seen;  // by node rank
  std::unique_ptr<EtcdWatch> watch;
};

}  // namespace

struct EtcdRendezvous::Impl : std::enable_shared_from_this<Impl> {
  Impl(RendezvousNodeConfig c, PostToLoop p, RendezvousListener l)
      : config(std::move(c)),
        post_to_loop(std::move(p)),
        listener(std::move(l)),
        keys(config.multi.etcd.key_prefix, config.multi.rendezvous.run_id),
        self(this_node_record(config)) {}

  // Posts `f` to the agent's loop unless the rendezvous was shut down.
  template <typename F>
  void post(F&& f) {
    post_to_loop([weak = weak_from_this(), f = std::forward<F>(f)]() mutable {
      auto s = weak.lock();
      if (s && !s->stopped) f(*s);
    });
  }

  // --- on the I/O thread ---

  void start() {
    try {
      client = std::make_unique<EtcdClient>(io, client_options(config.multi.etcd));
    } catch (const std::exception& e) {
      lose(std::make_exception_ptr(EtcdRejected(std::string("etcd: ") + e.what())));
      return;
    }
    client->grant(granted_ttl(config.multi.etcd).count(), [this](std::exception_ptr error, EtcdLease l) {
      if (error) return lose(error);
      lease = l.id;
      keep_alive_later();
      write_status();  // one handed over before the lease was granted
      // The watches first, from now (a watch from a past revision waits for etcd's catch-up
      // loop, up to 100 ms), then the read: what changes in between comes twice, and the
      // core keeps the newest.
      round_watch = client->watch(
          keys.round(), "", 0, false,
          [this](std::int64_t, std::vector<EtcdEvent> events) {
            for (auto& e : events) round_events.push_back(std::move(e));
            apply_events();
          },
          [this](std::exception_ptr error) { lose(error); }, [this](std::int64_t) { watches_created(); });
      watch = client->watch(
          keys.alive_prefix(), etcd_prefix_end(keys.alive_prefix()), 0, true,
          [this](std::int64_t, std::vector<EtcdEvent> events) {
            for (auto& e : events) gone_events.push_back(std::move(e));
            apply_events();
          },
          [this](std::exception_ptr error) { lose(error); }, [this](std::int64_t) { watches_created(); });
    });
  }

  // Both watches run: read the run's state, creating the round record if there is none.
  void watches_created() {
    if (++created_watches != 2) return;
    // One transaction: this node's alive key; the round record, created (round 0 forming, this
    // node the reference) when there is none yet; and who is alive, all at one revision.
    EtcdRoundRecord first;
    first.reference = self.to_json();
    const std::string created = first.to_json();
    EtcdCompare none;
    none.key = keys.round();
    none.target = EtcdCompare::Target::kCreateRevision;
    none.revision = 0;
    EtcdOp alive = EtcdOp::range(keys.alive_prefix(), etcd_prefix_end(keys.alive_prefix()));
    alive.keys_only = true;
    EtcdTxn t;
    t.compare.push_back(none);
    t.success = {EtcdOp::put(keys.alive(self.node_id), self.hostname, lease), EtcdOp::put(keys.round(), created), alive};
    t.failure = {EtcdOp::put(keys.alive(self.node_id), self.hostname, lease), EtcdOp::range(keys.round()), alive};
    client->txn(std::move(t), [this, created](std::exception_ptr error, EtcdTxnResult r) {
      if (error) return lose(error);
      if (self.addr.empty()) self.addr = client->local_address();
      if (config.state_port) self.state_port = config.state_port(self.addr);
      {
        std::lock_guard lock(mu);
        address = self.addr;
      }
      core = std::make_unique<EtcdRoundCore>(config.multi.rendezvous, keys, self);
      core->set_wall_offset(std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::system_clock::now().time_since_epoch() - Clock::now().time_since_epoch()));
      std::optional<std::pair<std::string, std::int64_t>> record;
      if (r.succeeded) record = std::pair{created, r.revision};
      std::vector<std::string> nodes;
      for (const auto& kv : r.kvs) {
        if (kv.key == keys.round()) record = std::pair{kv.value, kv.mod_revision};
        else nodes.push_back(kv.key.substr(keys.alive_prefix().size()));
      }
      core->load(record, nodes, r.revision);
      loaded = true;
      apply_events();
      if (wants_round) begin_request();
      decide();
    });
  }

  // The watches' events, once the core has the state they change.
  void apply_events() {
    if (!loaded || gone) return;
    for (const auto& e : round_events) {
      if (e.deleted) core->on_round_gone(e.kv.mod_revision);
      else core->on_round(e.kv.value, e.kv.mod_revision);
    }
    for (const auto& e : gone_events) core->on_node_gone(e.kv.key.substr(keys.alive_prefix().size()));
    round_events.clear();
    gone_events.clear();
    decide();
  }

  void answer_start_error() {
    RoundResult r;
    const EtcdLoss loss = loss_of(start_error);
    r.error = loss.why;
    r.exit_code = loss.exit_code;
    wants_round = false;
    post([r](Impl& s) { s.listener.on_round(r); });
  }

  void begin_request() {
    wants_round = false;
    std::uint16_t port = config.master_port.value_or(0);
    if (port == 0) {
      try {
        port = pick_free_port(self.addr.empty() ? "0.0.0.0" : self.addr);
      } catch (const std::exception& e) {
        RoundResult r;
        r.error = std::string("cannot find a free port for MASTER_PORT: ") + e.what();
        r.exit_code = kExitAgentError;
        post([r](Impl& s) { s.listener.on_round(r); });
        return;
      }
    }
    core->request_round(Clock::now(), port);
  }

  void keep_alive_later() {
    keep_alive_timer.expires_after(keep_alive_interval(config.multi.etcd));
    keep_alive_timer.async_wait([this](boost::system::error_code ec) {
      if (ec || gone) return;
      client->keep_alive(lease, [this](std::exception_ptr error, EtcdLease l) {
        if (error) return lose(error);
        if (l.ttl_seconds <= 0) {
          return lose(std::make_exception_ptr(
              EtcdError("this node's etcd lease expired, so etcd dropped its keys (cut off from etcd for longer than "
                        "its lease_ttl?)")));
        }
        keep_alive_later();
        if (gather_status) read_job_status();
      });
    });
  }

  // Operators' view: this node's status under its lease, and (gathering) everyone's read back.
  void write_status() {
    if (gone || lease == 0 || !status_json) return;
    EtcdTxn t;
    t.success = {EtcdOp::put(keys.status(self.node_id), *status_json, lease)};
    status_json.reset();
    client->txn(std::move(t), [this](std::exception_ptr, EtcdTxnResult) {
      if (gather_status) read_job_status();
    });
  }

  void read_job_status() {
    if (gone) return;
    const std::string prefix = keys.status_prefix();
    client->range(prefix, etcd_prefix_end(prefix), [this](std::exception_ptr error, EtcdRangeResult r) {
      if (error) return;  // best effort: the next tick reads again
      std::vector<std::string> records;
      for (auto& kv : r.kvs) records.push_back(std::move(kv.value));
      std::lock_guard lock(mu);
      job_status = std::move(records);
    });
  }

  // etcd is gone for this node. Before the first read of the run's keys, the answer to the
  // round request says so (with its exit code); after it, the listener's on_store_lost.
  void lose(std::exception_ptr error) {
    if (gone) return;
    gone = true;
    if (!loaded) {
      start_error = error;
      if (wants_round) answer_start_error();
    } else {
      post([why = loss_of(error).why](Impl& s) { s.listener.on_store_lost(why); });
    }
    watch.reset();
    round_watch.reset();
    keep_alive_timer.cancel();
    decide_timer.cancel();
    end_stacks_read();
  }

  void decide() {
    if (gone || !core) return;
    EtcdRoundActions a = core->decide(Clock::now());
    for (auto& r : a.answers) post([r](Impl& s) { s.listener.on_round(r); });
    for (auto& c : a.controls) post([c](Impl& s) { s.listener.on_control(c); });
    for (auto& line : a.progress) post([line](Impl& s) { s.listener.on_progress(line); });
    if (a.join) put_and_count(*a.join, true);
    if (a.report) put_and_count(*a.report, false);
    if (a.read_joins) read_joins(*a.read_joins);
    if (a.read_alive) read_alive();
    if (a.write) write(std::move(*a.write));
    if (a.deadline) {
      decide_timer.expires_at(*a.deadline);
      decide_timer.async_wait([this](boost::system::error_code ec) {
        if (!ec) decide();
      });
    }
  }

  // Puts this node's join or report under its lease and counts that round's keys of the kind.
  void put_and_count(const EtcdRoundPut& p, bool join) {
    EtcdTxn t;
    t.success.push_back(EtcdOp::put(p.key, p.value, lease));
    EtcdOp count = EtcdOp::range(p.count_prefix, etcd_prefix_end(p.count_prefix));
    count.count_only = true;
    t.success.push_back(count);
    client->txn(std::move(t), [this, round = p.round, join](std::exception_ptr error, EtcdTxnResult r) {
      if (error) return lose(error);
      if (gone) return;
      const std::int64_t n = r.counts.empty() ? 0 : r.counts.front();
      if (join) core->on_join_count(round, n, Clock::now());
      else core->on_report_count(round, n);
      decide();
    });
  }

  // Who is alive (keys only), for an exclusion about to be decided (EtcdRoundCore::on_alive_list).
  void read_alive() {
    EtcdOp alive = EtcdOp::range(keys.alive_prefix(), etcd_prefix_end(keys.alive_prefix()));
    alive.keys_only = true;
    EtcdTxn t;
    t.success = {alive};
    client->txn(std::move(t), [this](std::exception_ptr error, EtcdTxnResult r) {
      if (error) return lose(error);
      if (gone) return;
      std::vector<std::string> nodes;
      for (const auto& kv : r.kvs) nodes.push_back(kv.key.substr(keys.alive_prefix().size()));
      core->on_alive_list(nodes);
      decide();
    });
  }

  void read_joins(int round) {
    const std::string prefix = keys.join_prefix(round);
    client->range(prefix, etcd_prefix_end(prefix), [this, round](std::exception_ptr error, EtcdRangeResult r) {
      if (error) return lose(error);
      if (gone) return;
      std::vector<EtcdJoinRecord> joins;
      for (const auto& kv : r.kvs) {
        try {
          joins.push_back(EtcdJoinRecord::from_json(kv.value));
        } catch (const std::invalid_argument&) {
          // a malformed join counts as none
        }
      }
      core->on_joins(round, joins);
      decide();
    }, /*serializable=*/true);  // after our own join through the same member: a stale read only delays a freeze
  }

  void write(EtcdRoundWrite w) {
    if (!w.closes) return swap(std::move(w), 0);
    // The closed record outlives the agents by close_timeout, so that late ones read it, then goes.
    const auto ttl = std::max<std::int64_t>(
        2, std::chrono::duration_cast<std::chrono::seconds>(config.multi.rendezvous.close_timeout).count());
    client->grant(ttl, [this, w = std::move(w)](std::exception_ptr error, EtcdLease l) mutable {
      if (error) return lose(error);
      swap(std::move(w), l.id);
    });
  }

  void swap(EtcdRoundWrite w, std::int64_t with_lease) {
    EtcdTxn t;
    EtcdCompare c;
    c.key = keys.round();
    c.target = w.if_revision ? EtcdCompare::Target::kModRevision : EtcdCompare::Target::kCreateRevision;
    c.revision = w.if_revision;
    t.compare.push_back(c);
    std::string value = w.next.to_json();
    t.success.push_back(EtcdOp::put(keys.round(), value, with_lease));
    t.failure.push_back(EtcdOp::range(keys.round()));
    client->txn(std::move(t), [this, value](std::exception_ptr error, EtcdTxnResult r) {
      if (error) return lose(error);
      if (gone) return;
      // The record's value now, without waiting for the watch to bring it.
      if (r.succeeded) core->on_round(value, r.revision);
      else if (r.kvs.empty()) core->on_round_gone(r.revision);
      else core->on_round(r.kvs.front().value, r.kvs.front().mod_revision);
      core->write_done();
      decide();
    });
  }

  // --- stacks before the kill (on the I/O thread) ---

  // Under a lease of its own: this node's lease goes when its agent exits, and the record must
  // stay until node rank 0 has read it.
  void publish_stacks(int round, int node_rank, std::string record, std::chrono::milliseconds keep_for,
                      std::function<void(bool)> done) {
    const auto answer = [this](std::function<void(bool)> d, bool taken) {
      post([d = std::move(d), taken](Impl&) { d(taken); });
    };
    if (gone || !client) return answer(std::move(done), false);
    const auto ttl = std::chrono::ceil<std::chrono::seconds>(keep_for + config.multi.rendezvous.close_timeout);
    client->grant(std::max<std::int64_t>(2, ttl.count()), [this, round, node_rank, record = std::move(record), done = std::move(done),
                                                           answer](std::exception_ptr error, EtcdLease l) mutable {
      if (error || gone) return answer(std::move(done), false);
      EtcdTxn t;
      t.success = {EtcdOp::put(keys.stacks(round, node_rank), std::move(record), l.id)};
      client->txn(std::move(t), [done = std::move(done), answer](std::exception_ptr error, EtcdTxnResult) mutable {
        answer(std::move(done), !error);
      });
    });
  }

  void await_stacks(int round, int node_rank, std::chrono::milliseconds wait, std::function<void(std::optional<std::string>)> done) {
    if (gone || !client) return post([done = std::move(done)](Impl&) { done(std::nullopt); });
    if (stacks_read && stacks_read->round != round) end_stacks_read();
    if (!stacks_read) begin_stacks_read(round);
    StacksRead& r = *stacks_read;
    if (const auto it = r.seen.find(node_rank); it != r.seen.end()) {
      return post([done = std::move(done), text = it->second](Impl&) { done(text); });
    }
    r.waiters.push_back({node_rank, Clock::now() + wait, std::move(done)});
    arm_stacks_timer();
  }

  // The watch from now, then the read (EtcdClient::watch): a record put in between comes twice.
  void begin_stacks_read(int round) {
    stacks_read.emplace();
    stacks_read->round = round;
    const std::string prefix = keys.stacks_prefix(round);
    stacks_read->watch = client->watch(
        prefix, etcd_prefix_end(prefix), 0, false,
        [this, round](std::int64_t, std::vector<EtcdEvent> events) {
          for (const auto& e : events) {
            if (!e.deleted) stacks_arrived(round, e.kv);
          }
        },
        [this, round](std::exception_ptr) {
          if (stacks_read && stacks_read->round == round) end_stacks_read();
        },
        [this, round, prefix](std::int64_t) {
          client->range(prefix, etcd_prefix_end(prefix), [this, round](std::exception_ptr error, EtcdRangeResult r) {
            if (!stacks_read || stacks_read->round != round) return;
            if (error) return end_stacks_read();
            for (const auto& kv : r.kvs) stacks_arrived(round, kv);
          });
        });
  }

  void stacks_arrived(int round, const EtcdKeyValue& kv) {
    if (!stacks_read || stacks_read->round != round) return;
    const std::string prefix = keys.stacks_prefix(round);
    int node_rank = -1;
    try {
      std::size_t used = 0;
      const std::string tail = kv.key.substr(prefix.size());
      node_rank = std::stoi(tail, &used);
      if (used != tail.size() || node_rank < 0) return;
    } catch (const std::exception&) {
      return;  // not a key crun writes
    }
    StacksRead& r = *stacks_read;
    r.seen[node_rank] = kv.value;
    std::erase_if(r.waiters, [&](StacksWaiter& w) {
      if (w.node_rank != node_rank) return false;
      post([done = std::move(w.done), text = kv.value](Impl&) { done(text); });
      return true;
    });
    if (r.waiters.empty()) end_stacks_read();
  }

  void arm_stacks_timer() {
    if (!stacks_read || stacks_read->waiters.empty()) return;
    auto first = stacks_read->waiters.front().deadline;
    for (const auto& w : stacks_read->waiters) first = std::min(first, w.deadline);
    stacks_timer.expires_at(first);
    stacks_timer.async_wait([this](boost::system::error_code ec) {
      if (ec || !stacks_read) return;
      const auto now = Clock::now();
      std::erase_if(stacks_read->waiters, [&](StacksWaiter& w) {
        if (w.deadline > now) return false;
        post([done = std::move(w.done)](Impl&) { done(std::nullopt); });
        return true;
      });
      if (stacks_read->waiters.empty()) end_stacks_read();
      else arm_stacks_timer();
    });
  }

  // Every waiter still waiting answered with nothing; the watch goes.
  void end_stacks_read() {
    stacks_timer.cancel();
    if (!stacks_read) return;
    for (auto& w : stacks_read->waiters) post([done = std::move(w.done)](Impl&) { done(std::nullopt); });
    stacks_read.reset();
  }

  void stop_io() {
    gone = true;
    keep_alive_timer.cancel();
    decide_timer.cancel();
    stacks_timer.cancel();
    stacks_read.reset();  // no callback after shutdown
    watch.reset();
    round_watch.reset();
    if (client && lease) {
      asio::steady_timer* bound = &stop_timer;
      bound->expires_after(std::chrono::seconds(2));
      bound->async_wait([this](boost::system::error_code ec) {
        if (!ec) io.stop();
      });
      client->revoke(lease, [this](std::exception_ptr, bool) { io.stop(); });
    } else {
      io.stop();
    }
  }

  RendezvousNodeConfig config;
  PostToLoop post_to_loop;
  RendezvousListener listener;
  EtcdKeys keys;
  NodeRecord self;
  std::atomic<bool> stopped{false};
  mutable std::mutex mu;
  std::string address;  // guarded by mu
  std::vector<std::string> job_status;  // guarded by mu: every node's status, newest read
  std::optional<std::string> status_json;  // I/O thread: this node's status not yet written
  bool gather_status = false;              // I/O thread

  // The I/O thread's. The io_context comes first so that it goes last: what it runs refers to
  // what follows only while the thread runs, and the thread is joined before anything goes.
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);
  std::unique_ptr<EtcdClient> client;
  std::unique_ptr<EtcdWatch> watch;        // the alive keys' deletes
  std::unique_ptr<EtcdWatch> round_watch;  // the round record
  std::unique_ptr<EtcdRoundCore> core;
  asio::steady_timer keep_alive_timer{io};
  asio::steady_timer decide_timer{io};
  asio::steady_timer stop_timer{io};
  std::int64_t lease = 0;
  // Node rank 0 gathering a closing job's stacks (await_stacks), and the timer of the nearest
  // wait's end.
  std::optional<StacksRead> stacks_read;
  asio::steady_timer stacks_timer{io};
  std::exception_ptr start_error;  // an EtcdError: etcd lost before the first read of the run's keys
  int created_watches = 0;
  bool loaded = false;                    // the core has read the run's state
  std::vector<EtcdEvent> round_events;    // the watches' events not applied yet
  std::vector<EtcdEvent> gone_events;
  bool wants_round = false;  // a request came before the first read of the run's keys
  bool gone = false;         // etcd was lost, or the rendezvous stops
  std::thread thread;
};

EtcdRendezvous::EtcdRendezvous(RendezvousNodeConfig config, PostToLoop post, RendezvousListener listener)
    : impl_(std::make_shared<Impl>(std::move(config), std::move(post), std::move(listener))) {
  Impl* m = impl_.get();
  asio::post(m->io, [m] { m->start(); });
  m->thread = quiet_thread([m] { m->io.run(); });
}

EtcdRendezvous::~EtcdRendezvous() { shutdown(std::chrono::milliseconds(0)); }

void EtcdRendezvous::request_round() {
  Impl* m = impl_.get();
  asio::post(m->io, [m] {
    m->wants_round = true;
    if (m->start_error) return m->answer_start_error();
    if (m->gone) return;
    if (!m->loaded) return;  // begins once the run's keys are read
    m->begin_request();
    m->decide();
  });
}

void EtcdRendezvous::publish_failure(int rendezvous_round, const RoundOutcome& failure) {
  Impl* m = impl_.get();
  asio::post(m->io, [m, rendezvous_round, failure] {
    if (!m->core) return;
    m->core->publish_failure(rendezvous_round, failure);
    m->decide();
  });
}

void EtcdRendezvous::publish_success(int rendezvous_round) {
  Impl* m = impl_.get();
  asio::post(m->io, [m, rendezvous_round] {
    if (!m->core) return;
    m->core->publish_success(rendezvous_round);
    m->decide();
  });
}

void EtcdRendezvous::shutdown(std::chrono::milliseconds) {
  Impl& m = *impl_;
  if (m.stopped.exchange(true)) return;
  asio::post(m.io, [p = &m] { p->stop_io(); });
  m.thread.join();
  // The thread is done: what its handlers referred to can go, before the io_context does.
  m.watch.reset();
  m.round_watch.reset();
  m.stacks_read.reset();
  m.client.reset();
  m.core.reset();
}

void EtcdRendezvous::publish_status(std::string status_json, bool gather) {
  Impl* m = impl_.get();
  if (m->stopped) return;
  asio::post(m->io, [m, status_json = std::move(status_json), gather]() mutable {
    m->status_json = std::move(status_json);
    m->gather_status = gather;
    m->write_status();
  });
}

void EtcdRendezvous::publish_stacks(int rendezvous_round, int node_rank, std::string record, std::chrono::milliseconds keep_for,
                                    std::function<void(bool)> done) {
  Impl* m = impl_.get();
  asio::post(m->io, [m, rendezvous_round, node_rank, record = std::move(record), keep_for, done = std::move(done)]() mutable {
    m->publish_stacks(rendezvous_round, node_rank, std::move(record), keep_for, std::move(done));
  });
}

void EtcdRendezvous::await_stacks(int rendezvous_round, int node_rank, std::chrono::milliseconds wait,
                                  std::function<void(std::optional<std::string>)> done) {
  Impl* m = impl_.get();
  asio::post(m->io, [m, rendezvous_round, node_rank, wait, done = std::move(done)]() mutable {
    m->await_stacks(rendezvous_round, node_rank, wait, std::move(done));
  });
}

std::vector<std::string> EtcdRendezvous::job_status() const {
  std::lock_guard lock(impl_->mu);
  return impl_->job_status;
}

std::string EtcdRendezvous::node_id() const { return impl_->self.node_id; }

std::string EtcdRendezvous::node_address() const {
  std::lock_guard lock(impl_->mu);
  return impl_->address;
}

std::string EtcdRendezvous::endpoints() const {
  std::string out;
  for (const auto& e : impl_->config.multi.etcd.endpoints) out += (out.empty() ? "" : ",") + e.str();
  return out;
}

}  // namespace crun
