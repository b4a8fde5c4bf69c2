// process_v2_probe: checks Boost.Process v2's posix launchers for what crun's agent needs from a
// spawn (measured in `git show b56c1a0:docs/benchmarks.md`, "Spawning workers: Boost.Process v2").
// Not part of CTest: run it when Debian's Boost moves, to see whether the reasons crun spawns with
// its own vfork still hold.
//
// For default_launcher (fork) and vfork_launcher, on a live io_context like the agent's:
//   1. the child gets descriptors 0-2 only (a descriptor left without close-on-exec must not pass)
//   2. a signal_set of the io_context still delivers after a spawn (crun forwards SIGTERM with it)
//   3. an exec failure leaves the parent's memory alone (no static destructor run by the child)
// Prints one line per check and launcher; exits 0.
#define BOOST_PROCESS_USE_STD_FS 1
#include <boost/asio/detail/throw_error.hpp>  // process/v2 calls it without including it (Asio compiled apart)
#include <boost/optional.hpp>  // before process/v2: its config uses boost::optional
#include <boost/process/v2/posix/default_launcher.hpp>
#include <boost/process/v2/posix/vfork_launcher.hpp>
#include <boost/process/v2/process.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdio>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace bp = boost::process::v2;

namespace {

// A static object: its destructor must run once, in this process, at exit.
struct Canary {
  std::string text = "intact";
  ~Canary() { text = "destroyed"; }
} g_canary;

// Replaces the child's stdout with the report pipe (and, when asked, passes it on as fd 9 too).
struct Report {
  int fd;
  bool pass_nine;
  template <typename L>
  boost::system::error_code on_exec_setup(L&, const std::filesystem::path&, const char* const*&) const {
    ::dup2(fd, 1);
    if (pass_nine) ::dup2(fd, 9);
    return {};
  }
};

// The descriptors a child of `Launcher` has open, as `ls /proc/$$/fd` lists them.
template <typename Launcher>
std::string child_fds(asio::io_context& io, bool pass_nine) {
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return "?";
  Launcher launcher;
  if (pass_nine) launcher.fd_whitelist.push_back(9);
  std::vector<std::string> args{"-c", "ls /proc/$$/fd | tr '\\n' ' '"};
  boost::system::error_code ec;
  {
    auto child = launcher(io.get_executor(), ec, std::filesystem::path("/bin/sh"), args, Report{report[1], pass_nine});
    if (!ec) child.wait();
  }
  ::close(report[1]);
  char buf[256] = {};
  const ssize_t n = ::read(report[0], buf, sizeof(buf) - 1);
  ::close(report[0]);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "?";
}

template <typename Launcher>
void probe(const char* name) {
  asio::io_context io;
  asio::signal_set signals(io, SIGUSR1);

  // 1. Descriptors, with a pipe left open without close-on-exec (it must not pass).
  int leaked[2];
  if (::pipe(leaked) != 0) return;
  const std::string plain = child_fds<Launcher>(io, false);
  const std::string passing = child_fds<Launcher>(io, true);
  std::printf("%-16s descriptors in the child: %-16s %s\n", name, plain.c_str(),
              plain == "0 1 2 " ? "ok" : "LEAK (expected 0 1 2)");
  std::printf("%-16s ... passing fd 9:         %-16s %s\n", name, passing.c_str(),
              passing == "0 1 2 9 " ? "ok" : "LEAK (expected 0 1 2 9)");
  ::close(leaked[0]);
  ::close(leaked[1]);

  // 2. The io_context's signal_set after the spawn.
  bool delivered = false;
  signals.async_wait([&](const boost::system::error_code& e, int) { delivered = !e; });
  asio::steady_timer bound(io, std::chrono::seconds(2));
  bound.async_wait([&](const boost::system::error_code&) { io.stop(); });
  ::raise(SIGUSR1);
  while (!delivered && !io.stopped() && io.run_one() > 0) {
  }
  std::printf("%-16s signal_set after a spawn: %s\n", name, delivered ? "ok (delivered)" : "BROKEN (not delivered in 2 s)");
  signals.cancel();

  // 3. An exec failure. (The child ends with exit(), not _exit(): flush stdout first, or a forked
  // child prints what is buffered a second time.)
  std::fflush(stdout);
  Launcher failing;
  std::vector<std::string> none;
  boost::system::error_code ec;
  auto p = failing(io.get_executor(), ec, std::filesystem::path("/nonexistent/worker"), none);
  std::printf("%-16s after a failed exec (%s): parent's static object %s\n", name, ec.message().c_str(),
              g_canary.text == "intact" ? "ok (intact)" : "DESTROYED by the child");
  g_canary.text = "intact";
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::printf("Boost %d.%d.%d, Boost.Process v2 posix launchers on a live io_context\n", BOOST_VERSION / 100000,
              BOOST_VERSION / 100 % 1000, BOOST_VERSION % 100);
  probe<bp::posix::default_launcher>("default_launcher");
  probe<bp::posix::vfork_launcher>("vfork_launcher");
  return 0;
}
