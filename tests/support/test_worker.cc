// crun_test_worker: a worker whose behaviour the agent tests choose on the command line.
//
//   --print-env            print "ENV rank=<RANK> KEY=VALUE" for every contract variable
//   --lines N              print N numbered lines to stdout ("line r=<RANK> i=<i> <payload>")
//   --stderr-lines N       print N numbered lines to stderr ("err r=<RANK> i=<i>")
//   --stamp FILE           append "start restart=<n> rank=<r> pid=<pid> ns=<CLOCK_REALTIME ns>"
//   --bind-master          rank 0 listens on MASTER_ADDR:MASTER_PORT (exit 5 if it cannot)
//   --trap SIG             on SIG: print "rank <r> got <SIG>" and exit 0
//   --ignore-term          ignore SIGTERM
//   --ignore SIG           ignore SIG
//   --only-rank R          the failure actions below apply only to LOCAL_RANK R
//   --fail-before-restart K  ... and only while TORCHELASTIC_RESTART_COUNT < K
//   --error-file MSG       failure action: write torch's @record JSON with MSG to TORCHELASTIC_ERROR_FILE
//   --last-words TEXT      failure action: write TEXT to stderr without a newline
//   --control-line TEXT    failure action: append TEXT and a newline to CRUN_CONTROL_FILE (a
//                          request to crun, or a bad line); repeatable, in order
//   --raise SIG            failure action: raise SIG (with default disposition)
//   --exit N               failure action: exit N
//   --fail-on-signal SIG   when the failure actions apply: print "ready rank=<r> pid=<pid>" and take
//                          them only once SIG arrives (a failure at a moment the test picks)
//   --hang                 print "ready rank=<r> pid=<pid>" and wait for signals forever
//   --hang-in-named-function  --hang, waiting inside hang_in_named_function() (never inlined):
//                          the frame a stack capture names; its ready line is printed from there
//   --hang-elsewhere-rank R  with --hang-in-named-function: LOCAL_RANK R waits inside
//                          hang_elsewhere() instead (the odd rank of the grouping tests)
//   --unkillable-rank R    in the first attempt (restart 0), LOCAL_RANK R has a tracer (its child,
//                          in a session of its own) hold it at its exit: SIGKILL leaves it stopped,
//                          unreaped, as uninterruptible sleep would; print "unkillable rank=<r>
//                          pid=<pid> tracer=<pid>"
//   --hang-before-restart K  --hang only while TORCHELASTIC_RESTART_COUNT < K
//   --hang-unless-world N  --hang only while WORLD_SIZE != N: a worker that finishes (exit 0) once
//                          its group has N ranks (after the job scaled up or down to it)
//   --list-fds             print "fd rank=<r> <n> <target>" for every open descriptor
//   --print-cgroup         print "cgroup rank=<r> <path>" (the cgroup v2 line of /proc/self/cgroup)
//   --link-in-run-dir DIR  make a symbolic link to DIR and a directory holding one to DIR in the
//                          worker's dir of the agent's run dir (beside TORCHELASTIC_ERROR_FILE)
//   --agent-libraries      print "lib rank=<r> <path>" for every file mapped in the parent (its
//                          executable, and the shared objects of a dynamically linked one)
//                          (the agent), once each
//   --child                start `sleep 40` in the worker's process group; print "child rank=<r> pid=<pid>"
//   --bare-child           the same with an empty environment (no CRUN_AGENT_ID marker): only
//                          the job's cgroup or a kill of the worker's process group reaches it;
//                          print "bare_child rank=<r> pid=<pid>"
//   --daemon               double-fork a `sleep 40` in a session of its own (its parent exits);
//                          print "daemon rank=<r> pid=<pid>"
//   --orphan               the same with `true` instead of `sleep 40`: an orphan that exits at once;
//                          print "orphan rank=<r> pid=<pid>"
// Without a failure action (or when it does not apply) the worker exits 0.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <set>
#include <string>
#include <vector>

namespace {

int g_rank = 0;
char g_trap_msg[128];

std::string env(const char* key) {
  const char* v = std::getenv(key);
  return v ? v : "";
}

int signum(const std::string& s) {
  const std::pair<const char*, int> names[] = {{"SIGTERM", SIGTERM}, {"SIGINT", SIGINT},
                                               {"SIGHUP", SIGHUP},   {"SIGQUIT", SIGQUIT},
                                               {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2},
                                               {"SIGKILL", SIGKILL}, {"SIGSEGV", SIGSEGV},
                                               {"SIGABRT", SIGABRT}};
  for (auto& [n, v] : names) {
    if (s == n) return v;
  }
  return std::atoi(s.c_str());
}

void list_fds() {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.' || std::atoi(e->d_name) == ::dirfd(d)) continue;
    char target[512] = {};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
    std::printf("fd rank=%d %s %s\n", g_rank, e->d_name, n > 0 ? target : "?");
  }
  ::closedir(d);
}

void print_cgroup() {
  if (FILE* f = std::fopen("/proc/self/cgroup", "r")) {
    char line[1024];
    while (std::fgets(line, sizeof(line), f) != nullptr) {
      if (std::strncmp(line, "0::", 3) == 0) std::printf("cgroup rank=%d %s", g_rank, line + 3);
    }
    std::fclose(f);
  }
}

void link_in_run_dir(const std::string& target) {
  const char* error_file = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (error_file == nullptr) return;
  std::string dir = error_file;
  dir = dir.substr(0, dir.rfind('/') + 1);
  const std::string nested = dir + "nested";
  if (::symlink(target.c_str(), (dir + "link").c_str()) != 0 || ::mkdir(nested.c_str(), 0700) != 0 ||
      ::symlink(target.c_str(), (nested + "/link").c_str()) != 0) {
    std::fprintf(stderr, "test_worker: cannot make the links in %s: %s\n", dir.c_str(), std::strerror(errno));
    std::exit(66);
  }
}

void print_agent_libraries() {
  const std::string maps = "/proc/" + std::to_string(::getppid()) + "/maps";
  std::set<std::string> seen;
  if (FILE* f = std::fopen(maps.c_str(), "r")) {
    char line[4096];
    while (std::fgets(line, sizeof(line), f) != nullptr) {
      const char* path = std::strchr(line, '/');
      if (path == nullptr) continue;
      std::string p(path);
      if (!p.empty() && p.back() == '\n') p.pop_back();
      if (seen.insert(p).second) std::printf("lib rank=%d %s\n", g_rank, p.c_str());
    }
    std::fclose(f);
  }
}

[[noreturn]] void exec_sleep(bool briefly = false) {
  if (briefly) ::execl("/bin/true", "true", static_cast<char*>(nullptr));
  ::execl("/bin/sleep", "sleep", "40", static_cast<char*>(nullptr));
  ::_exit(127);
}

// `sleep 40` forked by the worker: it stays in the worker's process group.
void start_child() {
  std::fflush(stdout);  // a child must not inherit (and write again) lines still in our buffer
  const pid_t pid = ::fork();
  if (pid == 0) exec_sleep();
  std::printf("child rank=%d pid=%d\n", g_rank, pid);
}

// `sleep 40` forked by the worker into its process group, with none of the worker's environment.
void start_bare_child() {
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid == 0) {
    char* const argv[] = {const_cast<char*>("sleep"), const_cast<char*>("40"), nullptr};
    char* const envp[] = {nullptr};
    ::execve("/bin/sleep", argv, envp);
    ::_exit(127);
  }
  std::printf("bare_child rank=%d pid=%d\n", g_rank, pid);
}

// `sleep 40` (or `true`) in a session of its own whose parent exits at once: an orphan, re-parented.
void start_daemon(bool briefly) {
  int p[2];
  if (::pipe(p) != 0) return;
  std::fflush(stdout);
  const pid_t mid = ::fork();
  if (mid == 0) {
    ::setsid();
    const pid_t grandchild = ::fork();
    if (grandchild == 0) exec_sleep(briefly);
    (void)!::write(p[1], &grandchild, sizeof(grandchild));
    ::_exit(0);
  }
  ::close(p[1]);
  pid_t grandchild = -1;
  (void)!::read(p[0], &grandchild, sizeof(grandchild));
  ::close(p[0]);
  ::waitpid(mid, nullptr, 0);
  std::printf("%s rank=%d pid=%d\n", briefly ? "orphan" : "daemon", g_rank, grandchild);
}

void on_trap(int) {
  (void)!::write(1, g_trap_msg, std::strlen(g_trap_msg));
  ::_exit(0);
}

// A tracer in a session of its own (so that killing the worker's process group spares it) seizes
// this process with PTRACE_O_TRACEEXIT and never lets it go: a SIGKILL stops it at its exit.
void become_unkillable() {
  ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY);
  int p[2];
  if (::pipe(p) != 0) std::exit(70);
  const pid_t self = ::getpid();
  const pid_t tracer = ::fork();
  if (tracer == 0) {
    ::setsid();
    ::close(p[0]);
    const char ok = ::ptrace(PTRACE_SEIZE, self, nullptr, PTRACE_O_TRACEEXIT) == 0 ? '1' : '0';
    (void)!::write(p[1], &ok, 1);
    ::close(p[1]);
    for (;;) ::pause();
  }
  ::close(p[1]);
  char ok = '0';
  (void)!::read(p[0], &ok, 1);
  ::close(p[0]);
  if (ok != '1') {
    std::fprintf(stderr, "test_worker: cannot ptrace myself from a child\n");
    std::exit(71);
  }
  std::printf("unkillable rank=%d pid=%d tracer=%d\n", g_rank, self, tracer);
  std::fflush(stdout);
}

void say_ready() {
  std::printf("ready rank=%d pid=%d\n", g_rank, ::getpid());
  std::fflush(stdout);
}

}  // namespace

// Where --hang-in-named-function waits: a frame of its own, with its name, for the stack tests,
// which it is in from its ready line on (a test may stop it at once). Outside the anonymous
// namespace: clang's debug information would name it
// "(anonymous namespace)::hang_in_named_function()", g++'s "hang_in_named_function".
[[gnu::noinline]] void hang_in_named_function() {
  say_ready();
  while (true) ::pause();
  asm volatile("");  // a frame of its own, whatever the optimiser thinks of the loop
}

// Where --hang-elsewhere-rank's rank waits instead.
[[gnu::noinline]] void hang_elsewhere() {
  say_ready();
  while (true) ::pause();
  asm volatile("");
}

int main(int argc, char** argv) {
  g_rank = std::atoi(env("RANK").c_str());
  const int local_rank = std::atoi(env("LOCAL_RANK").c_str());
  const int restart = std::atoi(env("TORCHELASTIC_RESTART_COUNT").c_str());
  rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);

  bool print_env = false, hang = false, bind_master = false, named_hang = false;
  long lines = 0, err_lines = 0;
  int only_rank = -1, fail_before = -1, exit_code = -1, raise_sig = 0, unkillable_rank = -1, hang_before = -1,
      hang_unless_world = -1, fail_on_signal = 0, elsewhere_rank = -1;
  std::string stamp, error_msg, last_words;
  std::vector<std::string> control_lines;
  bool has_error_file = false, has_last_words = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--print-env") print_env = true;
    else if (a == "--lines") lines = std::atol(next().c_str());
    else if (a == "--stderr-lines") err_lines = std::atol(next().c_str());
    else if (a == "--stamp") stamp = next();
    else if (a == "--bind-master") bind_master = true;
    else if (a == "--trap") {
      const std::string s = next();
      std::snprintf(g_trap_msg, sizeof(g_trap_msg), "rank %d got %s\n", g_rank, s.c_str());
      struct sigaction sa {};
      sa.sa_handler = on_trap;
      ::sigaction(signum(s), &sa, nullptr);
    } else if (a == "--ignore-term") ::signal(SIGTERM, SIG_IGN);
    else if (a == "--ignore") ::signal(signum(next()), SIG_IGN);
    else if (a == "--only-rank") only_rank = std::atoi(next().c_str());
    else if (a == "--fail-before-restart") fail_before = std::atoi(next().c_str());
    else if (a == "--error-file") { has_error_file = true; error_msg = next(); }
    else if (a == "--last-words") { has_last_words = true; last_words = next(); }
    else if (a == "--control-line") control_lines.push_back(next());
    else if (a == "--raise") raise_sig = signum(next());
    else if (a == "--exit") exit_code = std::atoi(next().c_str());
    else if (a == "--fail-on-signal") fail_on_signal = signum(next());
    else if (a == "--hang") hang = true;
    else if (a == "--hang-in-named-function") hang = named_hang = true;
    else if (a == "--hang-elsewhere-rank") elsewhere_rank = std::atoi(next().c_str());
    else if (a == "--unkillable-rank") unkillable_rank = std::atoi(next().c_str());
    else if (a == "--hang-before-restart") hang_before = std::atoi(next().c_str());
    else if (a == "--hang-unless-world") { hang = true; hang_unless_world = std::atoi(next().c_str()); }
    else if (a == "--list-fds") list_fds();
    else if (a == "--print-cgroup") print_cgroup();
    else if (a == "--link-in-run-dir") link_in_run_dir(next());
    else if (a == "--agent-libraries") print_agent_libraries();
    else if (a == "--child") start_child();
    else if (a == "--bare-child") start_bare_child();
    else if (a == "--daemon") start_daemon(false);
    else if (a == "--orphan") start_daemon(true);
    else { std::fprintf(stderr, "test_worker: unknown argument %s\n", a.c_str()); return 64; }
  }

  if (!stamp.empty()) {
    timespec ts;
    ::clock_gettime(CLOCK_REALTIME, &ts);
    if (FILE* f = std::fopen(stamp.c_str(), "a")) {
      std::fprintf(f, "start restart=%d rank=%d pid=%d ns=%lld\n", restart, g_rank, ::getpid(),
                   static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec);
      std::fclose(f);
    }
  }
  if (print_env) {
    const char* keys[] = {"LOCAL_RANK", "RANK", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_NAME",
                          "ROLE_RANK", "ROLE_WORLD_SIZE", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
                          "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
                          "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
                          "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE",
                          "OMP_NUM_THREADS", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                          "NCCL_ASYNC_ERROR_HANDLING", "CUDA_VISIBLE_DEVICES", "CRUN_CONTROL_FILE"};
    for (const char* k : keys) {
      const char* v = std::getenv(k);
      std::printf("ENV rank=%d %s=%s\n", g_rank, k, v ? v : "<unset>");
    }
  }
  if (bind_master && local_rank == 0) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(std::atoi(env("MASTER_PORT").c_str())));
    ::inet_pton(AF_INET, env("MASTER_ADDR").c_str(), &addr.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 16) != 0) {
      std::fprintf(stderr, "rank %d cannot bind MASTER_PORT %s: %s\n", g_rank,
                   env("MASTER_PORT").c_str(), std::strerror(errno));
      return 5;
    }
    std::printf("rank %d bound MASTER_PORT=%s\n", g_rank, env("MASTER_PORT").c_str());
    // keep fd open for the life of the worker
  }
  const std::string payload(90, 'x');
  for (long i = 0; i < lines; ++i) std::printf("line r=%d i=%ld %s\n", g_rank, i, payload.c_str());
  for (long i = 0; i < err_lines; ++i) std::fprintf(stderr, "err r=%d i=%ld\n", g_rank, i);
  std::fflush(stdout);
  std::fflush(stderr);

  if (unkillable_rank == local_rank && restart == 0) become_unkillable();
  const bool fails = (only_rank < 0 || only_rank == local_rank) && (fail_before < 0 || restart < fail_before);
  if (fails) {
    if (fail_on_signal != 0) {
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, fail_on_signal);
      ::sigprocmask(SIG_BLOCK, &set, nullptr);
      std::printf("ready rank=%d pid=%d\n", g_rank, ::getpid());
      std::fflush(stdout);
      int got = 0;
      ::sigwait(&set, &got);
    }
    if (has_error_file) {
      const std::string path = env("TORCHELASTIC_ERROR_FILE");
      if (FILE* f = std::fopen(path.c_str(), "w")) {
        std::fprintf(f,
                     "{\"message\": {\"message\": \"%s\", \"extraInfo\": {\"py_callstack\": "
                     "\"Traceback...\", \"timestamp\": \"%ld\"}}}\n",
                     error_msg.c_str(), static_cast<long>(std::time(nullptr)));
        std::fclose(f);
      }
    }
    for (const auto& line : control_lines) {
      if (FILE* f = std::fopen(env("CRUN_CONTROL_FILE").c_str(), "a")) {
        std::fprintf(f, "%s\n", line.c_str());
        std::fclose(f);
      } else {
        std::fprintf(stderr, "test_worker: cannot open CRUN_CONTROL_FILE '%s'\n", env("CRUN_CONTROL_FILE").c_str());
        return 72;
      }
    }
    if (has_last_words) {
      (void)!::write(2, last_words.data(), last_words.size());
    }
    if (raise_sig != 0) {
      ::signal(raise_sig, SIG_DFL);
      ::raise(raise_sig);
    }
    if (exit_code >= 0) return exit_code;
  }
  const bool world_reached = hang_unless_world >= 0 && std::atoi(env("WORLD_SIZE").c_str()) == hang_unless_world;
  if (hang && (hang_before < 0 || restart < hang_before) && !world_reached) {
    if (named_hang && local_rank == elsewhere_rank) hang_elsewhere();
    if (named_hang) hang_in_named_function();
    say_ready();
    while (true) ::pause();
  }
  return 0;
}
