// State replication between agents (agent/replica_*.h): the wire format's decoder on malformed
// and oversized input, and real sockets on one loop: a set pushed and kept, the newest only,
// a wrong token refused with nothing stored, a fetch from several peers picking the newest; which ranks a start fetches.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "agent/replica_client.h"
#include "agent/replica_protocol.h"
#include "agent/replica_server.h"
#include "agent/replica_store.h"
#include "agent/state_persister.h"
#include "agent/state_replication.h"
#include "tests/support/child_process.h"
#include "tests/support/state_digest.h"
#include "tests/support/temp_dir.h"

namespace crun {
namespace {

namespace fs = std::filesystem;
using replica::ReplicaDecoder;

struct Seen {
  std::string log;
  std::string data;
};

replica::ReplicaEvents recorder(Seen& s) {
  replica::ReplicaEvents ev;
  ev.hello = [&s](std::string_view t) { s.log += "hello(" + std::string(t) + ")"; };
  ev.set_begin = [&s](int r, std::uint64_t q, std::uint32_t f, std::uint64_t b) {
    s.log += "set(" + std::to_string(r) + "," + std::to_string(q) + "," + std::to_string(f) + "," + std::to_string(b) + ")";
  };
  ev.file_begin = [&s](std::string_view n, std::uint64_t z) { s.log += "file(" + std::string(n) + "," + std::to_string(z) + ")"; };
  ev.file_data = [&s](const char* d, std::size_t n) { s.data.append(d, n); };
  ev.file_end = [&s] { s.log += "eof"; };
  ev.set_end = [&s] { s.log += "end"; };
  ev.query = [&s](int r) { s.log += "query(" + std::to_string(r) + ")"; };
  ev.get = [&s](int r) { s.log += "get(" + std::to_string(r) + ")"; };
  return ev;
}

}  // namespace


TEST_CASE("a hello, a set of two files, a query and a get decode byte by byte as at once", "[replica_protocol]") {
  std::string in = replica::encode_hello("tok") + replica::encode_set(3, 7, 2, 5) + replica::encode_file("a", 2) + "xy" +
                   replica::encode_file("b.pt", 3) + "abc" + replica::encode_query(3) + replica::encode_get(4);
  const std::string want = "hello(tok)set(3,7,2,5)file(a,2)eoffile(b.pt,3)eofendquery(3)get(4)";
  Seen whole;
  ReplicaDecoder d(ReplicaDecoder::Side::kServer, recorder(whole), 100);
  REQUIRE(d.feed(in.data(), in.size()));
  CHECK(whole.log == want);
  CHECK(whole.data == "xyabc");
  Seen bytes;
  ReplicaDecoder e(ReplicaDecoder::Side::kServer, recorder(bytes), 100);
  for (char c : in) REQUIRE(e.feed(&c, 1));
  CHECK(bytes.log == want);
  CHECK(bytes.data == "xyabc");
}

TEST_CASE("malformed and oversized input is refused with one line and nothing after it", "[replica_protocol]") {
  const std::string hello = replica::encode_hello("");
  struct Case {
    std::string input;
    std::string why;
  };
  std::string long_token = "H";
  long_token += "CRS1";
  long_token += std::string("\xff\xff", 2);
  std::string long_name = hello + replica::encode_set(0, 1, 1, 1);
  long_name += "F";
  long_name += std::string("\x00\x01", 2);  // a 256-byte name
  const Case cases[] = {
      {replica::encode_query(1), "the first message is not a hello"},
      {"HCRS2" + std::string("\0\0", 2), "bad magic"},
      {hello + hello, "a second hello"},
      {hello + "Z", "unexpected message kind"},
      {hello + replica::encode_set(0, 1, 1, 101), "over the bound of 100"},
      {hello + replica::encode_set(0, 1, 5000, 1), "more than 4096 files"},
      {hello + replica::encode_set(0, 1, 1, 4) + replica::encode_file("../x", 4), "not a plain name"},
      {hello + replica::encode_set(0, 1, 1, 4) + replica::encode_file(".ckpt.tmp", 4), "not a plain name"},
      {hello + replica::encode_set(0, 1, 1, 4) + replica::encode_file("a", 5), "larger than its declared total"},
      {hello + replica::encode_set(0, 1, 1, 4) + replica::encode_file("a", 3), "smaller than its declared total"},
      {hello + replica::encode_set(0, 1, 2, 4) + replica::encode_file("a", 0) + replica::encode_query(1), "a set's file expected"},
      {hello + replica::encode_file("a", 0), "a file outside a set"},
      {hello + replica::encode_set(-1, 1, 0, 0), "a rank out of range"},
      {hello + replica::encode_set(0, 1, 0, 3), "an empty set declares bytes"},
      {hello + replica::encode_have(0, 1), "unexpected message kind"},
      {long_token, "a token longer than 4096 bytes"},
      {long_name, "a file name longer than 255 bytes"},
  };
  for (const auto& c : cases) {
    Seen s;
    ReplicaDecoder d(ReplicaDecoder::Side::kServer, recorder(s), 100);
    CAPTURE(c.input);
    CHECK_FALSE(d.feed(c.input.data(), c.input.size()));
    CHECK(d.error().find(c.why) != std::string::npos);
    CHECK(d.error().find('\n') == std::string::npos);
    const std::string more = replica::encode_query(2);
    CHECK_FALSE(d.feed(more.data(), more.size()));
    CHECK(s.log.find("query(2)") == std::string::npos);
  }
}

namespace {

void write_file(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

template <typename Pred>
bool run_until(boost::asio::io_context& io, Pred pred, std::chrono::milliseconds bound = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    io.run_one_for(std::chrono::milliseconds(20));
  }
  return true;
}

// A node's own committed files: rank -> (sequence, files in `dir`).
struct FakeCommitted {
  fs::path dir;
  std::map<int, std::pair<std::uint64_t, std::vector<std::string>>> sets;
  SetSource source() {
    return SetSource{[this](int r) { return sets.count(r) ? sets[r].first : 0; },
                     [this](int r) -> std::optional<OutgoingSet> {
                       if (!sets.count(r)) return std::nullopt;
                       std::vector<std::pair<std::string, fs::path>> files;
                       for (const auto& n : sets[r].second) files.emplace_back(n, dir / ("rank-" + std::to_string(r)) / n);
                       return open_set(r, sets[r].first, files);
                     }};
  }
  // As a worker commits: a new file renamed over the name (a set already opened keeps the old one).
  void commit(int rank, std::uint64_t seq, const std::string& name, const std::string& text) {
    const fs::path p = dir / ("rank-" + std::to_string(rank)) / name;
    write_file(p.parent_path() / ("." + name + ".tmp"), text);
    fs::rename(p.parent_path() / ("." + name + ".tmp"), p);
    auto& s = sets[rank];
    s.first = seq;
    if (std::find(s.second.begin(), s.second.end(), name) == s.second.end()) s.second.push_back(name);
  }
};

// A raw client: connects, writes `bytes`, returns what the server answered until it closed (or 2 s).
std::string raw_exchange(std::uint16_t port, const std::string& bytes, bool* closed) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string got;
  char buf[4096];
  *closed = false;
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) {
      *closed = true;
      break;
    }
    if (n < 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return got;
}

}  // namespace

TEST_CASE("a pushed set is kept, the newest only, and acknowledged", "[replica_link]") {
  test::TempDir tmp("crun-replica");
  boost::asio::io_context io;
  ReplicaStore store(tmp.path / "b" / "replicas");
  FakeCommitted none{tmp.path / "b-own", {}};
  ReplicaServer server(io, "127.0.0.1", {"secret", 64 << 20, 8}, store, none.source());

  FakeCommitted mine{tmp.path / "a", {}};
  mine.commit(0, 1, "ckpt.pt", "step 1");
  ReplicaPusher pusher(io, {"secret", 64 << 20, tmp.path / "a" / "replicas"}, [&](int r) { return mine.source().snapshot(r); });
  std::vector<std::uint64_t> acked;
  pusher.on_acked([&](int, std::uint64_t seq, std::uint64_t) { acked.push_back(seq); });
  pusher.retarget(ReplicaPeer{"127.0.0.1", server.port()}, {0});
  REQUIRE(run_until(io, [&] { return !acked.empty(); }));
  auto held = store.newest(0);
  REQUIRE(held);
  CHECK(held->sequence == 1);
  CHECK(read_file(held->dir / "ckpt.pt") == "step 1");

  // Changes while a send runs coalesce; the newest set is what stays.
  for (std::uint64_t s = 2; s <= 6; ++s) {
    mine.commit(0, s, "ckpt.pt", "step " + std::to_string(s) + std::string(8 << 20, 'x'));
    pusher.changed(0);
  }
  REQUIRE(run_until(io, [&] { return !acked.empty() && acked.back() == 6 && !pusher.busy(); }));
  CHECK(acked.size() < 6);  // 1, 2 (sent at once), then 6: 3..5 were overtaken while 2 was on its way
  held = store.newest(0);
  CHECK(held->sequence == 6);
  CHECK(read_file(held->dir / "ckpt.pt").substr(0, 6) == "step 6");
  std::size_t entries = 0;
  for (const auto& e : fs::directory_iterator(store.root())) entries += e.path().filename().string().rfind("rank-0.", 0) == 0;
  CHECK(entries == 1);
}

TEST_CASE("a wrong token or a malformed message closes the connection; nothing is stored", "[replica_link]") {
  test::TempDir tmp("crun-replica");
  boost::asio::io_context io;
  ReplicaStore store(tmp.path / "replicas");
  FakeCommitted own{tmp.path / "own", {}};
  own.commit(5, 3, "w", "weights");
  ReplicaServer server(io, "127.0.0.1", {"secret", 1 << 20, 8}, store, own.source());
  const std::uint16_t port = server.port();
  std::thread loop([&] { io.run_for(std::chrono::seconds(5)); });

  const std::string push = replica::encode_set(1, 9, 1, 3) + replica::encode_file("w", 3) + "abc" + replica::encode_get(5);
  bool closed = false;
  CHECK(raw_exchange(port, replica::encode_hello("wrong!") + push, &closed).empty());
  CHECK(closed);
  CHECK(raw_exchange(port, push, &closed).empty());  // no hello at all
  CHECK(closed);
  CHECK(raw_exchange(port, replica::encode_hello("secret") + replica::encode_set(1, 9, 1, 2 << 20), &closed).empty());
  CHECK(closed);  // over --state-max-bytes
  // The right token: the set is taken and acknowledged, and a get answers with own committed file.
  const std::string answer = raw_exchange(port, replica::encode_hello("secret") + push, &closed);
  CHECK(answer.substr(0, 13) == replica::encode_ack(1, 9));
  CHECK(answer.find("weights") != std::string::npos);
  io.stop();
  loop.join();
  auto held = store.newest(1);
  REQUIRE(held);
  CHECK(held->sequence == 9);
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(store.root())) ++entries;
  CHECK(entries == 1);  // the refused connections left nothing behind
}

TEST_CASE("a fetch asks every peer and takes the newest set of each rank", "[replica_link]") {
  test::TempDir tmp("crun-replica");
  boost::asio::io_context io;
  ReplicaStore store_b(tmp.path / "b" / "replicas"), store_c(tmp.path / "c" / "replicas");
  FakeCommitted b{tmp.path / "b" / "own", {}}, c{tmp.path / "c" / "own", {}};
  b.commit(2, 4, "ckpt", "b's rank 2 at 4");
  c.commit(2, 5, "ckpt", "c's rank 2 at 5");
  c.commit(3, 1, "ckpt", "c's rank 3");
  ReplicaServer sb(io, "127.0.0.1", {"", 1 << 20, 8}, store_b, b.source());
  ReplicaServer sc(io, "127.0.0.1", {"", 1 << 20, 8}, store_c, c.source());
  std::optional<std::map<int, FetchedSet>> got;
  std::string error;
  fs::create_directories(tmp.path / "a" / "replicas");
  auto h = fetch_replicas(io, {{"127.0.0.1", sb.port()}, {"127.0.0.1", sc.port()}, {"127.0.0.1", 1}}, {2, 3, 4},
                          {"", 1 << 20, tmp.path / "a" / "replicas"}, std::chrono::seconds(5),
                          [&](std::map<int, FetchedSet> s, std::string e) {
                            got = std::move(s);
                            error = std::move(e);
                          });
  REQUIRE(run_until(io, [&] { return got.has_value(); }));
  CHECK(error.find("127.0.0.1:1") != std::string::npos);  // the unreachable peer, named
  REQUIRE(got->count(2));
  CHECK(got->at(2).sequence == 5);
  CHECK(read_file(got->at(2).dir / "ckpt") == "c's rank 2 at 5");
  REQUIRE(got->count(3));
  CHECK(got->at(3).bytes == 10);
  CHECK_FALSE(got->count(4));
}

}  // namespace crun

namespace crun {

TEST_CASE("the persister copies the newest set of each rank whole, and replaces it whole", "[state_persist]") {
  test::TempDir tmp("crun-persist");
  write_file(tmp.path / "src" / "a", "first a");
  write_file(tmp.path / "src" / "b", std::string(9 << 20, 'b'));  // more than one copy chunk
  {
    StatePersister p(tmp.path / "persist");
    auto set = open_set(3, 7, {{"a", tmp.path / "src" / "a"}, {"b", tmp.path / "src" / "b"}});
    REQUIRE(set);
    p.changed(std::move(*set));
    p.drain();
    CHECK(read_file(tmp.path / "persist" / "rank-3" / "a") == "first a");
    CHECK(fs::file_size(tmp.path / "persist" / "rank-3" / "b") == (9u << 20));
    CHECK(read_file(tmp.path / "persist" / "rank-3" / ".sequence") == "7\n");
    write_file(tmp.path / "src" / "c", "only c");
    auto newer = open_set(3, 8, {{"c", tmp.path / "src" / "c"}});
    p.changed(std::move(*newer));
  }  // the destructor copies what waits
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(tmp.path / "persist" / "rank-3")) names.insert(e.path().filename().string());
  CHECK(names == std::set<std::string>{".sequence", "c"});
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(tmp.path / "persist")) ++entries;
  CHECK(entries == 1);  // no temporary directory left behind
}

TEST_CASE("crun --state-persist-dir: each rank's last committed state is in DIR when the job ends", "[state_persist]") {
  test::TempDir tmp("crun-persist");
  test::ChildProcess p({CRUN_BIN, "--standalone", "--nproc-per-node", "2", "--state-persist-dir", (tmp.path / "keep").string(),
                        CRUN_STATE_WORKER, "--steps", "30", "--state-bytes", "100000"});
  REQUIRE(p.wait_exit(std::chrono::seconds(60)) == 0);
  for (int r = 0; r < 2; ++r) {
    const std::string state = read_file(tmp.path / "keep" / ("rank-" + std::to_string(r)) / "state");
    char want[64];
    std::snprintf(want, sizeof want, "%d 30 %llx\n", r, static_cast<unsigned long long>(test::state_digest(r, 30)));
    CHECK(state.substr(0, state.find('\n') + 1) == want);
    CHECK(state.size() == std::string(want).size() + 100000);
  }
}

}  // namespace crun

namespace crun {

TEST_CASE("connections past the server's bound are closed at once; those within it are served", "[replica_link]") {
  test::TempDir tmp("crun-replica");
  boost::asio::io_context io;
  ReplicaStore store(tmp.path / "replicas");
  FakeCommitted own{tmp.path / "own", {}};
  ReplicaServer server(io, "127.0.0.1", {"", 1 << 20, 2}, store, own.source());
  auto connect = [&] {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(server.port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    return fd;
  };
  const int first = connect(), second = connect();
  REQUIRE(run_until(io, [&] { return server.connections() == 2; }));
  const int third = connect();
  char byte;
  timeval tv{5, 0};
  ::setsockopt(third, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::thread loop([&] { io.run_for(std::chrono::seconds(2)); });
  CHECK(::recv(third, &byte, 1, 0) == 0);  // closed by the server, nothing sent
  loop.join();
  CHECK(server.connections() == 2);
  ::close(third);
  // One within the bound still answers.
  const std::string hello = replica::encode_hello("") + replica::encode_query(7);
  REQUIRE(::send(first, hello.data(), hello.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(hello.size()));
  std::string got(13, '\0');
  std::thread again([&] { io.restart(); io.run_for(std::chrono::seconds(2)); });
  ::setsockopt(first, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  CHECK(::recv(first, got.data(), got.size(), MSG_WAITALL) == 13);
  again.join();
  CHECK(got == replica::encode_have(7, 0));
  ::close(first);
  ::close(second);
}

}  // namespace crun

TEST_CASE("a start fetches only the ranks this node did not run in its previous round", "[replica_fetch_rule]") {
  CHECK(crun::ranks_to_fetch(0, {}, {0, 1}).empty());                                 // the job's first round
  CHECK(crun::ranks_to_fetch(3, {0, 1}, {0, 1}).empty());                             // a restart, same ranks: nothing,
  CHECK(crun::ranks_to_fetch(3, {2, 3}, {0, 1}) == std::vector<int>{0, 1});           // even with nothing committed
  CHECK(crun::ranks_to_fetch(3, {0, 1}, {1, 2}) == std::vector<int>{2});              // one rank moved here
  CHECK(crun::ranks_to_fetch(3, {}, {4, 5}) == std::vector<int>{4, 5});               // an agent new to the job
}
