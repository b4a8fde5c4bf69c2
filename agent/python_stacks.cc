#include "agent/python_stacks.h"

#include <signal.h>

#include <fstream>
#include <system_error>

namespace crun {
namespace {

// Runs in every Python worker at its start (site's usercustomize). Nothing of it stays in the
// program's view but sys.modules["usercustomize"] and the registration itself.
constexpr const char* kUserCustomize = R"py(# crun: Python stacks before a kill (docs/operations.md, "Stacks before the kill").
def _crun_python_stacks():
    import os, sys
    signo, _, here = os.environ.get("CRUN_PYTHON_STACKS", "").partition(":")
    if not here:
        return
    try:
        import faulthandler, fcntl
        name = os.path.join(here, str(os.getpid()))
        # A high descriptor, not inherited: the program's own opens get the numbers a plain start gives.
        low = os.open(name + ".tmp", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fd = fcntl.fcntl(low, fcntl.F_DUPFD_CLOEXEC, 1000)
            os.close(low)
        except OSError:  # fewer descriptors allowed: the one there is
            fd = low
        faulthandler.register(int(signo), file=fd, all_threads=True, chain=False)
        os.replace(name + ".tmp", name)
    except Exception as e:
        sys.stderr.write("crun: no Python stacks for this worker: %s\n" % e)
    sys.path[:] = [p for p in sys.path if p != here]
    del os.environ["CRUN_PYTHON_STACKS"]  # the environment a plain start gives
    path = os.environ.get("PYTHONPATH")
    if path == here:
        del os.environ["PYTHONPATH"]
    elif path is not None and path.startswith(here + ":"):
        os.environ["PYTHONPATH"] = path[len(here) + 1:]
    import importlib.machinery, importlib.util
    spec = importlib.machinery.PathFinder.find_spec("usercustomize", sys.path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["usercustomize"] = module
        spec.loader.exec_module(module)


_crun_python_stacks()
del _crun_python_stacks
)py";

void set_env(std::vector<std::string>& env, const std::string& key, const std::string& value) {
  for (auto& e : env) {
    if (e.compare(0, key.size() + 1, key + "=") == 0) {
      e = key + "=" + value;
      return;
    }
  }
  env.push_back(key + "=" + value);
}

}  // namespace

int python_stacks_signal() { return SIGRTMIN + 6; }

std::string arrange_python_stacks(std::vector<std::string>& env, const std::filesystem::path& dir, int signo) {
  const std::string here = dir.string();
  if (here.find(':') != std::string::npos) return dir.string() + " holds ':', which PYTHONPATH cannot";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return "cannot make " + here + ": " + ec.message();
  {
    std::ofstream out(dir / "usercustomize.py", std::ios::trunc);
    out << kUserCustomize;
    if (!out.flush()) return "cannot write " + (dir / "usercustomize.py").string();
  }
  std::string path = here;
  for (const auto& e : env) {
    if (e.rfind("PYTHONPATH=", 0) == 0) path += ":" + e.substr(11);
  }
  set_env(env, "PYTHONPATH", path);
  set_env(env, "CRUN_PYTHON_STACKS", std::to_string(signo) + ":" + here);
  return "";
}

std::string python_dump_file(const std::filesystem::path& dir, int pid) { return (dir / std::to_string(pid)).string(); }

}  // namespace crun
