#include "launcher/console_settings.h"

#include <algorithm>
#include <cmath>

namespace crun {

void plan_console_settings(const SettingTexts& s, LaunchPlan& plan) {
  const auto& on = s.at("collapse_logs");
  plan.collapse_logs = {on.value == "1", on.source};
  const auto& window = s.at("collapse_window");
  const double seconds = number_setting(s, "collapse_window", "--collapse-window");
  if (!(seconds > 0) || seconds > 60) {
    throw LaunchUsageError("--collapse-window: expected seconds > 0 (at most 60), got '" + window.value + "'" +
                           (window.source.rfind("-", 0) == 0 ? "" : " (from " + window.source + ")"));
  }
  // At least 1 ms: a window that rounds to nothing would collapse nothing.
  const auto ms = std::max<long long>(1, std::llround(seconds * 1000.0));
  plan.collapse_window = {std::chrono::milliseconds(ms), window.source};
}

}  // namespace crun
