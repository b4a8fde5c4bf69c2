#include "base/remove_tree.h"

#include <dirent.h>
#include <fcntl.h>

#include <cerrno>

#include "base/raw_syscall.h"

namespace crun {
namespace {

bool is_dot(const char* name) { return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0')); }

// Removes what directory `dir` holds, `depth` levels at most. Returns 0, or the first failure's -errno.
int empty_tree(int dir, int depth) {
  int err = 0;
  alignas(dirent64) char buf[2048];
  for (;;) {
    const long n = raw_syscall(SYS_getdents64, dir, raw_arg(buf), sizeof(buf));
    if (n <= 0) return err != 0 ? err : static_cast<int>(n);
    for (long off = 0; off < n;) {
      const auto* d = reinterpret_cast<const dirent64*>(buf + off);
      off += d->d_reclen;
      if (is_dot(d->d_name)) continue;
      long r = d->d_type == DT_DIR ? -EISDIR : raw_syscall(SYS_unlinkat, dir, raw_arg(d->d_name), 0);
      if (r == -EISDIR) {
        const int sub = depth > 0 ? static_cast<int>(raw_syscall(SYS_openat, dir, raw_arg(d->d_name),
                                                                 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0))
                                  : -ELOOP;
        r = sub;
        if (sub >= 0) {
          r = empty_tree(sub, depth - 1);
          raw_close(sub);
          const long rm = raw_syscall(SYS_unlinkat, dir, raw_arg(d->d_name), AT_REMOVEDIR);
          if (r == 0) r = rm;
        }
      }
      if (r < 0 && r != -ENOENT && err == 0) err = static_cast<int>(r);
    }
  }
}

}  // namespace

int remove_tree(const char* path) {
  const int dir = raw_open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  if (dir == -ENOENT) return 0;
  if (dir < 0) return dir;
  int err = empty_tree(dir, kMaxTreeDepth);
  raw_close(dir);
  const int rm = raw_rmdir(path);
  if (err == 0 && rm != -ENOENT) err = rm;
  return err;
}

}  // namespace crun
