// Prometheus' text exposition format (0.0.4) for the agent's /metrics (agent/operator_view.h).
//
// Contract
//   - exposition_text(families): each family's "# HELP" and "# TYPE" lines, then its samples
//     "name{labels} value" in the order given; a family without samples is left out. Values
//     print with 17 significant digits ("NaN" for NaN).
//   - labels({{"k", "v"}, ...}): "{k=\"v\",...}" with backslash, double quote and newline
//     escaped as the format says ("" for none).
//
// Threading
//   Pure functions.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace crun {

struct MetricFamily {
  std::string name;
  const char* type;  // "counter" or "gauge"
  const char* help;
  std::vector<std::pair<std::string, double>> samples;  // labels text (labels()), value
};

std::string labels(const std::vector<std::pair<std::string, std::string>>& pairs);
std::string exposition_text(const std::vector<MetricFamily>& families);

}  // namespace crun
