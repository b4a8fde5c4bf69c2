#include "agent/replica_link.h"

#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <deque>
#include <optional>

#include "base/fd_io.h"
#include "base/random_bits.h"

namespace crun {

namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {
constexpr std::size_t kReadBuffer = 64 * 1024;
// One sendfile call's most: the loop turns to other work between pieces of a large file.
constexpr std::uint64_t kSendChunk = 4 * 1024 * 1024;
}  // namespace

OutgoingSet::OutgoingSet(OutgoingSet&& o) noexcept : rank(o.rank), sequence(o.sequence), files(std::move(o.files)) {
  o.files.clear();
}

OutgoingSet& OutgoingSet::operator=(OutgoingSet&& o) noexcept {
  if (this != &o) {
    for (auto& f : files) if (f.fd >= 0) ::close(f.fd);
    rank = o.rank;
    sequence = o.sequence;
    files = std::move(o.files);
    o.files.clear();
  }
  return *this;
}

OutgoingSet::~OutgoingSet() {
  for (auto& f : files) if (f.fd >= 0) ::close(f.fd);
}

std::uint64_t OutgoingSet::bytes() const {
  std::uint64_t n = 0;
  for (const auto& f : files) n += f.size;
  return n;
}

namespace {

class Link final : public ReplicaLink, public std::enable_shared_from_this<Link> {
 public:
  Link(asio::ip::tcp::socket socket, replica::ReplicaDecoder::Side side, std::uint64_t max_set_bytes,
       fs::path incoming_root, ReplicaLinkHandlers handlers);
  ~Link() override;
  void start() override;
  void send(std::string bytes) override;
  void send_set(OutgoingSet set) override;
  void close(const std::string& why) override;
  bool open() const override { return !closed_; }
  bool idle() const override { return out_.empty() && !writing_; }
  std::string peer() const override { return peer_; }

 private:
  struct Piece {  // one thing to write: bytes, or a file's bytes from its descriptor
    std::string bytes;
    int fd = -1;  // -2: the end of a set (its descriptors may be closed)
    std::uint64_t offset = 0;
    std::uint64_t left = 0;
  };
  void read();
  void write();
  void begin_set(int rank, std::uint64_t sequence);
  void begin_file(std::string_view name);
  void file_bytes(const char* data, std::size_t size);
  void end_file();
  void end_set();
  void drop_incoming();

  asio::ip::tcp::socket socket_;
  replica::ReplicaDecoder decoder_;
  fs::path incoming_root_;
  ReplicaLinkHandlers h_;
  std::string peer_;
  std::vector<char> buffer_;
  std::deque<Piece> out_;
  std::deque<OutgoingSet> holding_;  // the sets whose descriptors the queue still reads
  bool writing_ = false;
  bool closed_ = false;
  std::string error_;  // a failure inside a decoder callback
  std::optional<ReceivedSet> incoming_;  // the set being received
  int file_fd_ = -1;
};

Link::Link(asio::ip::tcp::socket socket, replica::ReplicaDecoder::Side side, std::uint64_t max_set_bytes,
           fs::path incoming_root, ReplicaLinkHandlers handlers)
    : socket_(std::move(socket)),
      decoder_(side, {}, max_set_bytes),
      incoming_root_(std::move(incoming_root)),
      h_(std::move(handlers)),
      buffer_(kReadBuffer) {
  boost::system::error_code ec;
  const auto remote = socket_.remote_endpoint(ec);
  peer_ = ec ? std::string("?") : remote.address().to_string() + ":" + std::to_string(remote.port());
  socket_.non_blocking(true, ec);
  replica::ReplicaEvents ev;
  ev.hello = [this](std::string_view token) {
    if (h_.on_hello && !h_.on_hello(token)) {
      error_ = "refused";
      decoder_.stop();
    }
  };
  ev.set_begin = [this](int rank, std::uint64_t sequence, std::uint32_t, std::uint64_t) { begin_set(rank, sequence); };
  ev.file_begin = [this](std::string_view name, std::uint64_t) { begin_file(name); };
  ev.file_data = [this](const char* data, std::size_t size) { file_bytes(data, size); };
  ev.file_end = [this] { end_file(); };
  ev.set_end = [this] { end_set(); };
  ev.query = [this](int rank) { if (h_.on_query) h_.on_query(rank); };
  ev.get = [this](int rank) { if (h_.on_get) h_.on_get(rank); };
  ev.have = [this](int rank, std::uint64_t s) { if (h_.on_have) h_.on_have(rank, s); };
  ev.ack = [this](int rank, std::uint64_t s) { if (h_.on_ack) h_.on_ack(rank, s); };
  decoder_ = replica::ReplicaDecoder(side, std::move(ev), max_set_bytes);
}

Link::~Link() {
  if (file_fd_ >= 0) ::close(file_fd_);
  drop_incoming();
}

void Link::start() { read(); }

void Link::read() {
  socket_.async_read_some(asio::buffer(buffer_), [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
    if (self->closed_) return;
    if (ec) return self->close(ec == asio::error::eof ? "the peer closed the connection" : ec.message());
    const bool ok = self->decoder_.feed(self->buffer_.data(), n);
    if (self->closed_) return;
    if (!self->error_.empty()) return self->close(self->error_);
    if (!ok) return self->close("malformed message: " + self->decoder_.error());
    self->read();
  });
}

void Link::send(std::string bytes) {
  if (closed_) return;
  Piece p;
  p.bytes = std::move(bytes);
  out_.push_back(std::move(p));
  write();
}

void Link::send_set(OutgoingSet set) {
  if (closed_) return;
  Piece head;
  head.bytes = replica::encode_set(set.rank, set.sequence, static_cast<std::uint32_t>(set.files.size()), set.bytes());
  out_.push_back(std::move(head));
  for (const auto& f : set.files) {
    Piece name;
    name.bytes = replica::encode_file(f.name, f.size);
    out_.push_back(std::move(name));
    Piece body;
    body.fd = f.fd;
    body.left = f.size;
    if (body.left > 0) out_.push_back(std::move(body));
  }
  Piece end;  // marks where the set's descriptors may be closed
  end.fd = -2;
  out_.push_back(std::move(end));
  holding_.push_back(std::move(set));
  write();
}

// Writes what the socket takes now; waits for it to take more. A file that shrank under us
// (it should not: committed files are not written again) ends the connection: the peer would
// read a wrong set.
void Link::write() {
  if (writing_ || closed_) return;
  const int sock = socket_.native_handle();
  while (!out_.empty()) {
    Piece& p = out_.front();
    if (p.fd == -2) {
      holding_.pop_front();
      out_.pop_front();
      continue;
    }
    ssize_t n;
    if (p.fd >= 0) {
      off_t off = static_cast<off_t>(p.offset);
      n = ::sendfile(sock, p.fd, &off, static_cast<std::size_t>(std::min(p.left, kSendChunk)));
      if (n == 0) return close("a file being sent shrank");
      if (n > 0) {
        p.offset += static_cast<std::uint64_t>(n);
        p.left -= static_cast<std::uint64_t>(n);
        if (p.left == 0) {
          out_.pop_front();  // `p` is gone from here
          continue;
        }
        // A large file goes a chunk at a time, with the loop's other work between.
        if (static_cast<std::uint64_t>(n) == kSendChunk) {
          writing_ = true;
          asio::post(socket_.get_executor(), [self = shared_from_this()] {
            self->writing_ = false;
            self->write();
          });
          return;
        }
        continue;
      }
    } else {
      n = ::send(sock, p.bytes.data() + p.offset, p.bytes.size() - p.offset, MSG_NOSIGNAL);
      if (n > 0) {
        p.offset += static_cast<std::uint64_t>(n);
        if (p.offset == p.bytes.size()) out_.pop_front();
        continue;
      }
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return close(std::string("write failed: ") + std::strerror(errno));
    break;
  }
  if (out_.empty()) {
    if (h_.on_drained) h_.on_drained();
    return;
  }
  writing_ = true;
  socket_.async_wait(asio::ip::tcp::socket::wait_write, [self = shared_from_this()](boost::system::error_code ec) {
    self->writing_ = false;
    if (self->closed_) return;
    if (ec) return self->close(ec.message());
    self->write();
  });
}

void Link::begin_set(int rank, std::uint64_t sequence) {
  ReceivedSet s;
  s.rank = rank;
  s.sequence = sequence;
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, "%016llx", static_cast<unsigned long long>(random_bits()));
  s.dir = incoming_root_ / (".incoming-" + std::to_string(rank) + "-" + suffix);
  std::error_code ec;
  fs::create_directories(s.dir, ec);
  if (ec) {
    error_ = "cannot make " + s.dir.string() + ": " + ec.message();
    decoder_.stop();
    return;
  }
  incoming_ = std::move(s);
}

void Link::begin_file(std::string_view name) {
  const fs::path path = incoming_->dir / std::string(name);
  file_fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (file_fd_ < 0) {
    error_ = "cannot write " + path.string() + ": " + std::strerror(errno);
    decoder_.stop();
    return;
  }
  incoming_->files.emplace_back(std::string(name), 0);
}

void Link::file_bytes(const char* data, std::size_t size) {
  if (!write_all(file_fd_, data, size)) {
    error_ = "cannot write " + (incoming_->dir / incoming_->files.back().first).string() + ": " + std::strerror(errno);
    decoder_.stop();
    return;
  }
  incoming_->files.back().second += size;
  incoming_->bytes += size;
}

void Link::end_file() {
  if (file_fd_ >= 0) ::close(file_fd_);
  file_fd_ = -1;
}

void Link::end_set() {
  if (!incoming_) return;
  ReceivedSet s = std::move(*incoming_);
  incoming_.reset();
  if (h_.on_set) h_.on_set(s);
  std::error_code ec;
  if (!s.dir.empty() && fs::exists(s.dir, ec)) fs::remove_all(s.dir, ec);
}

void Link::drop_incoming() {
  if (!incoming_) return;
  std::error_code ec;
  fs::remove_all(incoming_->dir, ec);
  incoming_.reset();
}

void Link::close(const std::string& why) {
  if (closed_) return;
  closed_ = true;
  if (file_fd_ >= 0) ::close(file_fd_);
  file_fd_ = -1;
  drop_incoming();
  boost::system::error_code ec;
  socket_.close(ec);
  out_.clear();
  holding_.clear();
  auto closed = std::move(h_.on_closed);
  h_ = {};
  if (closed) closed(why);
}

}  // namespace

std::shared_ptr<ReplicaLink> make_replica_link(asio::io_context& io, int socket_fd, replica::ReplicaDecoder::Side side,
                                               std::uint64_t max_set_bytes, fs::path incoming_root,
                                               ReplicaLinkHandlers handlers) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(socket_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  asio::ip::tcp::socket socket(io);
  boost::system::error_code ec;
  socket.assign(addr.ss_family == AF_INET6 ? asio::ip::tcp::v6() : asio::ip::tcp::v4(), socket_fd, ec);
  if (ec) {
    ::close(socket_fd);
    throw std::system_error(ec.value(), std::generic_category(), "cannot take a replica connection");
  }
  return std::make_shared<Link>(std::move(socket), side, max_set_bytes, std::move(incoming_root), std::move(handlers));
}

}  // namespace crun
