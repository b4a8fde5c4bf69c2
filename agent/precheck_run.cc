#include "agent/precheck_run.h"

#include <fcntl.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace crun {

namespace {

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", x);
  return buf;
}

}  // namespace

std::string precheck_beside_this_program() {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "crun-precheck";
  const std::string path(self, static_cast<std::size_t>(n));
  return path.substr(0, path.rfind('/') + 1) + "crun-precheck";
}

void use_precheck(WorkerLaunchPlan& plan, const std::string& program, double slowdown, const std::string& result_file) {
  plan.program = program;
  plan.argv = {program, "--slowdown", number(slowdown)};
  plan.env.push_back(std::string(kPrecheckResultVariable) + "=" + result_file);
}

PrecheckReading read_precheck(const std::string& path) {
  PrecheckReading r;
  // Its one line (a verdict is tens of bytes a node); a longer file is no verdict.
  constexpr std::size_t kMaxVerdictBytes = 1 << 20;
  std::string text;
  if (const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW); fd >= 0) {
    char chunk[4096];
    for (ssize_t n; text.size() <= kMaxVerdictBytes && (n = ::read(fd, chunk, sizeof chunk)) > 0;) {
      text.append(chunk, static_cast<std::size_t>(n));
    }
    ::close(fd);
    if (text.size() > kMaxVerdictBytes) text.clear();
  }
  text = text.substr(0, text.find('\n'));
  const auto j = nlohmann::json::parse(text, nullptr, false);
  try {
    if (!j.is_object()) throw std::runtime_error("no verdict");
    const int node = j.at("node").get<int>();
    const auto slow = j.at("slow").get<std::vector<int>>();
    const std::size_t nodes = j.at("nodes").size();
    r.verdict = text;
    r.proceed = slow.empty();
    std::string line = "precheck: node rank " + std::to_string(node) + " " + number(j.at("seconds").get<double>()) +
                       " s, median " + number(j.at("median").get<double>()) + " s over " + std::to_string(nodes) +
                       (nodes == 1 ? " node" : " nodes") + " (slow above " + number(j.at("slowdown").get<double>()) +
                       "x), all_reduce " + number(j.at("allreduce_seconds").get<double>()) + " s: ";
    if (slow.empty()) {
      line += "ok";
    } else {
      line += "slow node rank";
      for (int s : slow) line += " " + std::to_string(s);
      bool self = false;
      for (int s : slow) self = self || s == node;
      line += self ? " (this node: it asks to be excluded)" : "; waiting for the next round";
    }
    r.line = line;
  } catch (const std::exception&) {
    r = PrecheckReading{};
    r.line = "precheck: no verdict in " + path + "; going on";
  }
  return r;
}

}  // namespace crun
