// Whole-file reads and writes through close-on-exec descriptors (std::fstream's are not).
//
// Contract
//   read_text_file(): the file's bytes; nullopt when it cannot be opened or read.
//   write_text_file(): creates or truncates the file (mode 0644) and writes `text`; false on any
//   failure.
//
// Threading
//   Free functions; safe from any thread.
#pragma once

#include <optional>
#include <string>

namespace crun {

std::optional<std::string> read_text_file(const std::string& path);
bool write_text_file(const std::string& path, const std::string& text);

}  // namespace crun
