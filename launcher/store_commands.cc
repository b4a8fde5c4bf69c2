#include "launcher/store_commands.h"


#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <cstdio>
#include <iostream>

#include "base/exit_codes.h"
#include "base/log.h"
#include "store/store_client.h"
#include "store/store_server.h"

namespace crun {

namespace {
// CLI11 prints its own message; we keep crun's convention: one line on stderr, exit 2.
int usage_error(const CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == 0) {
    std::cout << app.help();
    return 0;
  }
  std::fprintf(stderr, "crun %s: %s\n", app.get_name().c_str(), e.what());
  return kExitUsage;
}

std::string token_from_env(const std::string& flag, const EnvSnapshot& env) {
  if (!flag.empty()) return flag;
  return env.get("CRUN_RDZV_TOKEN").value_or("");
}

// CRUN_STORE_TCP_ONLY=1: no local socket (store/local_socket.h), TCP alone.
bool local_socket_from_env(const EnvSnapshot& env) { return env.get("CRUN_STORE_TCP_ONLY") != std::optional<std::string>("1"); }
}  // namespace

int run_store_server_command(int argc, char** argv, const EnvSnapshot& env) {
  CLI::App app("Run crun's key-value store as a daemon until SIGINT/SIGTERM", "store-server");
  StoreServerOptions options;
  options.host = "0.0.0.0";
  options.local_socket = local_socket_from_env(env);
  std::string token;
  std::string log_level = "warn";
  app.add_option("--host", options.host, "address to listen on")->capture_default_str();
  app.add_option("--port", options.port, "port (0 = any free port)")->capture_default_str();
  app.add_option("--token", token, "shared secret clients must present (default: $CRUN_RDZV_TOKEN)");
  app.add_option("--max-connections", options.max_connections)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--max-queued-reply-bytes", options.max_queued_reply_bytes,
                 "replies queued for all connections that have not read them (1GiB, 64MiB, bytes; 0: no bound) "
                 "before the connection with the most is dropped")
      ->capture_default_str()
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--log-level", log_level)->check(CLI::IsMember({"debug", "info", "warn", "error"}))->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return usage_error(app, e);
  }
  options.log_closes = log_level == "debug" || log_level == "info";
  if (log_level == "error") options.log = [](const std::string&) {};  // the store logs warnings only
  options.token = token_from_env(token, env);
  try {
    boost::asio::io_context io(1);
    StoreServer server(io, options);
    std::printf("%s\n", server.endpoint().c_str());
    std::fflush(stdout);
    boost::asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](const boost::system::error_code&, int) { server.stop(); });
    const LogRedirect never_blocks(stderr_without_blocking());  // a stalled stderr never stalls the store
    io.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crun store-server: %s\n", e.what());
    return 1;
  }
  return 0;
}

int run_store_client_command(int argc, char** argv, const EnvSnapshot& env) {
  CLI::App app("One-shot store client for debugging", "store");
  app.require_subcommand(1);
  std::string endpoint_text;
  std::string token;
  double timeout_s = 5;
  app.add_option("--endpoint", endpoint_text, "store host:port")->required();
  app.add_option("--token", token, "shared secret (default: $CRUN_RDZV_TOKEN)");
  app.add_option("--timeout", timeout_s, "seconds to wait")->capture_default_str()->check(CLI::PositiveNumber);
  std::string key, value, prefix;
  std::int64_t delta = 1;
  std::size_t limit = 1000;
  auto* get = app.add_subcommand("get", "print a key's value (waits up to --timeout)");
  get->add_option("key", key)->required();
  auto* set = app.add_subcommand("set", "set a key");
  set->add_option("key", key)->required();
  set->add_option("value", value)->required();
  auto* add = app.add_subcommand("add", "add to an integer key and print the result");
  add->add_option("key", key)->required();
  add->add_option("delta", delta)->capture_default_str();
  auto* keys = app.add_subcommand("keys", "list keys under a prefix");
  keys->add_option("prefix", prefix);
  keys->add_option("--limit", limit)->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return usage_error(app, e);
  }
  try {
    auto endpoint = StoreEndpoint::parse(endpoint_text);
    StoreClientOptions options;
    auto timeout = Millis(static_cast<long long>(timeout_s * 1000));
    options.connect_timeout = timeout;
    options.timeout = timeout;
    options.token = token_from_env(token, env);
    options.local_socket = local_socket_from_env(env);
    TcpStore store(endpoint, options);
    if (*get) std::cout << store.get(key, timeout) << "\n";
    if (*set) store.set(key, value);
    if (*add) std::cout << store.add(key, delta) << "\n";
    if (*keys)
      for (auto& k : store.list_keys(prefix, limit)) std::cout << k << "\n";
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "crun store: %s\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crun store: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace crun
