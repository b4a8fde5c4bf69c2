// endpoint_traffic: hostile traffic at a crun store endpoint, for the fault tests.
//
//   endpoint_traffic HOST PORT MODE COUNT
//     garbage    COUNT connections send 4 KiB of random bytes instead of a handshake, and COUNT
//                more complete the handshake, then send 64 random frames of up to 4 KiB each
//     slow       COUNT connections send a valid handshake one byte every 100 ms, then a set
//                request one byte every 100 ms (slowloris)
//     oversized  COUNT connections complete the handshake, then send a frame header declaring
//                a 65 MiB body and, once the server has read every header, one byte of each body
//   Then it proves the server still serves: a fresh connection's handshake and ping, which the
//   server's single event loop answers only after it read what arrived before. It prints
//   "ready sent=<bytes>" and keeps its connections open (slow: dripping) until SIGTERM or 60 s.
//   Exit: 0, or 1 with one line on stderr when the server stops serving.
//
// Bounded: at most 1024 connections, every wait has a deadline, a fixed seed (printed).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
volatile sig_atomic_t g_stop = 0;

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "endpoint_traffic: %s\n", why.c_str());
  std::exit(1);
}

void put_u32(std::string& s, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u16(std::string& s, std::uint16_t v) {
  s.push_back(static_cast<char>(v & 0xff));
  s.push_back(static_cast<char>(v >> 8));
}

std::string handshake() {
  std::string s;
  put_u32(s, 0x54535243);  // "CRST"
  put_u16(s, 1);           // version
  put_u16(s, 0);           // no token
  return s;
}

// One request frame: body_len | op | request id | payload.
std::string frame(std::uint8_t op, std::uint32_t id, const std::string& payload) {
  std::string s;
  put_u32(s, static_cast<std::uint32_t>(5 + payload.size()));
  s.push_back(static_cast<char>(op));
  put_u32(s, id);
  return s + payload;
}

int connect_to(const sockaddr_in& addr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) die(std::string("socket: ") + std::strerror(errno));
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    die(std::string("connect: ") + std::strerror(errno));
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// Sends everything, or fails (the peer may close a garbage connection: that is not an error).
bool send_all(int fd, const std::string& data) {
  std::size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<std::size_t>(n);
  }
  return true;
}

// Reads exactly `n` bytes within `bound`; false on EOF, error or timeout.
bool recv_exact(int fd, std::size_t n, std::chrono::milliseconds bound) {
  const auto deadline = Clock::now() + bound;
  char buf[256];
  while (n > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) != 1) return false;
    const ssize_t r = ::recv(fd, buf, std::min(n, sizeof buf), 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

// Handshake and one ping on a fresh connection: the server read everything sent before.
void prove_serving(const sockaddr_in& addr) {
  const int fd = connect_to(addr);
  if (!send_all(fd, handshake()) || !recv_exact(fd, 8, std::chrono::seconds(10))) die("no handshake answer");
  // reply = body_len u32 | status u8 | id u32 (ping has no payload)
  if (!send_all(fd, frame(16, 1, "")) || !recv_exact(fd, 9, std::chrono::seconds(10))) die("no ping answer");
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) die("usage: endpoint_traffic HOST PORT garbage|slow|oversized COUNT");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(std::atoi(argv[2])));
  if (::inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1) die(std::string("bad address ") + argv[1]);
  const std::string mode = argv[3];
  const int count = std::atoi(argv[4]);
  if (count < 1 || count > 512) die("COUNT must be 1..512");
  ::signal(SIGTERM, [](int) { g_stop = 1; });

  const unsigned seed = 20240611;
  std::mt19937 rng(seed);
  auto random_bytes = [&](std::size_t n) {
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    return s;
  };
  std::vector<int> held;
  std::uint64_t sent = 0;
  std::vector<std::string> drip;  // slow: what each held connection still has to send

  if (mode == "garbage") {
    for (int i = 0; i < count; ++i) {  // not a handshake: the server drops these at once
      const int fd = connect_to(addr);
      const std::string junk = random_bytes(4096);
      if (send_all(fd, junk)) sent += junk.size();
      ::close(fd);
    }
    for (int i = 0; i < count; ++i) {  // a handshake, then frames of random ops and bytes
      const int fd = connect_to(addr);
      std::string out = handshake();
      for (int f = 0; f < 64; ++f) out += frame(static_cast<std::uint8_t>(rng()), rng(), random_bytes(rng() % 4096));
      if (send_all(fd, out)) sent += out.size();
      held.push_back(fd);
    }
  } else if (mode == "slow") {
    std::string payload;
    put_u32(payload, 9);
    payload += "slow/key/";
    put_u32(payload, 5);
    payload += "value";
    for (int i = 0; i < count; ++i) {
      held.push_back(connect_to(addr));
      drip.push_back(handshake() + frame(1, 1, payload));
    }
  } else if (mode == "oversized") {
    for (int i = 0; i < count; ++i) {
      const int fd = connect_to(addr);
      std::string out = handshake();
      put_u32(out, 65u << 20);  // body_len: 65 MiB (more than a 64 MiB value)
      if (!send_all(fd, out) || !recv_exact(fd, 8, std::chrono::seconds(10))) die("handshake failed");
      sent += out.size();
      held.push_back(fd);
    }
    prove_serving(addr);  // the server has read every header; now one byte of each body
    for (int fd : held) {
      if (!send_all(fd, std::string(1, '\1'))) die("the server closed an oversized frame's connection");
      ++sent;
    }
  } else {
    die("unknown mode '" + mode + "'");
  }

  // Slow connections get their first byte before "ready": the server holds them all.
  auto drip_once = [&] {
    for (std::size_t i = 0; i < drip.size(); ++i) {
      if (drip[i].empty()) continue;
      if (send_all(held[i], drip[i].substr(0, 1))) ++sent;
      drip[i].erase(0, 1);
    }
  };
  drip_once();
  prove_serving(addr);
  std::printf("ready sent=%llu seed=%u connections=%zu\n", static_cast<unsigned long long>(sent), seed, held.size());
  std::fflush(stdout);

  const auto end = Clock::now() + std::chrono::seconds(60);
  while (!g_stop && Clock::now() < end) {
    ::poll(nullptr, 0, 100);  // the drip interval; SIGTERM interrupts it
    drip_once();
  }
  for (int fd : held) ::close(fd);
  return 0;
}
