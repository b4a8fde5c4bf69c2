#include "agent/metrics_text.h"

#include <cmath>
#include <cstdio>

namespace crun {

namespace {

std::string escaped(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

std::string labels(const std::vector<std::pair<std::string, std::string>>& pairs) {
  if (pairs.empty()) return "";
  std::string out = "{";
  for (const auto& [k, v] : pairs) out += (out.size() > 1 ? "," : "") + k + "=\"" + escaped(v) + "\"";
  return out + "}";
}

std::string exposition_text(const std::vector<MetricFamily>& families) {
  std::string out;
  for (const auto& f : families) {
    if (f.samples.empty()) continue;
    out += "# HELP " + f.name + " " + f.help + "\n# TYPE " + f.name + " " + f.type + "\n";
    for (const auto& [l, v] : f.samples) out += f.name + l + " " + number(v) + "\n";
  }
  return out;
}

}  // namespace crun
