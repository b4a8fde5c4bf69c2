#include "launcher/launch_inputs.h"

#include <dirent.h>
#include <netdb.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <system_error>
#include <thread>

#include "base/addresses.h"

extern char** environ;

namespace crun {

std::optional<std::string> EnvSnapshot::get(const std::string& name) const {
  const auto it = vars.find(name);
  if (it == vars.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

std::vector<std::string> EnvSnapshot::entries() const {
  std::vector<std::string> out;
  out.reserve(vars.size());
  for (const auto& [k, v] : vars) out.push_back(k + "=" + v);
  return out;
}

EnvSnapshot EnvSnapshot::from_process() {
  EnvSnapshot env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const auto eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env.vars.emplace(entry.substr(0, eq), entry.substr(eq + 1));  // the first of duplicates, as getenv
  }
  return env;
}

namespace {

int count_gpus() {
  int n = 0;
  if (DIR* d = ::opendir("/dev")) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 6 && name.rfind("nvidia", 0) == 0 &&
          std::all_of(name.begin() + 6, name.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
        ++n;
      }
    }
    ::closedir(d);
  }
  return n;
}

std::vector<std::string> resolve_name(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::vector<std::string> out;
  if (name.empty() || ::getaddrinfo(name.c_str(), nullptr, &hints, &res) != 0) return out;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    char host[NI_MAXHOST];
    if (::getnameinfo(ai->ai_addr, ai->ai_addrlen, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) continue;
    std::string a(host);
    if (auto pct = a.find('%'); pct != std::string::npos) a.erase(pct);  // an IPv6 zone id
    out.push_back(a);
  }
  ::freeaddrinfo(res);
  return out;
}

CpuTopology this_host_topology() {
  CpuTopology t = read_cpu_topology("/sys");
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) t.allowed.push_back(c);
    }
  }
  return t;
}

// Slurm node names need not resolve: ask Slurm for the address it reaches the node at. The name
// goes into a shell command, so only hostname characters are accepted.
std::optional<std::string> scontrol_node_addr(const std::string& name) {
  const bool plain = !name.empty() && name.find_first_not_of(
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") == std::string::npos;
  if (!plain) return std::nullopt;
  const std::string command = "timeout 15 scontrol show node -o '" + name + "' 2>/dev/null";
  FILE* pipe = ::popen(command.c_str(), "re");  // "e": close-on-exec
  if (pipe == nullptr) return std::nullopt;
  std::string all;
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) all.append(buf, n);
  ::pclose(pipe);
  const auto at = all.find("NodeAddr=");
  if (at == std::string::npos) return std::nullopt;
  const auto end = all.find_first_of(" \t\n", at);
  std::string addr = all.substr(at + 9, end == std::string::npos ? std::string::npos : end - at - 9);
  if (addr.empty()) return std::nullopt;
  return addr;
}

}  // namespace

HostFacts HostFacts::of_this_host() {
  HostFacts host;
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0') host.hostname = name;
  host.addresses = Lazy<std::vector<std::string>>::read_by([]() -> std::vector<std::string> {
    try {
      return local_addresses();
    } catch (const std::system_error&) {
      return {};  // getifaddrs failed: no address counts as ours (is_host=1 still makes this node the host)
    }
  });
  host.cpus = Lazy<int>::read_by([] { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); });
  host.gpus = Lazy<int>::read_by(count_gpus);
  host.cpu_topology = Lazy<CpuTopology>::read_by(this_host_topology);
  host.resolve = resolve_name;
  host.slurm_node_addr = scontrol_node_addr;
  host.writable_dir = [](const std::string& dir) { return ::access(dir.c_str(), W_OK | X_OK) == 0; };
  return host;
}

}  // namespace crun
