#include "agent/node_check.h"

#include <unistd.h>

#include <string_view>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "agent/bounded_command.h"
#include "agent/worker_process.h"

namespace crun {

namespace asio = boost::asio;

std::optional<std::vector<std::string>> split_command(const std::string& text, std::string& error) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else if (c == '\'') {
      const std::size_t end = text.find('\'', i + 1);
      if (end == std::string::npos) {
        error = "unbalanced ' in '" + text + "'";
        return std::nullopt;
      }
      word.append(text, i + 1, end - i - 1);
      i = end;
      in_word = true;
    } else if (c == '"') {
      std::size_t j = i + 1;
      for (; j < text.size() && text[j] != '"'; ++j) {
        if (text[j] == '\\' && j + 1 < text.size() && std::string_view("\\\"$`").find(text[j + 1]) != std::string_view::npos) ++j;
        word.push_back(text[j]);
      }
      if (j >= text.size()) {
        error = "unbalanced \" in '" + text + "'";
        return std::nullopt;
      }
      i = j;
      in_word = true;
    } else if (c == '\\') {
      if (i + 1 < text.size()) word.push_back(text[++i]);
      in_word = true;
    } else {
      word.push_back(c);
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  if (words.empty()) {
    error = "no command in '" + text + "'";
    return std::nullopt;
  }
  return words;
}

namespace {

// The last `lines` non-empty lines of `tail`, one line (" | " between them).
std::string last_lines(const std::string& tail, int lines) {
  std::vector<std::string> kept;
  std::size_t end = tail.size();
  while (end > 0 && static_cast<int>(kept.size()) < lines) {
    const std::size_t nl = tail.rfind('\n', end - 1);
    const std::size_t begin = nl == std::string::npos ? 0 : nl + 1;
    std::string line = tail.substr(begin, end - begin);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    for (char& ch : line) {
      if (static_cast<unsigned char>(ch) < 0x20) ch = ' ';
    }
    if (line.size() > 200) line = "..." + line.substr(line.size() - 197);  // the end of a long line
    if (!line.empty()) kept.insert(kept.begin(), std::move(line));
    if (nl == std::string::npos) break;
    end = nl;
  }
  std::string out;
  for (const auto& l : kept) out += (out.empty() ? "" : " | ") + l;
  return out;
}

}  // namespace

CommandCheck::CommandCheck(asio::io_context& io, std::string command, std::chrono::milliseconds timeout,
                           std::string search_path, WorkerContainment* containment)
    : io_(io), command_(std::move(command)), timeout_(timeout), search_path_(std::move(search_path)), containment_(containment) {}

CommandCheck::~CommandCheck() = default;

void CommandCheck::run(std::function<void(NodeCheckResult)> done) {
  running_.reset();  // a check still running is killed and never answers
  std::string error;
  auto words = split_command(command_, error);
  if (!words) {
    asio::post(io_, [done, command = command_, error] { done({command, error}); });
    return;
  }
  const auto program = resolve_executable(words->front(), search_path_);
  if (!program || ::access(program->c_str(), X_OK) != 0) {
    asio::post(io_, [done, command = command_] { done({command, "not found"}); });
    return;
  }
  std::vector<std::string> argv = *words;
  argv.front() = *program;
  const auto seconds = std::to_string(timeout_.count() / 1000) + (timeout_.count() % 1000 ? "." + std::to_string(timeout_.count() % 1000 / 100) : "");
  running_ = std::make_unique<BoundedCommand>(io_, timeout_, BoundedCommand::Keep::kTail, kTailBytes, containment_);
  running_->run(argv, [done = std::move(done), command = command_, seconds](BoundedResult r) {
    NodeCheckResult result{command, ""};
    const std::string said = last_lines(r.output, kTailLines);
    if (!r.status) {
      result.reason = r.start_error;
    } else if (r.timed_out) {
      result.reason = "no answer within " + seconds + " s (killed)" + (said.empty() ? "" : ": " + said);
    } else if (r.status->failed()) {
      result.reason = r.status->describe() + (said.empty() ? "" : ": " + said);
    }
    done(result);
  });
}

}  // namespace crun
