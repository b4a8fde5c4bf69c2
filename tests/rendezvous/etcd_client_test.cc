// EtcdClient against a real etcd member on 127.0.0.1 (tests/support/etcd_cluster.h): transactions
// and compare-and-swap, counts, leases, watches (deletes only too), bytes that are not text,
// failover past a dead member, the bound on an unreachable cluster, and TLS refusals.
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <exception>

#include "rendezvous/etcd_client.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/loopback_socket.h"

using namespace crun;
using namespace crun::test;
using namespace std::chrono_literals;

namespace {

// Runs the loop until `done` holds (bound 20 s); REQUIRE it did.
template <typename F>
void run_until(boost::asio::io_context& io, F done) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    io.restart();
    io.run_for(10ms);
  }
  REQUIRE(done());
}

EtcdEndpoint endpoint_of(const std::string& text) {
  const auto colon = text.rfind(':');
  return {text.substr(0, colon), static_cast<std::uint16_t>(std::stoi(text.substr(colon + 1)))};
}

// A port on 127.0.0.1 that refuses connections (bound, never listened on, for the test's life).
struct DeadPort : LoopbackSocket {
  DeadPort() : LoopbackSocket(Mode::kBound) {}
};

// An error's one line ("" for none).
std::string what_of(const std::exception_ptr& error) {
  if (!error) return "";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  }
}

// How a request ended: done, or which EtcdError.
enum class Outcome { kDone, kUnreachable, kRejected, kOther };

Outcome outcome_of(const std::exception_ptr& error) {
  if (!error) return Outcome::kDone;
  try {
    std::rethrow_exception(error);
  } catch (const EtcdUnreachable&) {
    return Outcome::kUnreachable;
  } catch (const EtcdRejected&) {
    return Outcome::kRejected;
  } catch (...) {
    return Outcome::kOther;
  }
}

template <typename T>
struct Reply {
  bool answered = false;
  std::exception_ptr error;
  T value{};
  EtcdClient::Callback<T> callback() {
    return [this](std::exception_ptr e, T v) {
      answered = true;
      error = std::move(e);
      value = std::move(v);
    };
  }
  bool done() const { return answered; }
  bool ok() const { return answered && !error; }
  std::string what() const { return what_of(error); }
};

}  // namespace

TEST_CASE("compare-and-swap, counts and binary keys against a real etcd", "[etcd_client]") {
  EtcdCluster etcd(EtcdCluster::Loopback{});
  boost::asio::io_context io;
  EtcdClientOptions o;
  o.endpoints = {endpoint_of(etcd.endpoint(0))};
  EtcdClient client(io, o);

  const std::string key = std::string("/t/bin\0\xff/", 8) + "k";
  const std::string value = std::string("v\0\x01\xfe", 4);
  const auto create = [&](const std::string& v) {
    EtcdTxn t;
    EtcdCompare c;
    c.key = key;
    c.target = EtcdCompare::Target::kCreateRevision;
    c.revision = 0;
    t.compare.push_back(c);
    t.success.push_back(EtcdOp::put(key, v));
    t.failure.push_back(EtcdOp::range(key));
    return t;
  };
  Reply<EtcdTxnResult> first, second;
  client.txn(create(value), first.callback());
  run_until(io, [&] { return first.done(); });
  REQUIRE(first.ok());
  CHECK(first.value.succeeded);

  client.txn(create("other"), second.callback());
  run_until(io, [&] { return second.done(); });
  REQUIRE(second.ok());
  CHECK_FALSE(second.value.succeeded);  // it exists: the failure branch read it
  REQUIRE(second.value.kvs.size() == 1);
  CHECK(second.value.kvs[0].key == key);
  CHECK(second.value.kvs[0].value == value);  // bytes, not text
  CHECK(second.value.kvs[0].mod_revision == first.value.revision);

  // A put and a count of the prefix in one transaction.
  EtcdTxn t;
  t.success.push_back(EtcdOp::put("/t/c/1", "a"));
  t.success.push_back(EtcdOp::put("/t/c/2", "b"));
  EtcdOp count = EtcdOp::range("/t/c/", etcd_prefix_end("/t/c/"));
  count.count_only = true;
  t.success.push_back(count);
  Reply<EtcdTxnResult> counted;
  client.txn(std::move(t), counted.callback());
  run_until(io, [&] { return counted.done(); });
  REQUIRE(counted.ok());
  REQUIRE(counted.value.counts.size() == 1);
  CHECK(counted.value.counts[0] == 2);
  CHECK(counted.value.kvs.empty());
}

TEST_CASE("a lease's keys go when it is revoked; a watch sees them go, a deletes-only watch only that",
          "[etcd_client]") {
  EtcdCluster etcd(EtcdCluster::Loopback{});
  boost::asio::io_context io;
  EtcdClientOptions o;
  o.endpoints = {endpoint_of(etcd.endpoint(0))};
  EtcdClient client(io, o);

  Reply<EtcdLease> lease;
  client.grant(5, lease.callback());
  run_until(io, [&] { return lease.done(); });
  REQUIRE(lease.ok());
  REQUIRE(lease.value.id != 0);
  CHECK(lease.value.ttl_seconds == 5);

  Reply<EtcdRangeResult> start;
  client.range("/w/", etcd_prefix_end("/w/"), start.callback());
  run_until(io, [&] { return start.done(); });
  std::vector<EtcdEvent> all, deletes;
  auto w1 = client.watch("/w/", etcd_prefix_end("/w/"), start.value.revision + 1, false,
                         [&](std::int64_t, std::vector<EtcdEvent> e) { all.insert(all.end(), e.begin(), e.end()); },
                         [](std::exception_ptr e) { FAIL(what_of(e)); });
  auto w2 = client.watch("/w/", etcd_prefix_end("/w/"), start.value.revision + 1, true,
                         [&](std::int64_t, std::vector<EtcdEvent> e) { deletes.insert(deletes.end(), e.begin(), e.end()); },
                         [](std::exception_ptr e) { FAIL(what_of(e)); });
  EtcdTxn put;
  put.success.push_back(EtcdOp::put("/w/alive", "x", lease.value.id));
  Reply<EtcdTxnResult> put_reply;
  client.txn(std::move(put), put_reply.callback());
  run_until(io, [&] { return all.size() == 1; });
  CHECK_FALSE(all[0].deleted);
  CHECK(all[0].kv.value == "x");
  CHECK(all[0].kv.lease == lease.value.id);

  Reply<EtcdLease> renewed;
  client.keep_alive(lease.value.id, renewed.callback());
  run_until(io, [&] { return renewed.done(); });
  REQUIRE(renewed.ok());
  CHECK(renewed.value.ttl_seconds > 0);

  Reply<bool> revoked;
  client.revoke(lease.value.id, revoked.callback());
  run_until(io, [&] { return all.size() == 2 && deletes.size() == 1; });
  CHECK(all[1].deleted);
  CHECK(all[1].kv.key == "/w/alive");
  CHECK(deletes[0].deleted);
  CHECK(deletes[0].kv.key == "/w/alive");

  Reply<EtcdLease> after;
  client.keep_alive(lease.value.id, after.callback());
  run_until(io, [&] { return after.done(); });
  REQUIRE(after.ok());
  CHECK(after.value.ttl_seconds == 0);  // the lease is gone
}

TEST_CASE("a dead member first: the client moves on to the next; none alive: unreachable, naming them",
          "[etcd_client]") {
  EtcdCluster etcd(EtcdCluster::Loopback{});
  DeadPort dead;
  boost::asio::io_context io;
  {
    EtcdClientOptions o;
    o.endpoints = {{"127.0.0.1", dead.port}, endpoint_of(etcd.endpoint(0))};
    EtcdClient client(io, o);
    Reply<EtcdRangeResult> r;
    client.range("/x", "", r.callback());
    run_until(io, [&] { return r.done(); });
    CHECK(r.ok());
    CHECK(r.value.revision > 0);
  }
  {
    DeadPort dead2;
    EtcdClientOptions o;
    o.endpoints = {{"127.0.0.1", dead.port}, {"127.0.0.1", dead2.port}};
    o.give_up_after = 500ms;
    EtcdClient client(io, o);
    Reply<EtcdRangeResult> r;
    const auto t0 = std::chrono::steady_clock::now();
    client.range("/x", "", r.callback());
    run_until(io, [&] { return r.done(); });
    CHECK(outcome_of(r.error) == Outcome::kUnreachable);
    CHECK_THAT(r.what(), Catch::Contains("127.0.0.1:" + std::to_string(dead.port)) &&
                                      Catch::Contains("127.0.0.1:" + std::to_string(dead2.port)));
    CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  }
}

TEST_CASE("TLS: a client without a certificate, or trusting another CA, is rejected", "[etcd_client]") {
  EtcdCluster etcd(EtcdCluster::Loopback{}, EtcdCluster::Tls::on);
  boost::asio::io_context io;
  const auto& files = etcd.tls();
  struct Case {
    std::string ca, cert, key;
    Outcome expect;
  };
  for (const Case& c : {Case{files.ca, files.cert, files.key, Outcome::kDone},
                        Case{files.other_ca, files.cert, files.key, Outcome::kRejected},
                        Case{files.ca, "", "", Outcome::kRejected}}) {
    EtcdClientOptions o;
    o.endpoints = {endpoint_of(etcd.endpoint(0))};
    o.tls = true;
    o.cacert = c.ca;
    o.cert = c.cert;
    o.key = c.key;
    EtcdClient client(io, o);
    Reply<EtcdRangeResult> r;
    client.range("/x", "", r.callback());
    run_until(io, [&] { return r.done(); });
    INFO(r.what());
    CHECK(outcome_of(r.error) == c.expect);
  }
  EtcdClientOptions missing;
  missing.endpoints = {endpoint_of(etcd.endpoint(0))};
  missing.tls = true;
  missing.cacert = "/nonexistent/ca.pem";
  CHECK_THROWS_WITH(EtcdClient(io, missing), Catch::Contains("/nonexistent/ca.pem"));
}
