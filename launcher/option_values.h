// Values of launch settings as text: the one boolean reader (flags' PET_* variables and
// --rdzv-conf keys) and the small text helpers the launcher's parsers share.
//
// Contract
//   parse_bool(text) accepts what torch's rendezvous parameters accept, in any case: 1 true t yes y
//   on, and 0 false f no n off (surrounding blanks ignored); nullopt for anything else, "" too
//   (callers decide what an empty value means and name the setting in their error).
//   parse_long(text): a decimal integer, surrounding blanks ignored; nullopt for anything else.
//   parse_byte_size(text): a size as the store's --max-queued-reply-bytes takes it (CLI11's
//   AsSizeValue, powers of 1024): digits, then optionally B, K/KB/KiB, M/MB/MiB, G/GB/GiB or
//   T/TB/TiB in any case, blanks allowed around and between; nullopt for anything else or past
//   2^64 - 1.
//   trim() drops surrounding blanks; split(text, sep) returns every field, empty ones included
//   ("" -> {""}).
//
// Threading
//   Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace crun {

std::optional<bool> parse_bool(std::string_view text);
std::optional<long> parse_long(std::string_view text);
std::optional<std::uint64_t> parse_byte_size(std::string_view text);
std::string trim(std::string_view text);
std::vector<std::string> split(const std::string& text, char sep);

}  // namespace crun
