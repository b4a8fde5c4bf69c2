#include "tests/support/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

extern char** environ;

namespace crun::test {

ChildProcess::ChildProcess(std::vector<std::string> argv, std::vector<std::string> env, std::size_t keep_stdout,
                           bool stdout_held)
    : stdout_held_(stdout_held), keep_stdout_(keep_stdout) {
  std::vector<std::string> full_env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    bool overridden = false;
    for (const auto& x : env) overridden = overridden || x.substr(0, x.find('=')) == key;
    if (!overridden) full_env.push_back(kv);
  }
  full_env.insert(full_env.end(), env.begin(), env.end());
  std::vector<char*> cargv, cenv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : full_env) cenv.push_back(e.data());
  cenv.push_back(nullptr);

  int out[2], err[2], exec_error[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 || ::pipe2(exec_error, O_CLOEXEC) != 0) {
    throw std::runtime_error("pipe");
  }
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork");
  if (pid_ == 0) {
    // A test killed by its timeout takes what it started with it (an etcd member, an agent).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execve(cargv[0], cargv.data(), cenv.data());
    const int e = errno;  // the exec failed: the parent throws with it
    (void)!::write(exec_error[1], &e, sizeof e);
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  ::close(exec_error[1]);
  // The pipe closes at the exec (close-on-exec), or carries the exec's errno: a program that cannot
  // run is the test's mistake, said here, not a child that exits 127 unseen.
  int exec_errno = 0;
  ssize_t got;
  do got = ::read(exec_error[0], &exec_errno, sizeof exec_errno);
  while (got < 0 && errno == EINTR);
  ::close(exec_error[0]);
  if (got > 0) {
    ::waitpid(pid_, nullptr, 0);
    ::close(out[0]);
    ::close(err[0]);
    throw std::runtime_error("cannot run " + argv[0] + ": " + std::strerror(exec_errno));
  }
  out_fd_ = out[0];
  err_fd_ = err[0];
  pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
  reader_ = std::thread([this] { read_loop(); });
}

ChildProcess::~ChildProcess() {
  bool running;
  {
    std::lock_guard<std::mutex> lock(mu_);
    running = !code_.has_value();
  }
  if (running) {
    ::kill(pid_, SIGKILL);
  }
  release_stdout();  // a held stdout would keep the reader waiting
  reader_.join();
  ::close(out_fd_);
  ::close(err_fd_);
  if (pidfd_ >= 0) ::close(pidfd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void ChildProcess::signal(int signo) { ::kill(pid_, signo); }

void ChildProcess::release_stdout() {
  stdout_held_ = false;
  const std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void ChildProcess::read_loop() {
  char buf[65536];
  bool out_open = true, err_open = true, alive = true;
  while (out_open || err_open || alive) {
    pollfd fds[4];
    int n = 0;
    int idx_out = -1, idx_err = -1, idx_pid = -1;
    fds[n++] = {wake_fd_, POLLIN, 0};
    if (out_open && !stdout_held_) { idx_out = n; fds[n++] = {out_fd_, POLLIN, 0}; }
    if (err_open) { idx_err = n; fds[n++] = {err_fd_, POLLIN, 0}; }
    if (alive) { idx_pid = n; fds[n++] = {pidfd_, POLLIN, 0}; }
    if (::poll(fds, static_cast<nfds_t>(n), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if ((fds[0].revents & POLLIN) != 0) {
      std::uint64_t count = 0;
      (void)!::read(wake_fd_, &count, sizeof count);
    }
    auto pump = [&](int idx, int fd, std::string& sink, bool& open, bool& eof) {
      if (idx < 0 || fds[idx].revents == 0) return;
      const ssize_t r = ::read(fd, buf, sizeof(buf));
      std::lock_guard<std::mutex> lock(mu_);
      if (r > 0) {
        sink.append(buf, static_cast<std::size_t>(r));
        if (&sink == &out_) {
          stdout_bytes_ += static_cast<std::uint64_t>(r);
          if (out_.size() > keep_stdout_) out_.erase(0, out_.size() - keep_stdout_);
        }
      } else if (r == 0 || errno != EINTR) {
        open = false;
        eof = true;
      }
      cv_.notify_all();
    };
    pump(idx_out, out_fd_, out_, out_open, out_eof_);
    pump(idx_err, err_fd_, err_, err_open, err_eof_);
    if (idx_pid >= 0 && fds[idx_pid].revents != 0) {
      int status = 0;
      if (::waitpid(pid_, &status, 0) == pid_) {
        std::lock_guard<std::mutex> lock(mu_);
        code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        alive = false;
        cv_.notify_all();
      }
    }
  }
}

bool ChildProcess::wait_until(const std::function<bool(const std::string&, const std::string&)>& pred,
                              std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return pred(out_, err_) || (code_ && out_eof_ && err_eof_ && pred(out_, err_)); });
}

bool ChildProcess::wait_for_stdout(const std::string& needle, int times, std::chrono::milliseconds timeout) {
  return wait_until([&](const std::string& o, const std::string&) { return count(o, needle) >= times; },
                    timeout);
}

std::optional<int> ChildProcess::wait_exit(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return code_.has_value() && out_eof_ && err_eof_; })) {
    return std::nullopt;
  }
  return code_;
}

std::string ChildProcess::out() const {
  std::lock_guard<std::mutex> lock(mu_);
  return out_;
}

std::uint64_t ChildProcess::stdout_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stdout_bytes_;
}

std::string ChildProcess::err() const {
  std::lock_guard<std::mutex> lock(mu_);
  return err_;
}

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (std::size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + needle.size())) ++n;
  return n;
}

std::string exit_text(const std::optional<int>& code) {
  return code ? "exit " + std::to_string(*code) : std::string("no exit (timed out)");
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::map<int, std::string> fds_without_cloexec(pid_t pid) {
  std::map<int, std::string> found;
  const std::string proc = "/proc/" + std::to_string(pid);
  for (const auto& e : std::filesystem::directory_iterator(proc + "/fdinfo")) {
    std::ifstream in(e.path());
    std::string key;
    unsigned long flags = 0;
    while (in >> key && key != "flags:") in.ignore(4096, '\n');
    if (!(in >> std::oct >> flags) || (flags & O_CLOEXEC) != 0) continue;
    const std::string fd = e.path().filename().string();
    std::error_code ec;
    found[std::stoi(fd)] = std::filesystem::read_symlink(proc + "/fd/" + fd, ec).string();
  }
  return found;
}

bool wait_pid_gone(pid_t pid, std::chrono::milliseconds timeout) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH;
  pollfd p{fd, POLLIN, 0};
  const int r = ::poll(&p, 1, static_cast<int>(timeout.count()));
  ::close(fd);
  return r == 1;
}

bool wait_pid_reaped(pid_t pid, std::chrono::milliseconds timeout) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH;
  pollfd p{fd, 0, 0};  // no events asked for: only the hang-up (reaped) ends the wait
  const bool reaped = ::poll(&p, 1, static_cast<int>(timeout.count())) == 1 && (p.revents & POLLHUP) != 0;
  ::close(fd);
  return reaped;
}

}  // namespace crun::test
