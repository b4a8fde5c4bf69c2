#include "tests/runtime/proc_harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

namespace crun::test {

std::string RunResult::summary() const {
  std::string s = timed_out ? "TIMED OUT\n" : "";
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    s += "--- rank " + std::to_string(r) + " exit " + std::to_string(ranks[r].exit_code) + "\n" + ranks[r].output;
  }
  return s;
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("bind");
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string helper(const std::string& name) { return std::string(CRUN_TEST_BIN_DIR) + "/" + name; }

RunResult run_ranks(const std::vector<std::string>& argv, int world,
                    const std::vector<std::pair<std::string, std::string>>& extra_env,
                    std::chrono::milliseconds timeout, const OutputHook& on_output) {
  const int port = free_port();
  RunResult res;
  res.ranks.resize(world);
  std::vector<pid_t> pids(world, -1);
  std::vector<int> fds(world, -1);
  for (int r = 0; r < world; ++r) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(p[1], 1);
      ::dup2(p[1], 2);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::setenv("TORCHELASTIC_RESTART_COUNT", "0", 0);
      for (const auto& [k, v] : extra_env) ::setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      _exit(127);
    }
    ::close(p[1]);
    pids[r] = pid;
    fds[r] = p[0];
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int open = world;
  while (open > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      res.timed_out = true;
      break;
    }
    std::vector<pollfd> pf;
    std::vector<int> who;
    for (int r = 0; r < world; ++r) {
      if (fds[r] >= 0) {
        pf.push_back({fds[r], POLLIN, 0});
        who.push_back(r);
      }
    }
    int n = ::poll(pf.data(), pf.size(), static_cast<int>(left.count()));
    if (n < 0) continue;
    for (std::size_t i = 0; i < pf.size(); ++i) {
      if (pf[i].revents == 0) continue;
      char buf[65536];
      ssize_t got = ::read(pf[i].fd, buf, sizeof buf);
      if (got > 0) {
        res.ranks[who[i]].output.append(buf, static_cast<std::size_t>(got));
        if (on_output) on_output(who[i], res.ranks[who[i]].output, pids);
      } else {
        ::close(pf[i].fd);
        fds[who[i]] = -1;
        --open;
      }
    }
  }
  for (int r = 0; r < world; ++r) {
    if (res.timed_out) ::kill(pids[r], SIGKILL);
    int status = 0;
    ::waitpid(pids[r], &status, 0);
    res.ranks[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (fds[r] >= 0) ::close(fds[r]);
  }
  return res;
}

}  // namespace crun::test
