"""The status page, `GET /` on the monitoring endpoint: one self-contained HTML document (no CDN,
no build step) that reads `/status` every few seconds and shows it to a person — health, listeners
with their state, rate and last error, sinks, the collector's fill, the ledger, recent moves to a
backout queue with their reasons, and plugins.

Every value goes into the page as text (`textContent`), never as markup: reasons and errors may
quote message content.
"""

from __future__ import annotations

#: Seconds between two reads of /status.
REFRESH_SECONDS = 3

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>mqbridge</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d2330; background: #f7f8fa; }
  h1 { font-size: 1.3em; margin: 0 0 .2em; }
  h2 { font-size: 1.05em; margin: 1.4em 0 .4em; }
  table { border-collapse: collapse; background: #fff; min-width: 40em; }
  th, td { text-align: left; padding: .3em .7em; border-bottom: 1px solid #e3e6ea; vertical-align: top; }
  th { background: #eef0f3; font-weight: 600; }
  .ok { color: #17702f; font-weight: 600; } .bad { color: #b3261e; font-weight: 600; }
  .muted { color: #6b7280; } .bar { background: #e3e6ea; width: 16em; height: .8em; display: inline-block; }
  .fill { background: #3b6fd4; height: 100%; }
  #problems li { color: #b3261e; }
</style>
</head>
<body>
<h1>mqbridge <span id="name"></span></h1>
<div><span id="health"></span> <span class="muted" id="updated"></span></div>
<ul id="problems"></ul>
<h2>Listeners</h2>
<table id="listeners"><thead><tr><th>listener</th><th>state</th><th>committed/s</th><th>committed</th>
<th>backed out</th><th>moved to backout</th><th>restarts</th><th>last error</th></tr></thead><tbody></tbody></table>
<h2>Sinks</h2>
<table id="sinks"><thead><tr><th>sink</th><th>state</th><th>details</th></tr></thead><tbody></tbody></table>
<h2>Collector</h2>
<div id="collector"></div>
<h2>Landing ledger</h2>
<div id="ledger"></div>
<h2>Recent moves to a backout queue</h2>
<table id="backouts"><thead><tr><th>time (UTC)</th><th>listener</th><th>message</th><th>backout queue</th>
<th>reason</th></tr></thead><tbody></tbody></table>
<h2>Plugins</h2>
<div id="plugins"></div>
<script>
"use strict";
const REFRESH = __REFRESH__ * 1000;
function text(id, value) { document.getElementById(id).textContent = value; }
function cell(row, value, cls) {
  const td = row.insertCell(); td.textContent = value === null || value === undefined ? "" : String(value);
  if (cls) td.className = cls;
  return td;
}
function rows(id, items, fill) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren();
  for (const item of items) fill(body.insertRow(), item);
  if (!items.length) { const r = body.insertRow(); cell(r, "none", "muted").colSpan = 8; }
}
function mib(bytes) { return (bytes / 1048576).toFixed(1) + " MB"; }
function render(s) {
  text("name", s.name || "");
  const health = s.health || {healthy: false, problems: ["no health in /status"]};
  const h = document.getElementById("health");
  h.textContent = health.healthy ? "healthy" : "NOT healthy"; h.className = health.healthy ? "ok" : "bad";
  const problems = document.getElementById("problems"); problems.replaceChildren();
  for (const p of health.problems || []) {
    const li = document.createElement("li"); li.textContent = p; problems.append(li);
  }
  text("updated", "updated " + new Date().toISOString().slice(11, 19) + " UTC");
  rows("listeners", s.listeners || [], (r, l) => {
    const m = l.listener_messages || {};
    cell(r, l.name); cell(r, l.alive ? l.phase : l.phase + " (down)", l.alive ? "" : "bad");
    cell(r, l.listener_committed_per_second ?? ""); cell(r, m.messages_committed ?? "");
    cell(r, m.messages_backed_out ?? ""); cell(r, m.messages_moved_to_backout ?? "");
    cell(r, l.restarts); cell(r, l.last_error || "", l.last_error ? "bad" : "");
  });
  const sinks = s.sinks || {};
  rows("sinks", Object.keys(sinks).map(k => [k, sinks[k]]), (r, [name, sink]) => {
    const available = sink.available !== false && sink.state !== "open";
    cell(r, name); cell(r, sink.state || (available ? "available" : "unavailable"), available ? "ok" : "bad");
    const details = Object.entries(sink).filter(([k]) => k !== "state" && k !== "available")
      .map(([k, v]) => k + ": " + (typeof v === "object" ? JSON.stringify(v) : v)).join(", ");
    cell(r, details);
  });
  const c = s.collector || {};
  const limit = (s.collector_limits || {}).memory || 0;
  const col = document.getElementById("collector"); col.replaceChildren();
  const line = document.createElement("div");
  line.textContent = mib(c.bytes || 0) + (limit ? " of " + mib(limit) : "") + " held, " + (c.messages || 0) +
    " messages; " + (c.active_bulks || 0) + " active, " + (c.queued_bulks || 0) + " queued, " +
    (c.in_flight_bulks || 0) + " writing; " + (c.executed_bulks || 0) + " bulks written (" +
    (c.executed_messages || 0) + " rows)";
  col.append(line);
  if (limit) {
    const bar = document.createElement("span"); bar.className = "bar";
    const f = document.createElement("span"); f.className = "fill";
    f.style.display = "block"; f.style.width = Math.min(100, 100 * (c.bytes || 0) / limit) + "%";
    bar.append(f); col.append(bar);
  }
  const ledger = s.ledger;
  text("ledger", ledger ? (ledger.path + ": " + (ledger.bulks ? ledger.bulks.published + " bulks published, " +
    ledger.bulks.prepared + " prepared, " : "") + ledger.identities + " identities, " + mib(ledger.bytes || 0))
    : "none (exactly_once = false)");
  rows("backouts", (s.recent_backout_moves || []).slice().reverse(), (r, m) => {
    cell(r, m.time); cell(r, m.listener); cell(r, m.msg_id); cell(r, m.queue); cell(r, m.reason);
  });
  const plugins = s.plugins || {};
  const list = (plugins.plugins || []).map(p => p.name + " " + p.version + " (" + p.source + ", " + p.state + ")");
  const errors = (plugins.errors || []).map(e => typeof e === "object" ? JSON.stringify(e) : String(e));
  text("plugins", (list.length ? "generation " + plugins.generation + ": " + list.join("; ") : "none") +
    (errors.length ? "; errors: " + errors.join("; ") : "") +
    (plugins.reload_error ? "; reload: " + plugins.reload_error : ""));
}
async function refresh() {
  try {
    const response = await fetch("status", {cache: "no-store"});
    render(await response.json());
  } catch (e) {
    const h = document.getElementById("health"); h.textContent = "bridge not answering: " + e; h.className = "bad";
  }
}
refresh(); setInterval(refresh, REFRESH);
</script>
</body>
</html>
""".replace("__REFRESH__", str(REFRESH_SECONDS))
