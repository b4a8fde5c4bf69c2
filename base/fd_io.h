// Writing to a descriptor: all of it, or nothing that would block.
//
// Contract
//   - write_all(fd, data, size): writes every byte, retrying on EINTR and, for a non-blocking
//     descriptor, waiting in poll() on EAGAIN. False (errno set) when a write failed; the rest is
//     then not written (ENOSPC, EPIPE, a closed console: the caller decides).
//   - write_without_blocking(fd, text): writes `text` if the descriptor can take it now, else
//     returns false and the text is lost: a pipe nobody drains never stalls the caller. Pipes are
//     written with RWF_NOWAIT; descriptors that do not support it (terminals, files) are written
//     only when poll() says they are writable.
//
// Threading
//   Stateless; safe from any thread.
#pragma once

#include <cstddef>
#include <string_view>

namespace crun {

bool write_all(int fd, const char* data, std::size_t size);
bool write_without_blocking(int fd, std::string_view text);

}  // namespace crun
