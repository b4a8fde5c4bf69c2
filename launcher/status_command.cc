#include "launcher/status_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "agent/failure_report.h"
#include "agent/node_status.h"
#include "agent/stack_groups.h"
#include "base/exit_codes.h"
#include "base/utc_text.h"
#include "store/store_client.h"

namespace crun {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using nlohmann::json;

constexpr std::size_t kMaxAnswer = 16u << 20;

// http://HOST:PORT[/...] or HOST:PORT ([v6]:PORT): the host and port as the store's endpoints
// are read (StoreEndpoint::parse). Throws StatusUsageError.
StoreEndpoint parse_url(const std::string& url) {
  std::string rest = url;
  if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
  else if (rest.find("://") != std::string::npos) throw StatusUsageError("'" + url + "': only http:// URLs");
  if (auto slash = rest.find('/'); slash != std::string::npos) rest.resize(slash);
  StoreEndpoint ep;
  try {
    ep = StoreEndpoint::parse(rest);
  } catch (const std::invalid_argument& e) {
    throw StatusUsageError(e.what());
  }
  if (ep.port == 0) throw StatusUsageError("'" + url + "': port 0 is no agent's");
  return ep;
}

// GET /status within `timeout`; throws std::runtime_error saying why not.
std::string fetch_status(const StoreEndpoint& t, std::chrono::milliseconds timeout) {
  asio::io_context io;
  tcp::resolver resolver(io);
  beast::tcp_stream stream(io);
  beast::flat_buffer buffer;
  http::request<http::empty_body> req(http::verb::get, "/status", 11);
  req.set(http::field::host, t.host);
  req.set(http::field::user_agent, "crun-status");
  req.set(http::field::accept, "application/json");
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxAnswer);
  beast::error_code failed;  // the first step that failed
  std::string step;
  stream.expires_after(timeout);
  resolver.async_resolve(t.host, std::to_string(t.port), [&](beast::error_code ec, tcp::resolver::results_type results) {
    if (ec) return void((failed = ec, step = "cannot resolve " + t.host + ": "));
    stream.async_connect(results, [&](beast::error_code ec2, const tcp::endpoint&) {
      if (ec2) return void(failed = ec2);
      http::async_write(stream, req, [&](beast::error_code ec3, std::size_t) {
        if (ec3) return void(failed = ec3);
        http::async_read(stream, buffer, parser, [&](beast::error_code ec4, std::size_t) { failed = ec4; });
      });
    });
  });
  io.run_for(timeout + std::chrono::seconds(1));
  if (failed == beast::error::timeout || failed == asio::error::operation_aborted || (!failed && !parser.is_done())) {
    throw std::runtime_error("no answer within " + std::to_string(timeout.count() / 1000.0).substr(0, 4) + " s");
  }
  if (failed) throw std::runtime_error(step + failed.message());
  const auto& res = parser.get();
  if (res.result() != http::status::ok) {
    throw std::runtime_error("answered " + std::to_string(res.result_int()) + " " + std::string(res.reason()));
  }
  return res.body();
}

// Rows of cells as aligned columns (two blanks apart).
std::string columns(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& r : rows) {
    if (width.size() < r.size()) width.resize(r.size(), 0);
    for (std::size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

// The job's merged groups of a /status document: nullopt when it has none (an older agent's
// document has no "stack_groups"); throws std::runtime_error when they do not read back.
std::optional<StackGroups> job_stacks(const json& doc) {
  const auto it = doc["job"].find("stack_groups");
  if (it == doc["job"].end() || it->is_null()) return std::nullopt;
  std::string why;
  auto groups = StackGroups::from_json(it->dump(), &why);
  if (!groups) throw std::runtime_error("the answer is not a crun /status document (" + why + ")");
  return groups;
}

json status_document(const std::string& status_json) {
  json doc = json::parse(status_json, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("job") || !doc.contains("node") || !doc["job"].is_object() ||
      !doc["job"].contains("nodes") || !doc["job"]["nodes"].is_array()) {
    throw std::runtime_error("the answer is not a crun /status document");
  }
  return doc;
}

}  // namespace

std::string format_job_stacks(const std::string& status_json) {
  const json doc = status_document(status_json);
  (void)format_job_status(status_json);  // every record checked, as for the tables
  const auto groups = job_stacks(doc);
  if (!groups || groups->empty()) return "no stacks captured\n";
  std::string out = "stacks before the kill (attempt " + std::to_string(groups->attempt) + "), grouped across " +
                    std::to_string(groups->rank_count()) + " rank(s):\n";
  for (const auto& g : groups->groups) {
    out += "\n  " + g.line() + "\n";
    for (std::size_t t = 0; t < g.threads.size(); ++t) {
      if (g.threads.size() > 1 || g.threads_left_out > 0) out += "    thread " + std::to_string(t + 1) + ":\n";
      for (const auto& frame : g.threads[t]) out += "      " + frame + "\n";
    }
    if (g.threads_left_out > 0) out += "    " + std::to_string(g.threads_left_out) + " more thread(s) not shown\n";
  }
  if (groups->groups_left_out > 0) out += "\n  " + groups->lines().back() + "\n";
  return out;
}

std::string format_job_status(const std::string& status_json) {
  // Every record is checked as a node's published status is (agent/node_status.h): the answer
  // comes from the network.
  const json doc = status_document(status_json);
  const auto stacks = job_stacks(doc);
  const auto self = NodeStatus::from_json(doc["node"].dump());
  if (!self) throw std::runtime_error("the answer is not a crun /status document (its node record)");
  std::vector<NodeStatus> nodes;
  for (const auto& n : doc["job"]["nodes"]) {
    auto s = NodeStatus::from_json(n.dump());
    if (!s) throw std::runtime_error("the answer is not a crun /status document (a node record)");
    nodes.push_back(std::move(*s));
  }
  std::size_t workers = 0;
  std::size_t running = 0;
  std::size_t in_round = 0;  // nodes in no round (node rank -1: their node checks fail) are listed, not counted
  for (const auto& n : nodes) {
    in_round += n.node_rank >= 0;
    workers += n.workers.size();
    for (const auto& w : n.workers) running += w.state == "running";
  }
  std::string out = "job " + self->run_id + ": " + std::to_string(in_round) + " of " + std::to_string(self->nodes) +
                    " node(s), " + std::to_string(running) + " of " + std::to_string(workers) + " worker(s) running, restart " +
                    std::to_string(self->restart_count) + " of " + std::to_string(self->max_restarts) + ", " +
                    (self->health.empty() ? "healthy" : self->health) + "\n\n";
  if (!self->heartbeat_timeout.empty()) out.insert(out.size() - 1, "heartbeat timeout: " + self->heartbeat_timeout + "\n");
  std::vector<std::vector<std::string>> node_rows{{"NODE", "HOST", "ADDRESS", "STATE", "WORKERS", "RESTARTS", "ROUND", "HEALTH"}};
  std::vector<std::pair<int, std::vector<std::string>>> ranks;
  std::optional<FailureReport> failure;
  for (const auto& n : nodes) {
    int up = 0;
    for (const auto& w : n.workers) up += w.state == "running";
    const std::string health = !n.health.empty() ? n.health : !n.node_check.empty() ? "node check " + n.node_check : "ok";
    node_rows.push_back({n.node_rank >= 0 ? std::to_string(n.node_rank) : "-", n.hostname, n.addr.empty() ? "-" : n.addr, n.state,
                         std::to_string(up) + "/" + std::to_string(n.workers.size()), std::to_string(n.restart_count),
                         std::to_string(n.rendezvous_round), health});
    for (const auto& w : n.workers) {
      char beat[32] = "-";
      if (w.heartbeat_age_s) std::snprintf(beat, sizeof beat, "%.1f s ago", *w.heartbeat_age_s);
      ranks.push_back({w.rank,
                       {std::to_string(w.rank), std::to_string(n.node_rank), std::to_string(w.local_rank), std::to_string(w.pid),
                        w.state, std::to_string(w.restarts), beat, w.step ? std::to_string(*w.step) : "-",
                        w.exit.empty() ? "-" : w.exit}});
    }
    if (!n.last_failure.empty()) {
      auto f = FailureReport::from_json(n.last_failure);
      if (f && (!failure || f->time > failure->time)) failure = std::move(f);
    }
  }
  std::sort(ranks.begin(), ranks.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::vector<std::string>> rank_rows{{"RANK", "NODE", "LOCAL", "PID", "STATE", "RESTARTS", "HEARTBEAT", "STEP", "EXIT"}};
  for (auto& [rank, row] : ranks) rank_rows.push_back(std::move(row));
  out += columns(node_rows) + "\n" + columns(rank_rows);
  if (!self->excluded_nodes.empty() || self->exclusions_total > 0) {  // node rank 0's view of the job
    out += "\nexcluded nodes (" + std::to_string(self->exclusions_total) + " exclusion(s) so far):\n";
    std::vector<std::vector<std::string>> rows{{"HOST", "ADDRESS", "NODE ID", "TIMES", "UNTIL", "WHY"}};
    for (const auto& e : self->excluded_nodes) {
      const std::string when = utc_text(static_cast<std::int64_t>(e.until_unix) * 1000000, 0);
      rows.push_back({e.hostname, e.addr.empty() ? "-" : e.addr, e.node_id, std::to_string(e.times), when, e.reason});
    }
    if (rows.size() > 1) out += columns(rows);
    else out += "  none now\n";
  }
  if (failure) {  // the agent's own words for it, without its "crun: " prefixes
    out += "\nlast failure:\n";
    std::size_t at = 0;
    const std::string text = failure->format_text();
    while (at < text.size()) {
      std::size_t end = text.find('\n', at);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(at, end - at);
      if (line.rfind("crun: ", 0) == 0) line = line.substr(6);
      out += "  " + line + "\n";
      at = end + 1;
    }
  }
  if (stacks && !stacks->empty()) out += "\n" + stacks->text("") + "(crun status --stacks: each group's frames)\n";
  return out;
}

StatusRequest parse_status_arguments(const std::vector<std::string>& args) {
  CLI::App app{"Prints the job an agent's --health-check-port serves (node rank 0's: the whole job).", "crun status"};
  app.set_help_flag("-h,--help", "print this help and exit");
  StatusRequest out;
  std::string timeout = "5";
  app.add_option("url", out.url, "the agent: http://HOST:PORT[/] or HOST:PORT")->type_name("URL");
  app.add_flag("--json", out.as_json, "print the /status document as the agent sent it");
  app.add_flag("--stacks", out.stacks,
               "print the stacks before the kill grouped across ranks, each group with its frames (with --json: the job's "
               "stack_groups)");
  app.add_option("--timeout", timeout, "seconds to wait for the answer, in (0, 3600]; default 5")->type_name("SECONDS");
  std::vector<const char*> argv{"crun status"};
  for (const auto& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::CallForHelp&) {
    out.help = app.help();
    return out;
  } catch (const CLI::ParseError& e) {
    std::string why = e.what();
    std::replace(why.begin(), why.end(), '\n', ' ');
    throw StatusUsageError(why);
  }
  double seconds = 0;
  try {
    std::size_t used = 0;
    seconds = std::stod(timeout, &used);
    if (used != timeout.size()) seconds = 0;
  } catch (const std::exception&) {
    seconds = 0;
  }
  if (!(seconds > 0 && seconds <= 3600)) throw StatusUsageError("--timeout: expected seconds (0-3600], got '" + timeout + "'");
  out.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
  if (out.url.empty()) throw StatusUsageError("which agent? give its URL");
  const StoreEndpoint agent = parse_url(out.url);
  out.host = agent.host;
  out.port = agent.port;
  return out;
}

int run_status_command(const std::vector<std::string>& args) {
  StatusRequest request;
  try {
    request = parse_status_arguments(args);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "crun status: %s (usage: crun status http://HOST:PORT [--json] [--stacks] [--timeout SECONDS])\n", e.what());
    return kExitUsage;
  }
  if (request.help) {
    std::fwrite(request.help->data(), 1, request.help->size(), stdout);
    return 0;
  }
  const std::string& url = request.url;
  try {
    const std::string body = fetch_status(StoreEndpoint{request.host, request.port}, request.timeout);
    if (request.stacks && request.as_json) {
      (void)format_job_status(body);  // every record checked
      const auto groups = job_stacks(status_document(body));
      const std::string text = (groups ? groups->to_json() : std::string("null")) + "\n";
      std::fwrite(text.data(), 1, text.size(), stdout);
    } else if (request.stacks) {
      const std::string text = format_job_stacks(body);
      std::fwrite(text.data(), 1, text.size(), stdout);
    } else if (request.as_json) {
      if (json::parse(body, nullptr, false).is_discarded()) throw std::runtime_error("the answer is not JSON");
      std::fwrite(body.data(), 1, body.size(), stdout);
      if (body.empty() || body.back() != '\n') std::fputc('\n', stdout);
    } else {
      const std::string text = format_job_status(body);
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crun status: cannot read %s: %s\n", url.c_str(), e.what());
    return 1;
  }
  return 0;
}

}  // namespace crun
