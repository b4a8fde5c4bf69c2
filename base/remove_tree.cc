#include "base/remove_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace crun {
namespace {

bool is_dot(const char* name) { return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0')); }

// Removes what directory `dir` holds (closes `dir`), `depth` levels at most. Returns 0, or the
// first failure's errno value.
int empty_tree(int dir, int depth) {
  DIR* d = ::fdopendir(dir);
  if (d == nullptr) {
    const int e = errno;
    ::close(dir);
    return e;
  }
  int err = 0;
  while (const dirent* entry = ::readdir(d)) {
    if (is_dot(entry->d_name)) continue;
    int r = entry->d_type == DT_DIR ? EISDIR : (::unlinkat(dir, entry->d_name, 0) == 0 ? 0 : errno);
    if (r == EISDIR) {
      if (depth <= 0) {
        r = ELOOP;
      } else {
        const int sub = ::openat(dir, entry->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        r = sub < 0 ? errno : empty_tree(sub, depth - 1);
        if (sub >= 0) {
          const int rm = ::unlinkat(dir, entry->d_name, AT_REMOVEDIR) == 0 ? 0 : errno;
          if (r == 0) r = rm;
        }
      }
    }
    if (r != 0 && r != ENOENT && err == 0) err = r;
  }
  ::closedir(d);
  return err;
}

}  // namespace

bool remove_tree(const char* path) {
  const int dir = ::open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0) return errno == ENOENT;
  int err = empty_tree(dir, kMaxTreeDepth);
  const int rm = ::rmdir(path) == 0 ? 0 : errno;
  if (err == 0 && rm != ENOENT) err = rm;
  if (err == 0) return true;
  errno = err;
  return false;
}

}  // namespace crun
