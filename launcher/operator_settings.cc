#include "launcher/operator_settings.h"

#include <arpa/inet.h>

#include "launcher/option_values.h"

namespace crun {

namespace {

[[noreturn]] void usage(const std::string& message) { throw LaunchUsageError(message); }

std::optional<std::uint16_t> check_port(const std::string& text) {
  if (trim(text).empty()) return std::nullopt;
  const auto v = parse_long(text);
  if (!v || *v < 0 || *v > 65535) usage("--health-check-port: expected a port 0-65535, got '" + text + "'");
  return static_cast<std::uint16_t>(*v);
}

std::string check_addr(const std::string& text) {
  const std::string t = trim(text);
  unsigned char buf[16];
  if (::inet_pton(AF_INET, t.c_str(), buf) != 1 && ::inet_pton(AF_INET6, t.c_str(), buf) != 1) {
    usage("--health-check-addr: expected an IP address (127.0.0.1, 0.0.0.0, ::), got '" + text + "'");
  }
  return t;
}

std::string check_event_log_handler(const std::string& text) {
  if (text == "null" || text == "console" || text == "dynamic_rendezvous") return text;
  if (text.rfind("jsonl:", 0) == 0) {
    if (text.size() == 6) usage("--event-log-handler: jsonl: needs a path (jsonl:/path/events.jsonl)");
    return text;
  }
  usage("--event-log-handler: expected null, console, dynamic_rendezvous or jsonl:PATH, got '" + text + "'");
}

}  // namespace

void plan_operator_settings(const SettingTexts& s, LaunchPlan& plan) {
  const auto& port = s.at("health_check_port");
  plan.health_check_port = {parse_setting(port, check_port), port.source};
  const auto& addr = s.at("health_check_addr");
  plan.health_check_addr = {parse_setting(addr, check_addr), addr.source};
  const auto& events = s.at("event_log_handler");
  plan.event_log_handler = {parse_setting(events, check_event_log_handler), events.source};
}

}  // namespace crun
