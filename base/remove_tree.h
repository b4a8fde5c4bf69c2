// remove_tree(path): removes a directory and all it holds.
//
// Contract
//   - Never follows a symbolic link: one inside is removed as itself; `path` itself must be a
//     directory (not a link to one). Descends at most kMaxTreeDepth levels below `path`.
//   - The directory itself goes last, with one rmdir: no unlink is tried on a directory (each try
//     takes the parent's inode lock, which many agents ending together on one host contend for).
//   - Returns true when nothing of it is left (or it was not there); else false with errno set to
//     the first failure's (ELOOP: nested deeper than kMaxTreeDepth). It removes what it can
//     either way.
//   - The agent calls it on its run directory, and crun-keeper when the agent died.
//
// Threading
//   Any thread.
#pragma once

namespace crun {

inline constexpr int kMaxTreeDepth = 8;

bool remove_tree(const char* path);

}  // namespace crun
