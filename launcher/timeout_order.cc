#include "launcher/timeout_order.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "launcher/option_values.h"

namespace crun {

using std::chrono::milliseconds;

std::string timeout_text(milliseconds d) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

milliseconds pg_timeout_ceiling(milliseconds pg) { return pg * 9 / 10; }

namespace {

// "--pg-timeout 300 s"; torch's default (no source): "600 s (torch's default ...)".
std::string named(const TimeoutValue& t) {
  if (t.source.empty()) {
    return timeout_text(t.value) + " (torch's default: 10 min for NCCL from torch 2.2, 30 min otherwise; --pg-timeout sets it)";
  }
  return t.source + " " + timeout_text(t.value);
}

}  // namespace

TimeoutCheck check_timeout_order(const TimeoutStack& t) {
  TimeoutCheck out;
  if (!t.nccl_spelling_conflicts.empty()) {
    out.conflict = t.nccl_spelling_conflicts.front() + ": torch 2.x reads the first, torch 1.x the second; set one, or both alike";
  } else if (t.pg_variable && t.pg_variable->value != t.pg.value && t.pg.source != t.pg_variable->source) {
    out.conflict = named(t.pg) + " and " + named(*t.pg_variable) + " disagree; the workers read " + kPgTimeoutVariable +
                   ": give one";
  } else if (t.heartbeat && t.heartbeat->value >= t.pg.value) {
    out.conflict = named(*t.heartbeat) + " is not below the process group's timeout, " + named(t.pg) +
                   ": a rank hung outside a collective must be named by crun before its peers' collectives time out";
  } else if (t.rendezvous_liveness && t.rendezvous_liveness->value >= t.pg.value) {
    out.conflict = named(*t.rendezvous_liveness) + " is not below the process group's timeout, " + named(t.pg) +
                   ": a dead node must be noticed by the rendezvous before the survivors' collectives time out";
  }
  if (t.heartbeat && t.rendezvous_liveness && t.rendezvous_liveness->value >= t.heartbeat->value) {
    out.notes.push_back("crun: note: " + named(*t.rendezvous_liveness) + " is not below " + named(*t.heartbeat) +
                        ": when a node dies, the survivors' watchdogs may call their own ranks hung before the rendezvous "
                        "notices the node gone");
  }
  if (t.heartbeat_auto && t.rendezvous_liveness) {
    out.notes.push_back("crun: note: --heartbeat-timeout auto may learn a value below " + named(*t.rendezvous_liveness) +
                        ": when a node dies, the survivors' watchdogs may call their own ranks hung before the rendezvous "
                        "notices the node gone");
  }
  if (t.nccl_timeout_off) {
    out.notes.push_back("crun: note: NCCL's async error handling and blocking wait are both off: a hung NCCL collective "
                        "never times out on its own; only --heartbeat-timeout ends it");
  }
  return out;
}

namespace {

[[noreturn]] void usage(const std::string& message) { throw LaunchUsageError(message); }

// One NCCL switch under torch 2.x's name (TORCH_NCCL_X) and torch 1.x's (NCCL_X): their values in
// `env` (the 2.x name first), a conflict when both are set and differ.
struct NcclSwitch {
  std::optional<std::string> value;  // what torch 2.x reads; crun mirrors it to the other name
  std::string conflict;
};

NcclSwitch nccl_switch(const EnvSnapshot& env, const std::string& name) {
  const auto modern = env.get("TORCH_NCCL_" + name);
  const auto legacy = env.get("NCCL_" + name);
  NcclSwitch out;
  out.value = modern ? modern : legacy;
  if (modern && legacy && trim(*modern) != trim(*legacy)) {
    out.conflict = "TORCH_NCCL_" + name + "=" + *modern + " and NCCL_" + name + "=" + *legacy + " disagree";
  }
  return out;
}

milliseconds positive_seconds(const std::string& text, const std::string& what) {
  const std::string t = trim(text);
  char* end = nullptr;
  const double v = t.empty() ? 0 : std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size() || !std::isfinite(v) || !(v > 0) || v > 1e7) {
    usage(what + ": expected seconds > 0, got '" + text + "'");
  }
  return milliseconds(static_cast<long long>(v * 1000.0 + 0.5));
}

}  // namespace

void plan_timeouts(const SettingTexts& s, const EnvSnapshot& env, LaunchPlan& plan) {
  TimeoutStack t;
  const auto& pg = s.at("pg_timeout");
  if (!trim(pg.value).empty()) {
    const std::string flag = pg.source == kPgTimeoutVariable ? std::string(kPgTimeoutVariable) : pg.source;
    t.pg = {positive_seconds(pg.value, flag), flag};
    plan.pg_timeout = {t.pg.value, pg.source};
  } else {
    t.pg = {kTorchLowestDefaultPgTimeout, ""};
    plan.pg_timeout = {std::nullopt, "default"};
  }
  if (const auto var = env.get(kPgTimeoutVariable)) {
    t.pg_variable = TimeoutValue{positive_seconds(*var, kPgTimeoutVariable), kPgTimeoutVariable};
  }
  t.heartbeat_auto = plan.heartbeat_auto.value;
  if (plan.heartbeat_timeout.value.count() > 0) {
    t.heartbeat = TimeoutValue{plan.heartbeat_timeout.value, plan.heartbeat_timeout.source};
  }
  if (plan.multi_node) {
    const auto& c = plan.multi_node->config;
    if (c.backend == MultiNodeConfig::Backend::kEtcdV3) {
      t.rendezvous_liveness = TimeoutValue{c.etcd.lease_ttl, "--rdzv-conf lease_ttl"};
    } else {
      t.rendezvous_liveness = TimeoutValue{c.rendezvous.heartbeat_timeout, "--rdzv-conf heartbeat_timeout"};
    }
  }
  const auto handling = nccl_switch(env, "ASYNC_ERROR_HANDLING");
  const auto blocking = nccl_switch(env, "BLOCKING_WAIT");
  for (const auto* sw : {&handling, &blocking}) {
    if (!sw->conflict.empty()) t.nccl_spelling_conflicts.push_back(sw->conflict);
  }
  t.nccl_timeout_off = handling.value && trim(*handling.value) == "0" && !(blocking.value && trim(*blocking.value) == "1");
  const TimeoutCheck check = check_timeout_order(t);
  if (!check.conflict.empty()) usage(check.conflict);
  plan.timeout_notes = check.notes;
  plan.pg_timeout_in_effect = {t.pg.value, t.pg.source.empty() ? "default" : t.pg.source};
}

}  // namespace crun
