// Hashes used by checkpoints and by example programs' result lines.
//
// Contract
//   fnv1a64(): 64-bit FNV-1a (checkpoint checksum; detects torn and corrupted files).
//   Sha256: FIPS 180-4 SHA-256, incremental; hex() of the final digest in lowercase.
//
// Threading
//   Pure functions; a Sha256 object belongs to one thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace crun::rt {

std::uint64_t fnv1a64(const void* data, std::size_t n, std::uint64_t h = 0xcbf29ce484222325ULL);

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t n);
  std::array<std::uint8_t, 32> digest();  // finalizes; the object must not be updated after
  std::string hex();

 private:
  void block(const std::uint8_t* p);
  std::array<std::uint32_t, 8> h_;
  std::array<std::uint8_t, 64> buf_{};
  std::size_t buf_len_ = 0;
  std::uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view data);

}  // namespace crun::rt
