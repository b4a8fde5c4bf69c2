// state_restore_bench: what a restarted worker pays to read its state back. The same read loop
// (1 MiB read()s into one resident buffer) over three sources, interleaved run by run:
//   floor:     a resident buffer copied with memcpy in the same 1 MiB steps (the machine's floor);
//   state_dir: a file in CRUN_STATE_DIR (when crun set it; else /dev/shm, the same tmpfs);
//   disk:      a file on local disk (--disk-dir, default /var/tmp) with a cold page cache: each
//              run first drops the file's pages (fsync'd once, so clean; posix_fadvise DONTNEED)
//              and checks with mincore that none are left.
// Prints each source's median of --runs (>= 5) in ms and GB/s, the ratios, and the load average.
//
//   state_restore_bench [--mib 256] [--runs 7] [--disk-dir /var/tmp]
//   crun --no-python build/bench/state/state_restore_bench     (reads the real CRUN_STATE_DIR)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

constexpr std::size_t kStep = 1 << 20;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "state_restore_bench: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The file `path` holds `bytes`, written under a dot-name and renamed (a commit in CRUN_STATE_DIR).
void write_file(const std::string& path, const std::vector<char>& bytes, bool durable) {
  const std::string dir = path.substr(0, path.rfind('/') + 1);
  const std::string tmp = dir + "." + path.substr(dir.size()) + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) die("create " + tmp);
  for (std::size_t at = 0; at < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + at, std::min(kStep, bytes.size() - at));
    if (n <= 0) die("write " + tmp);
    at += static_cast<std::size_t>(n);
  }
  if (durable && ::fsync(fd) != 0) die("fsync " + tmp);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) die("rename to " + path);
}

// The restore: the whole file into `into`, 1 MiB a read(). Returns ms.
double read_file(const std::string& path, std::vector<char>& into) {
  const double t0 = now_ms();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("open " + path);
  std::size_t at = 0;
  for (;;) {
    const ssize_t n = ::read(fd, into.data() + at, std::min(kStep, into.size() - at));
    if (n < 0) die("read " + path);
    if (n == 0) break;
    at += static_cast<std::size_t>(n);
  }
  ::close(fd);
  const double t = now_ms() - t0;
  if (at != into.size()) die("short read of " + path);
  return t;
}

double copy_resident(const std::vector<char>& from, std::vector<char>& into) {
  const double t0 = now_ms();
  for (std::size_t at = 0; at < from.size(); at += kStep) std::memcpy(into.data() + at, from.data() + at, std::min(kStep, from.size() - at));
  return now_ms() - t0;
}

// Drops the file's pages from the page cache; returns how many are still resident.
std::size_t make_cold(const std::string& path, std::size_t bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("open " + path);
  if (::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) die("posix_fadvise " + path);
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) die("mmap " + path);
  const long page = ::sysconf(_SC_PAGESIZE);
  std::vector<unsigned char> resident((bytes + static_cast<std::size_t>(page) - 1) / static_cast<std::size_t>(page));
  if (::mincore(map, bytes, resident.data()) != 0) die("mincore " + path);
  ::munmap(map, bytes);
  ::close(fd);
  return static_cast<std::size_t>(std::count_if(resident.begin(), resident.end(), [](unsigned char c) { return c & 1; }));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t mib = 256;
  int runs = 7;
  std::string disk_dir = "/var/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--mib") mib = std::strtoull(argv[i + 1], nullptr, 10);
    else if (flag == "--runs") runs = std::atoi(argv[i + 1]);
    else if (flag == "--disk-dir") disk_dir = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: state_restore_bench [--mib N] [--runs N>=5] [--disk-dir DIR]\n");
      return 2;
    }
  }
  if (mib == 0 || runs < 5) {
    std::fprintf(stderr, "state_restore_bench: --mib must be > 0 and --runs >= 5\n");
    return 2;
  }
  const char* state_env = std::getenv("CRUN_STATE_DIR");
  const std::string state_dir = state_env && *state_env ? state_env : "/dev/shm";
  const std::size_t bytes = mib << 20;
  std::vector<char> source(bytes);
  std::uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (std::size_t i = 0; i < bytes; i += 8) {  // not zeros: nothing is cheaper than a real checkpoint
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(source.data() + i, &x, std::min<std::size_t>(8, bytes - i));
  }
  std::vector<char> into(bytes, 1);  // resident before the first run
  const std::string state_file = state_dir + "/bench_state.bin";
  const std::string disk_file = disk_dir + "/crun-bench-state-" + std::to_string(::getpid()) + ".bin";
  write_file(state_file, source, false);
  write_file(disk_file, source, true);

  std::vector<double> floor_ms, state_ms, disk_ms;
  std::size_t warm_pages = 0;
  for (int r = 0; r < runs; ++r) {  // interleaved, the order rotating
    for (int k = 0; k < 3; ++k) {
      switch ((r + k) % 3) {
        case 0: floor_ms.push_back(copy_resident(source, into)); break;
        case 1: state_ms.push_back(read_file(state_file, into)); break;
        default:
          warm_pages = std::max(warm_pages, make_cold(disk_file, bytes));
          disk_ms.push_back(read_file(disk_file, into));
      }
    }
  }
  if (std::memcmp(into.data(), source.data(), bytes) != 0) die("the bytes read back differ");
  ::unlink(state_file.c_str());
  ::unlink(disk_file.c_str());

  const double f = median(floor_ms), s = median(state_ms), d = median(disk_ms);
  auto gbps = [&](double ms) { return static_cast<double>(bytes) / (ms / 1000.0) / 1e9; };
  std::printf("restore of %zu MiB, median of %d runs, interleaved (load average %s)\n", mib, runs, load_average().c_str());
  std::printf("  floor (memcpy of a resident buffer, 1 MiB steps)   %8.1f ms  %6.2f GB/s\n", f, gbps(f));
  std::printf("  CRUN_STATE_DIR (%s, read())  %8.1f ms  %6.2f GB/s\n", state_dir.c_str(), s, gbps(s));
  std::printf("  local disk, cold cache (%s, read())       %8.1f ms  %6.2f GB/s  (pages left after DONTNEED: %zu)\n",
              disk_dir.c_str(), d, gbps(d), warm_pages);
  std::printf("  ratio disk / CRUN_STATE_DIR: %.1fx;  CRUN_STATE_DIR / floor: %.2fx\n", d / s, s / f);
  return 0;
}
