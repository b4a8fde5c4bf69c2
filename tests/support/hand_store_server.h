// HandStoreServer: a listening socket on 127.0.0.1 that a test drives by hand, playing crun's
// store: accept one client, read its hello (no token) and answer it or not, read what the client
// sends (whole frames: op, request id, body), and answer a request only where the test says so
// (reply_ok).
// Threading: one test thread.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "store/store_protocol.h"
#include "tests/support/loopback_socket.h"

namespace crun::test {

struct HandStoreServer {
  ~HandStoreServer() {
    if (peer >= 0) ::close(peer);
  }
  // Accepts the channel and reads its hello (8 bytes without a token), not answering it yet.
  void accept_hello() {
    peer = ::accept4(listening.fd, nullptr, nullptr, SOCK_CLOEXEC);
    REQUIRE(peer >= 0);
    char hello[8];
    REQUIRE(::recv(peer, hello, sizeof hello, MSG_WAITALL) == 8);
  }
  void answer_hello() {
    std::string reply;
    wire::Writer w(reply);
    w.u32(wire::kMagic);
    w.u16(wire::kVersion);
    w.u16(static_cast<std::uint16_t>(wire::HelloStatus::kOk));
    REQUIRE(::send(peer, reply.data(), reply.size(), MSG_NOSIGNAL) == 8);
  }
  // Bytes the channel sent that are waiting to be read (loopback delivers them within send()).
  bool readable() {
    pollfd p{peer, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  }
  struct Frame {
    std::uint8_t op = 0;
    std::uint32_t id = 0;
    std::string body;  // what follows the id
  };
  // Reads whole frames until `want` came (or 5 s passed); the frames that came.
  std::vector<Frame> read_frames(int want) {
    std::vector<Frame> out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (static_cast<int>(out.size()) < want && std::chrono::steady_clock::now() < deadline) {
      pollfd p{peer, POLLIN, 0};
      if (::poll(&p, 1, 100) != 1) continue;
      char buf[4096];
      const ssize_t r = ::recv(peer, buf, sizeof buf, 0);
      if (r <= 0) break;
      in_.append(buf, static_cast<std::size_t>(r));
      while (in_.size() >= 4) {
        const std::size_t end = 4 + wire::decode_frame_length(in_.data(), 1 << 20);
        if (end > in_.size() || end < 9) break;
        wire::Reader head(std::string_view(in_).substr(4, 5));
        Frame f;
        f.op = head.u8();
        f.id = head.u32();
        f.body = in_.substr(9, end - 9);
        out.push_back(std::move(f));
        in_.erase(0, end);
      }
    }
    return out;
  }
  int frames(int want) { return static_cast<int>(read_frames(want).size()); }
  // Answers request `id` with OK and no payload (what a set or a watch gets).
  void reply_ok(std::uint32_t id) {
    std::string reply;
    wire::Writer w(reply);
    const std::size_t at = w.begin_frame(static_cast<std::uint8_t>(wire::Status::kOk), id);
    w.finish_frame(at);
    REQUIRE(::send(peer, reply.data(), reply.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(reply.size()));
  }
  LoopbackSocket listening{LoopbackSocket::Mode::kListening};
  int peer = -1;

 private:
  std::string in_;  // bytes of a frame not yet whole
};

}  // namespace crun::test
