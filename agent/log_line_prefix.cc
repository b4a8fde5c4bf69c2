#include "agent/log_line_prefix.h"

#include "agent/template_text.h"

namespace crun {

std::string log_line_prefix(const std::string& tmpl, const std::string& role, int rank, int local_rank) {
  if (tmpl.empty()) return "[" + role + std::to_string(local_rank) + "]:";
  return safe_substitute(tmpl, {{"role_name", role}, {"rank", std::to_string(rank)}, {"local_rank", std::to_string(local_rank)}});
}

}  // namespace crun
