#include "agent/status_page.h"

namespace crun {

const std::string& status_page_html() {
  static const std::string page = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>crun</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d1d1f; background: #fafafa; }
  h1 { font-size: 1.3em; margin: 0 0 .2em; }
  h2 { font-size: 1.05em; margin: 1.4em 0 .4em; }
  .meta { color: #666; }
  table { border-collapse: collapse; background: #fff; }
  th, td { padding: .25em .8em; border-bottom: 1px solid #e4e4e4; text-align: left; white-space: nowrap; }
  th { font-weight: 600; background: #f0f0f0; }
  td.num { text-align: right; font-variant-numeric: tabular-nums; }
  .state-running, .state-succeeded { color: #137333; }
  .state-failed, .state-abandoned { color: #b3261e; font-weight: 600; }
  .state-stopping, .state-stopped, .state-starting, .state-rendezvous { color: #8a5a00; }
  #health.bad { color: #b3261e; font-weight: 600; }
  pre { background: #fff; border: 1px solid #e4e4e4; padding: .6em; max-height: 20em; overflow: auto; }
  #error { color: #b3261e; }
</style>
</head>
<body>
<h1 id="title">crun</h1>
<div class="meta"><span id="summary">loading&hellip;</span> &middot; <span id="health"></span> &middot; updated <span id="updated">never</span> <span id="error"></span></div>
<h2>Nodes</h2>
<table id="nodes"><thead><tr><th>node</th><th>host</th><th>address</th><th>state</th><th>workers</th><th>restarts</th><th>round</th></tr></thead><tbody></tbody></table>
<h2>Ranks</h2>
<table id="ranks"><thead><tr><th>rank</th><th>node</th><th>local</th><th>pid</th><th>state</th><th>restarts</th><th>heartbeat</th><th>step</th><th>exit</th></tr></thead><tbody></tbody></table>
<h2>Last failure</h2>
<div id="failure">none</div>
<script>
"use strict";
function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}
function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}
function render(s) {
  const job = s.job, self = s.node;
  document.getElementById("title").textContent = "crun: " + job.run_id + " (" + self.role + ")";
  document.title = "crun: " + job.run_id;
  document.getElementById("summary").textContent =
    job.nodes_seen + " of " + job.nodes_expected + " node(s), " + job.workers_running + " of " + job.workers +
    " worker(s) running, restart " + job.restart_count + " of " + job.max_restarts;
  const health = document.getElementById("health");
  health.textContent = self.health ? self.health : "healthy";
  health.className = self.health ? "bad" : "";
  const nodes = [], ranks = [];
  let failure = null;
  for (const n of job.nodes) {
    const tr = document.createElement("tr");
    tr.dataset.node = n.node_rank;
    cell(tr, n.node_rank, "num");
    cell(tr, n.hostname);
    cell(tr, n.addr || "-");
    cell(tr, n.state, "state-" + n.state);
    cell(tr, n.workers.filter(w => w.state === "running").length + "/" + n.workers.length, "num");
    cell(tr, n.restart_count, "num");
    cell(tr, n.rendezvous_round, "num");
    nodes.push(tr);
    for (const w of n.workers) {
      const r = document.createElement("tr");
      r.dataset.rank = w.rank;
      cell(r, w.rank, "num rank");
      cell(r, n.node_rank, "num");
      cell(r, w.local_rank, "num");
      cell(r, w.pid, "num pid");
      cell(r, w.state, "state-" + w.state);
      cell(r, w.restarts, "num");
      cell(r, w.heartbeat_age_s === null ? "-" : w.heartbeat_age_s.toFixed(1) + " s ago", "num");
      cell(r, w.step === null ? "-" : w.step, "num");
      cell(r, w.exit);
      ranks.push(r);
    }
    if (n.last_failure && (!failure || n.last_failure.time > failure.time)) failure = n.last_failure;
  }
  ranks.sort((a, b) => Number(a.dataset.rank) - Number(b.dataset.rank));
  fill(document.querySelector("#nodes tbody"), nodes);
  fill(document.querySelector("#ranks tbody"), ranks);
  const f = document.getElementById("failure");
  if (!failure) {
    f.textContent = "none";
  } else {
    const head = document.createElement("div");
    const why = failure.signal ? "killed by " + failure.signal : "exit code " + failure.exit_code;
    head.textContent = "rank " + failure.rank + " (local rank " + failure.local_rank + " on " + failure.host +
      (failure.addr ? " " + failure.addr : "") + ", pid " + failure.pid + ", restart " + failure.attempt + "): " + why +
      " at " + failure.time + (failure.error_message ? ": " + failure.error_message : "") +
      (failure.watchdog ? " (" + failure.watchdog + ")" : "");
    head.id = "failure-head";
    const tail = document.createElement("pre");
    tail.id = "failure-tail";
    tail.textContent = (failure.stderr_tail || []).join("\n");
    f.replaceChildren(head, tail);
  }
  document.getElementById("updated").textContent = new Date().toLocaleTimeString();
  document.getElementById("error").textContent = "";
}
async function refresh() {
  try {
    const r = await fetch("/status", {cache: "no-store"});
    if (!r.ok) throw new Error("HTTP " + r.status);
    render(await r.json());
  } catch (e) {
    document.getElementById("error").textContent = "(cannot read /status: " + e.message + ")";
  }
  setTimeout(refresh, 2000);
}
refresh();
</script>
</body>
</html>
)HTML";
  return page;
}

}  // namespace crun
