#include "agent/node_check.h"

#include <signal.h>
#include <unistd.h>

#include <string_view>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agent/worker_containment.h"
#include "agent/worker_env.h"
#include "agent/worker_process.h"

namespace crun {

namespace asio = boost::asio;

std::optional<std::vector<std::string>> split_command(const std::string& text, std::string& error) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else if (c == '\'') {
      const std::size_t end = text.find('\'', i + 1);
      if (end == std::string::npos) {
        error = "unbalanced ' in '" + text + "'";
        return std::nullopt;
      }
      word.append(text, i + 1, end - i - 1);
      i = end;
      in_word = true;
    } else if (c == '"') {
      std::size_t j = i + 1;
      for (; j < text.size() && text[j] != '"'; ++j) {
        if (text[j] == '\\' && j + 1 < text.size() && std::string_view("\\\"$`").find(text[j + 1]) != std::string_view::npos) ++j;
        word.push_back(text[j]);
      }
      if (j >= text.size()) {
        error = "unbalanced \" in '" + text + "'";
        return std::nullopt;
      }
      i = j;
      in_word = true;
    } else if (c == '\\') {
      if (i + 1 < text.size()) word.push_back(text[++i]);
      in_word = true;
    } else {
      word.push_back(c);
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  if (words.empty()) {
    error = "no command in '" + text + "'";
    return std::nullopt;
  }
  return words;
}

namespace {

// The last `lines` non-empty lines of `tail`, one line (" | " between them).
std::string last_lines(const std::string& tail, int lines) {
  std::vector<std::string> kept;
  std::size_t end = tail.size();
  while (end > 0 && static_cast<int>(kept.size()) < lines) {
    const std::size_t nl = tail.rfind('\n', end - 1);
    const std::size_t begin = nl == std::string::npos ? 0 : nl + 1;
    std::string line = tail.substr(begin, end - begin);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    for (char& ch : line) {
      if (static_cast<unsigned char>(ch) < 0x20) ch = ' ';
    }
    if (line.size() > 200) line = "..." + line.substr(line.size() - 197);  // the end of a long line
    if (!line.empty()) kept.insert(kept.begin(), std::move(line));
    if (nl == std::string::npos) break;
    end = nl;
  }
  std::string out;
  for (const auto& l : kept) out += (out.empty() ? "" : " | ") + l;
  return out;
}

}  // namespace

struct CommandCheck::Running : std::enable_shared_from_this<CommandCheck::Running> {
  Running(asio::io_context& io, const SpawnedWorker& s)
      : pid(s.pid), pidfd(io, s.pidfd), out(io, s.stdout_fd), timer(io) {}
  int pid;
  asio::posix::stream_descriptor pidfd;
  asio::posix::stream_descriptor out;  // stdout and stderr together
  asio::steady_timer timer;
  std::string tail;  // the last kTailBytes of stdout and stderr together
  bool timed_out = false;
  bool over = false;
  std::function<void(NodeCheckResult)> done;
  std::string command;  // as given: the result's name
  std::string seconds;  // the timeout, as the reason says it
  WorkerContainment* containment = nullptr;

  std::optional<ExitStatus> reap() {
    auto status = reap_worker(pid, pidfd.native_handle());
    if (status && containment != nullptr) containment->worker_reaped(pid);
    return status;
  }

  // Reads what is there (at most `max_reads` reads): every byte read, only the tail kept.
  void drain(asio::posix::stream_descriptor& pipe, int max_reads) {
    char buffer[16384];
    for (int i = 0; pipe.is_open() && i < max_reads; ++i) {
      const ssize_t n = ::read(pipe.native_handle(), buffer, sizeof buffer);
      if (n > 0) {
        tail.append(buffer, static_cast<std::size_t>(n));
        if (tail.size() > kTailBytes) tail.erase(0, tail.size() - kTailBytes);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      boost::system::error_code ignored;
      pipe.close(ignored);
    }
  }

  void watch(asio::posix::stream_descriptor& pipe) {
    pipe.async_wait(asio::posix::stream_descriptor::wait_read,
                    [self = shared_from_this(), &pipe](const boost::system::error_code& ec) {
                      if (ec || self->over) return;
                      self->drain(pipe, 16);
                      if (pipe.is_open()) self->watch(pipe);
                    });
  }

  void watch_exit() {
    pidfd.async_wait(asio::posix::stream_descriptor::wait_read, [r = shared_from_this()](const boost::system::error_code& ec) {
      if (ec) return;
      if (r->over) {  // given up on (a second run(), the destructor): only reaped
        if (!r->reap()) r->watch_exit();
        return;
      }
      const auto status = r->reap();
      if (!status) {  // a spurious wakeup: not ended yet
        r->watch_exit();
        return;
      }
      r->drain(r->out, 64);  // what it wrote before it ended (bounded: a grandchild may write on)
      r->stop();             // and whatever it left in its group
      NodeCheckResult result{r->command, ""};
      const std::string said = last_lines(r->tail, kTailLines);
      if (r->timed_out) {
        result.reason = "no answer within " + r->seconds + " s (killed)" + (said.empty() ? "" : ": " + said);
      } else if (status->failed()) {
        result.reason = status->describe() + (said.empty() ? "" : ": " + said);
      }
      auto done = std::move(r->done);
      done(result);
    });
  }

  void stop() {
    over = true;
    ::kill(-pid, SIGKILL);
    boost::system::error_code ignored;
    timer.cancel();
    out.close(ignored);
  }
};

CommandCheck::CommandCheck(asio::io_context& io, std::string command, std::chrono::milliseconds timeout,
                           std::string search_path, WorkerContainment* containment)
    : io_(io), command_(std::move(command)), timeout_(timeout), search_path_(std::move(search_path)), containment_(containment) {}

CommandCheck::~CommandCheck() {
  if (!running_ || running_->over) return;
  running_->stop();
  // SIGKILLed: reaped if it has ended already (else the subreaper reaps it once it does).
  if (!running_->reap() && running_->containment != nullptr) running_->containment->worker_reaped(running_->pid);
}

void CommandCheck::run(std::function<void(NodeCheckResult)> done) {
  if (running_ && !running_->over) running_->stop();
  running_.reset();
  std::string error;
  auto words = split_command(command_, error);
  if (!words) {
    asio::post(io_, [done, command = command_, error] { done({command, error}); });
    return;
  }
  const auto program = resolve_executable(words->front(), search_path_);
  if (!program || ::access(program->c_str(), X_OK) != 0) {
    asio::post(io_, [done, command = command_] { done({command, "not found"}); });
    return;
  }
  SpawnOptions options;
  options.program = *program;
  options.merge_stderr = true;  // one stream: the reason's lines in the order written
  SpawnedWorker s;
  try {
    s = spawn_worker(*words, current_environment(), options);
  } catch (const std::exception& e) {
    asio::post(io_, [done, command = command_, what = std::string(e.what())] { done({command, "cannot start: " + what}); });
    return;
  }
  // Known to the containment before the loop runs again: the subreaper's SIGCHLD handler (on this
  // loop) must not reap it, nor a group's end kill it.
  if (containment_ != nullptr) containment_->worker_started(s.pid);
  auto r = std::make_shared<Running>(io_, s);
  r->containment = containment_;
  r->done = std::move(done);
  running_ = r;
  const std::string command = command_;
  const auto seconds = std::to_string(timeout_.count() / 1000) + (timeout_.count() % 1000 ? "." + std::to_string(timeout_.count() % 1000 / 100) : "");
  r->watch(r->out);
  r->timer.expires_after(timeout_);
  r->timer.async_wait([r](const boost::system::error_code& ec) {
    if (ec || r->over) return;
    r->timed_out = true;
    ::kill(-r->pid, SIGKILL);
  });
  r->command = command;
  r->seconds = seconds;
  r->watch_exit();
}

}  // namespace crun
