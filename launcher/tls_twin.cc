#include "launcher/tls_twin.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "rendezvous/tls_library.h"

namespace crun {

bool needs_tls_twin(const LaunchOptions& options) {
  const auto& multi = options.agent.multi_node;
  const bool speaks_tls = multi && multi->backend == MultiNodeConfig::Backend::kEtcdV3 && multi->etcd.tls;
  return speaks_tls && !tls_loadable();
}

std::string exec_tls_twin(const std::vector<std::string>& argv) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "cannot find crun-tls: /proc/self/exe: " + ec.message();
  const std::string twin = (self.parent_path() / "crun-tls").string();
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv(twin.c_str(), args.data());
  return "an https etcd needs crun-tls (crun linked dynamically, for OpenSSL): cannot run " + twin + ": " +
         std::strerror(errno);
}

}  // namespace crun
