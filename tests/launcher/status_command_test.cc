// `crun status` as a real process: bad usage, an agent that refuses, one that never answers, one
// that answers something else than a /status document (a hand-made HTTP peer on 127.0.0.1).
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <thread>

#include "agent/node_status.h"
#include "agent/stack_groups.h"
#include "tests/support/child_process.h"
#include "tests/support/loopback_socket.h"

using crun::test::ChildProcess;
using crun::test::LoopbackSocket;
using namespace std::chrono_literals;

namespace {

struct Result {
  int code = -1;
  std::string out, err;
};

Result status(std::vector<std::string> args) {
  args.insert(args.begin(), {CRUN_BINARY, "status"});
  ChildProcess p(args);
  const auto code = p.wait_exit(30s);
  REQUIRE(code.has_value());
  return {*code, p.out(), p.err()};
}

bool one_line(const std::string& text) { return !text.empty() && text.find('\n') == text.size() - 1; }

// Accepts one connection on `listening` (waiting 30 s at most), reads the request's head and
// answers `body` with 200.
std::thread answer_once(int listening, std::string body) {
  return std::thread([listening, body = std::move(body)] {
    pollfd ready{listening, POLLIN, 0};
    if (::poll(&ready, 1, 30'000) != 1) return;
    const int c = ::accept(listening, nullptr, nullptr);
    if (c < 0) return;
    std::string head;
    char buf[1024];
    while (head.find("\r\n\r\n") == std::string::npos) {
      const ssize_t n = ::read(c, buf, sizeof buf);
      if (n <= 0) break;
      head.append(buf, static_cast<std::size_t>(n));
    }
    const std::string reply = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    (void)!::write(c, reply.data(), reply.size());
    ::close(c);
  });
}

}  // namespace

TEST_CASE("crun status: bad usage is exit 2 and one line on stderr", "[status_cli]") {
  for (const auto& args : std::vector<std::vector<std::string>>{{},
                                                                {"a:1", "b:2"},
                                                                {"a:1", "--bogus"},
                                                                {"a:1", "--timeout"},
                                                                {"a:1", "--timeout", "0"},
                                                                {"nonsense"},
                                                                {"https://127.0.0.1:1"},
                                                                {"http://127.0.0.1:0"}}) {
    const auto r = status(args);
    INFO(r.err);
    CHECK(r.code == 2);
    CHECK(one_line(r.err));
    CHECK(r.err.rfind("crun status: ", 0) == 0);
    CHECK(r.out.empty());
  }
  const auto help = status({"--help"});
  CHECK(help.code == 0);
  CHECK_THAT(help.out, Catch::Contains("--timeout SECONDS") && Catch::Contains("--json"));
}

TEST_CASE("crun status: an agent that cannot be read is exit 1 and one line naming it", "[status_cli]") {
  {
    LoopbackSocket refusing(LoopbackSocket::Mode::kBound);
    const std::string url = "http://127.0.0.1:" + std::to_string(refusing.port);
    const auto r = status({url});
    INFO(r.err);
    CHECK(r.code == 1);
    CHECK(one_line(r.err));
    CHECK_THAT(r.err, Catch::Contains("cannot read " + url));
  }
  {
    LoopbackSocket silent(LoopbackSocket::Mode::kListening);  // accepts (the backlog), never answers
    const auto started = std::chrono::steady_clock::now();
    const auto r = status({"127.0.0.1:" + std::to_string(silent.port), "--timeout", "0.5"});
    INFO(r.err);
    CHECK(r.code == 1);
    CHECK(one_line(r.err));
    CHECK_THAT(r.err, Catch::Contains("no answer within 0.50 s"));
    CHECK(std::chrono::steady_clock::now() - started < 10s);
  }
}

TEST_CASE("crun status: an answer that is not a /status document is exit 1; --json prints any JSON", "[status_cli]") {
  LoopbackSocket agent(LoopbackSocket::Mode::kListening);
  const std::string url = "127.0.0.1:" + std::to_string(agent.port);
  const std::string doc = R"({"hello":"world"})";
  auto peer = answer_once(agent.fd, doc);
  const auto tables = status({url});
  peer.join();
  INFO(tables.err);
  CHECK(tables.code == 1);
  CHECK(one_line(tables.err));
  CHECK_THAT(tables.err, Catch::Contains("not a crun /status document"));

  peer = answer_once(agent.fd, doc);
  const auto raw = status({"--json", url});
  peer.join();
  CHECK(raw.code == 0);
  CHECK(raw.out == doc + "\n");
}

TEST_CASE("crun status: node rank 0's excluded nodes: who, why, until when, how many times", "[status_cli]") {
  LoopbackSocket agent(LoopbackSocket::Mode::kListening);
  const std::string url = "127.0.0.1:" + std::to_string(agent.port);
  const std::string node =
      R"({"run_id":"job","role":"default","hostname":"h0","node_id":"h0:1:a","addr":"10.0.0.1","node_rank":0,"nodes":2,)"
      R"("world_size":2,"rendezvous_round":3,"restart_count":2,"max_restarts":5,"state":"running","health":"",)"
      R"("workers":[],"last_failure":null,"updated_unix":1795659216.5,"excluded":"",)"
      R"("excluded_nodes":[{"node_id":"h2:7:b","hostname":"h2","addr":"10.0.0.3","reason":"the root cause 2 times",)"
      R"("times":1,"until_unix":1795659816.0}],"exclusions_total":1})";
  const std::string doc = R"({"node":)" + node + R"(,"job":{"nodes":[)" + node + "]}}";
  auto peer = answer_once(agent.fd, doc);
  const auto tables = status({url});
  peer.join();
  INFO(tables.err);
  CHECK(tables.code == 0);
  CHECK_THAT(tables.out, Catch::Contains("excluded nodes (1 exclusion(s) so far):"));
  CHECK_THAT(tables.out, Catch::Contains("h2") && Catch::Contains("10.0.0.3") && Catch::Contains("h2:7:b") &&
                             Catch::Contains("2026-11-26T02:23:36Z") && Catch::Contains("the root cause 2 times"));
}

namespace {
// Node `node_rank`'s record with its 4 ranks' grouped stacks (rank `odd` elsewhere, -1: none).
crun::NodeStatus node_with_stacks(int node_rank, int odd) {
  crun::NodeStatus s;
  s.run_id = "job";
  s.hostname = "h" + std::to_string(node_rank);
  s.node_id = "h" + std::to_string(node_rank) + ":1:a";
  s.node_rank = node_rank;
  s.nodes = 2;
  s.state = "failed";
  s.updated_unix = 1795659216.5;
  std::vector<crun::RankStack> stacks;
  for (int r = node_rank * 4; r < node_rank * 4 + 4; ++r) {
    crun::RankStack rank;
    rank.rank = r;
    rank.python_threads = {{r == odd ? "stuck_here (train.py:12)" : "all_reduce (train.py:40)", "main (train.py:80)"}};
    stacks.push_back(rank);
  }
  s.stack_groups = crun::group_stacks(stacks, 0);
  return s;
}
}  // namespace

TEST_CASE("crun status --stacks: node rank 0's merged groups, each with its frames; in the tables too", "[status_cli]") {
  LoopbackSocket agent(LoopbackSocket::Mode::kListening);
  const std::string url = "127.0.0.1:" + std::to_string(agent.port);
  const std::string doc = crun::job_json(node_with_stacks(0, -1), {node_with_stacks(1, 6).to_json()});
  auto peer = answer_once(agent.fd, doc);
  const auto stacks = status({url, "--stacks"});
  peer.join();
  INFO(stacks.err);
  CHECK(stacks.code == 0);
  CHECK(stacks.out ==
        "stacks before the kill (attempt 0), grouped across 8 rank(s):\n"
        "\n  ranks 0-5, 7: all_reduce \xe2\x86\x90 main\n"
        "      all_reduce (train.py:40)\n"
        "      main (train.py:80)\n"
        "\n  rank 6 (the odd one out): stuck_here \xe2\x86\x90 main\n"
        "      stuck_here (train.py:12)\n"
        "      main (train.py:80)\n");

  peer = answer_once(agent.fd, doc);
  const auto tables = status({url});
  peer.join();
  CHECK(tables.code == 0);
  CHECK_THAT(tables.out, Catch::Contains("stacks before the kill, grouped across 8 rank(s):\n"
                                         "  ranks 0-5, 7: all_reduce \xe2\x86\x90 main\n"
                                         "  rank 6 (the odd one out): stuck_here \xe2\x86\x90 main\n"));

  peer = answer_once(agent.fd, doc);
  const auto raw = status({url, "--stacks", "--json"});
  peer.join();
  CHECK(raw.code == 0);
  const auto back = crun::StackGroups::from_json(raw.out);
  REQUIRE(back);
  CHECK(back->odd_one_out()->ranks_text() == "rank 6");

  // None captured: one line, exit 0; groups that do not read back: exit 1, one line.
  crun::NodeStatus plain = node_with_stacks(0, -1);
  plain.stack_groups = {};
  peer = answer_once(agent.fd, crun::job_json(plain, {}));
  const auto none = status({url, "--stacks"});
  peer.join();
  CHECK(none.code == 0);
  CHECK(none.out == "no stacks captured\n");
  const std::string merged =
      crun::merge_stack_groups({node_with_stacks(0, -1).stack_groups, node_with_stacks(1, 6).stack_groups}).to_json();
  const auto job_groups = doc.find(merged);
  REQUIRE(job_groups != std::string::npos);
  for (const auto at : {job_groups, doc.find("\"signature\":\"")}) {  // the job's merge; a node's record
    std::string bad = doc;
    bad.replace(bad.find("\"signature\":\"", at) + 13, 3, "XYZ");
    peer = answer_once(agent.fd, bad);
    const auto refused = status({url, "--stacks"});
    peer.join();
    INFO(refused.err);
    CHECK(refused.code == 1);
    CHECK(one_line(refused.err));
    CHECK_THAT(refused.err, Catch::Contains("not a crun /status document"));
  }
}
