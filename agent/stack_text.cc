#include "agent/stack_text.h"

#include <cctype>

namespace crun {
namespace {

std::string_view base_name(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

bool is_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// The C runtime's libraries: their frames are how a process waits, not where it is.
bool runtime_module(std::string_view file) {
  for (std::string_view lib : {"libc.so", "libc-", "libpthread", "ld-linux", "libgcc_s", "libstdc++"}) {
    if (starts_with(file, lib)) return true;
  }
  return false;
}

template <typename F>
void for_each_line(std::string_view text, F&& f) {
  std::size_t start = 0;
  while (start < text.size()) {
    const auto nl = text.find('\n', start);
    const auto end = nl == std::string_view::npos ? text.size() : nl;
    f(text.substr(start, end - start));
    start = end + 1;
  }
}

// "FILE:LINE[:COL]" -> "FILE's name:LINE"; "" when the line is not such.
std::string source_text(std::string_view line) {
  auto colon = line.rfind(':');
  if (colon == std::string_view::npos) return "";
  std::string_view rest = line.substr(0, colon);
  std::string_view number = line.substr(colon + 1);
  const auto colon2 = rest.rfind(':');
  if (colon2 != std::string_view::npos && is_digits(rest.substr(colon2 + 1))) {  // FILE:LINE:COL
    number = rest.substr(colon2 + 1);
    rest = rest.substr(0, colon2);
  }
  if (!is_digits(number) || rest.empty()) return "";
  return std::string(base_name(rest)) + ":" + std::string(number);
}

}  // namespace

StackThreads parse_eu_stack(std::string_view text, std::string* complaint) {
  StackThreads threads;
  bool in_thread = false;
  bool last_was_frame = false;
  std::string pending_module;  // the last frame's runtime module, appended after its source
  auto close_frame = [&] {
    if (last_was_frame && !pending_module.empty()) threads.back().back() += " [" + pending_module + "]";
    pending_module.clear();
    last_was_frame = false;
  };
  for_each_line(text, [&](std::string_view raw) {
    const std::string_view line = trim(raw);
    if (starts_with(line, "TID ") && !line.empty() && line.back() == ':') {
      close_frame();
      threads.emplace_back();
      in_thread = true;
      return;
    }
    if (in_thread && line.size() > 1 && line[0] == '#' && std::isdigit(static_cast<unsigned char>(line[1]))) {
      close_frame();
      std::string_view rest = line.substr(1);
      while (!rest.empty() && std::isdigit(static_cast<unsigned char>(rest.front()))) rest.remove_prefix(1);
      rest = trim(rest);
      std::string_view address;
      if (starts_with(rest, "0x")) {
        const auto space = rest.find(' ');
        address = rest.substr(0, space);
        rest = space == std::string_view::npos ? std::string_view() : trim(rest.substr(space));
      }
      std::string_view name = rest;
      std::string_view module;
      if (const auto dash = rest.rfind(" - "); dash != std::string_view::npos) {
        name = trim(rest.substr(0, dash));
        module = base_name(trim(rest.substr(dash + 3)));
      } else if (starts_with(rest, "- ")) {
        name = {};
        module = base_name(trim(rest.substr(2)));
      }
      if (const auto at = name.find('@'); at != std::string_view::npos) name = name.substr(0, at);
      std::string frame;
      if (!name.empty()) frame = std::string(name);
      else if (!module.empty()) frame = "?? (" + std::string(module) + ")";
      else frame = std::string(address.empty() ? "0x?" : address) + " ??";
      threads.back().push_back(std::move(frame));
      if (!name.empty() && runtime_module(module)) pending_module = std::string(module);
      last_was_frame = true;
      return;
    }
    if (last_was_frame && !raw.empty() && (raw.front() == ' ' || raw.front() == '\t')) {
      if (std::string source = source_text(line); !source.empty()) {
        std::string& frame = threads.back().back();
        if (frame.find(" (") == std::string::npos) frame += " (" + source + ")";
        return;
      }
    }
    close_frame();
    if (complaint != nullptr && complaint->empty() && !line.empty() && !starts_with(line, "PID ")) {
      *complaint = std::string(line.substr(0, 200));
    }
  });
  close_frame();
  return threads;
}

StackThreads parse_faulthandler(std::string_view text) {
  StackThreads threads;
  for_each_line(text, [&](std::string_view raw) {
    const std::string_view line = trim(raw);
    if ((starts_with(line, "Thread 0x") || starts_with(line, "Current thread 0x")) && line.back() == ':') {
      threads.emplace_back();
      return;
    }
    if (threads.empty() || !starts_with(line, "File \"")) return;
    // File "F", line N in FUNC
    const auto quote = line.find("\", line ", 6);
    if (quote == std::string_view::npos) return;
    const std::string_view file = line.substr(6, quote - 6);
    std::string_view rest = line.substr(quote + 8);
    const auto in = rest.find(" in ");
    if (in == std::string_view::npos) return;
    const std::string_view number = rest.substr(0, in);
    const std::string_view func = rest.substr(in + 4);
    if (!is_digits(number) && number != "???") return;
    threads.back().push_back(std::string(func) + " (" + std::string(base_name(file)) + ":" + std::string(number) + ")");
  });
  return threads;
}

bool faulthandler_done(std::string_view text) {
  if (text.empty() || text.back() != '\n') return false;
  text.remove_suffix(1);
  const auto nl = text.rfind('\n');
  const std::string_view last = trim(nl == std::string_view::npos ? text : text.substr(nl + 1));
  if (!starts_with(last, "File \"")) return false;
  const auto in = last.rfind(" in ");
  if (in == std::string_view::npos) return false;
  const std::string_view func = last.substr(in + 4);
  return func == "<module>" || func == "_run_module_as_main";
}

bool own_frame(std::string_view frame) {
  if (frame.empty() || frame.back() == ']') return false;  // the C runtime's, marked
  if (starts_with(frame, "??") || frame.find(" ??") != std::string_view::npos) return false;  // unnamed
  return frame.front() != '_' && !starts_with(frame, "std::") && !starts_with(frame, "__gnu_cxx::");
}

std::string where_text(const RankStack& stack) {
  for (auto it = stack.python_threads.rbegin(); it != stack.python_threads.rend(); ++it) {
    if (!it->empty()) return it->front();
  }
  if (stack.threads.empty() || stack.threads.front().empty()) return "";
  const auto& frames = stack.threads.front();
  for (const auto& frame : frames) {
    if (own_frame(frame)) return frame;
  }
  for (const auto& frame : frames) {  // none of the program's own: the first named, not the C runtime's
    const bool unnamed = frame.rfind("??", 0) == 0 || frame.find(" ??") != std::string::npos;
    if (!frame.empty() && frame.back() != ']' && !unnamed) return frame;
  }
  return frames.front();
}

}  // namespace crun
