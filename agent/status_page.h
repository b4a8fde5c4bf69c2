// The status page GET / answers: one self-contained HTML document (CSS and JS inline, no
// external assets) that reads GET /status every two seconds and shows the job, its nodes, its
// ranks and the last failure with its stderr tail. Every value goes into the DOM as text (never
// as markup): a worker's stderr cannot inject anything.
//
// Contract
//   status_page_html() is agent/status_page.html as it was at build time: agent/CMakeLists.txt
//   embeds it into a generated status_page.cc (from status_page.cc.in).
//
// Threading
//   Pure; any thread.
#pragma once

#include <string>

namespace crun {

const std::string& status_page_html();

}  // namespace crun
