"""The status page, `GET /` on the monitoring endpoint: one self-contained HTML document (no CDN,
no build step) that reads `/status` every few seconds and shows it to a person — version, uptime and
health, links to the raw endpoints, charts of the last minutes, listeners with their state, rate
and last error, their run-time control (running, paused or stopped by `mqbridge listener`, thread
counts, whether a command is in effect yet), Spark and memory, sinks, the collector's fill, the
ledger, recent moves to a backout queue with their reasons, and plugins.

The charts are drawn in the browser, as inline SVG, from the page's own polls of /status (the bridge
keeps no history for them): committed messages per second between two polls (from `totals`), and
the messages waiting in the collector. The page keeps `HISTORY_SECONDS` of polls in memory; a
reload starts empty.

Every value goes into the page as text (`textContent`), never as markup: reasons and errors may
quote message content.
"""

from __future__ import annotations

#: Seconds between two reads of /status.
REFRESH_SECONDS = 3
#: Seconds of polls the page keeps for its chart (a few hundred points: cheap to keep and redraw).
HISTORY_SECONDS = 600

_TEMPLATE = """<!doctype html>
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
  .warn { color: #8a5a00; font-weight: 600; }
  .muted { color: #6b7280; } .bar { background: #e3e6ea; width: 16em; height: .8em; display: inline-block; }
  .fill { background: #3b6fd4; height: 100%; }
  #problems li { color: #b3261e; }
  nav { margin: .4em 0; }
  .charts { display: flex; flex-wrap: wrap; gap: 1em; }
  figure { margin: 0; background: #fff; border: 1px solid #e3e6ea; padding: .4em .6em; }
  figcaption { font-size: .9em; }
  svg.chart { display: block; width: 28em; height: 8em; }
  svg.chart .line { fill: none; stroke: #2b59c3; stroke-width: 2; }
  svg.chart .axis { stroke: #c4c9d0; stroke-width: 1; }
  svg.chart text { font-size: 11px; fill: #6b7280; }
</style>
</head>
<body>
<h1>mqbridge <span id="name"></span> <span class="muted" id="version"></span></h1>
<div><span id="health"></span> <span id="uptime"></span> <span class="muted" id="updated"></span></div>
<nav id="links">raw data: <a href="status">/status</a> (JSON) &middot; <a href="metrics">/metrics</a>
(Prometheus) &middot; <a href="healthz">/healthz</a> (200 when healthy)</nav>
<ul id="problems"></ul>
<h2>Last minutes <span class="muted" id="history"></span></h2>
<div class="charts">
__CHART_rate__
__CHART_backlog__
</div>
<h2>Listeners</h2>
<table id="listeners"><thead><tr><th>listener</th><th>state</th><th>committed/s</th><th>committed</th>
<th>backed out</th><th>moved to backout</th><th>restarts</th><th>last error</th></tr></thead><tbody></tbody></table>
<h2>Waiting on the queues <span class="muted">(read every [bridge] backlog_interval)</span></h2>
<table id="queue-backlog"><thead><tr><th>listener</th><th>messages waiting</th><th>oldest</th><th>read</th>
</tr></thead><tbody></tbody></table>
<h2>Listener control <span class="muted">(mqbridge listener pause|resume|stop|start|threads)</span></h2>
<table id="controls"><thead><tr><th>listener</th><th>state</th><th>threads</th><th>alive</th><th>in effect</th>
<th>last command</th><th>last adaptive change</th></tr></thead><tbody></tbody></table>
<h2>Spark and memory</h2>
<table id="spark"><tbody></tbody></table>
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
const HISTORY = __HISTORY__;
// The chart's memory: one {t (seconds), committed (total), backlog} per answered poll, HISTORY long.
const samples = [];
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
function pairs(id, items) {
  const body = document.querySelector("#" + id + " tbody"); body.replaceChildren();
  for (const [label, value, cls] of items) {
    const r = body.insertRow(), th = document.createElement("th"); th.textContent = label; r.append(th);
    cell(r, value, cls);
  }
}
function duration(seconds) {
  const s = Math.floor(seconds), d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600);
  const m = Math.floor(s % 3600 / 60);
  return d ? d + "d " + h + "h" : h ? h + "h " + m + "m" : m ? m + "m " + s % 60 + "s" : s + "s";
}
function record(s) {
  const t = Date.now() / 1000;
  samples.push({t: t, committed: (s.totals || {}).messages_committed, backlog: (s.collector || {}).messages});
  while (samples[0].t < t - HISTORY) samples.shift();
}
function rates() {
  const out = [];
  for (let i = 1; i < samples.length; i++) {
    const a = samples[i - 1], b = samples[i], dt = b.t - a.t;
    // A restarted bridge counts from 0 again: no rate across the restart.
    if (dt > 0 && a.committed != null && b.committed != null && b.committed >= a.committed) {
      out.push([b.t, (b.committed - a.committed) / dt]);
    }
  }
  return out;
}
function nice(v) {  // the top of the axis: 1, 2 or 5 x 10^n, so that its label reads well
  if (v <= 1) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  return [1, 2, 5, 10].map(m => m * p).find(top => top >= v);
}
function draw(id, points, format) {
  const svg = document.getElementById("chart-" + id);
  const X0 = 44, X1 = 396, Y0 = 90, Y1 = 8;
  const now = samples.length ? samples[samples.length - 1].t : 0;
  // The x axis spans the polls kept (at least two intervals), so the chart fills from the first poll on.
  const span = Math.max(2 * REFRESH / 1000, samples.length ? now - samples[0].t : 0);
  const top = nice(Math.max(0, ...points.map(p => p[1])));
  svg.querySelector(".line").setAttribute("points", points.map(([t, v]) => (X1 - (now - t) / span * (X1 - X0))
    .toFixed(1) + "," + (Y0 - v / top * (Y0 - Y1)).toFixed(1)).join(" "));
  svg.querySelector(".top").textContent = format(top);
  svg.querySelector(".since").textContent = span >= 120 ? "-" + Math.round(span / 60) + " min"
    : "-" + Math.round(span) + " s";
  svg.dataset.points = String(points.length);
  text(id + "-now", points.length ? format(points[points.length - 1][1]) : "waiting for a second poll");
}
function chart() {
  draw("rate", rates(), v => (Math.round(v * 10) / 10) + "/s");
  draw("backlog", samples.filter(x => x.backlog != null).map(x => [x.t, x.backlog]), v => String(Math.round(v)));
  text("history", samples.length + " polls, every " + REFRESH / 1000 + " s, kept " + HISTORY / 60 + " min");
}
function spark(s) {
  const spark = s.spark || {}, proc = s.process || {}, guard = s.guard || {}, c = s.collector || {};
  const modes = {connect: "Spark Connect, server ", local: "local, master ", cluster: "cluster, master "};
  const limit = (s.collector_limits || {}).memory;
  const reachable = spark.reachable === true ? ["yes", "ok"] : spark.reachable === false
    ? ["NO: " + (spark.error || "unknown error"), "bad"] : ["not checked (no Spark session yet)", "muted"];
  pairs("spark", [
    ["Spark", (modes[spark.mode] || (spark.mode || "?") + ", ") + (spark.master || "?")],
    ["Spark reachable", reachable[0], reachable[1]],
    ["bridge process", proc.rss_bytes == null ? "?" : "RSS " + mib(proc.rss_bytes) + (guard.enabled
      ? " of max_rss " + mib(guard.max_rss) + (guard.paused ? ": intake PAUSED by the memory guard" : "")
      : " (no memory guard: [bridge] max_rss is not set)") + "; " + proc.threads + " threads, pid " + proc.pid],
    ["collector memory", mib(c.bytes || 0) + (limit ? " of " + mib(limit) : "") + ", " + (c.messages || 0) +
      " messages waiting to be written"],
  ]);
}
function render(s) {
  text("name", s.name || "");
  text("version", s.version ? "version " + s.version : "");
  text("uptime", (s.process || {}).uptime_seconds == null ? "" : "up " + duration(s.process.uptime_seconds));
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
    const ended = !l.alive && l.retiring;  // stopped by an operator: not a fault
    cell(r, l.name); cell(r, ended ? "stopped" : l.alive ? l.phase + (l.retiring ? " (ending)" : "")
      : l.phase + " (down)", l.alive || ended ? "" : "bad");
    cell(r, l.listener_committed_per_second ?? ""); cell(r, m.messages_committed ?? "");
    cell(r, m.messages_backed_out ?? ""); cell(r, m.messages_moved_to_backout ?? "");
    cell(r, l.restarts); cell(r, l.last_error || "", l.last_error ? "bad" : "");
  });
  const backlog = s.backlog || {};
  rows("queue-backlog", Object.keys(backlog).map(k => [k, backlog[k]]), (r, [name, b]) => {
    cell(r, name); cell(r, b.messages ?? "unknown", b.messages == null ? "muted" : "");
    cell(r, b.oldest_age_seconds == null ? "" : b.oldest_age_seconds.toFixed(0) + " s");
    cell(r, b.seconds_since_read + " s ago");
  });
  rows("controls", s.listener_controls || [], (r, c) => {
    cell(r, c.name); cell(r, c.state, c.state === "running" ? "ok" : "warn");
    cell(r, c.threads + (c.threads_mode === "adaptive" ? " (adaptive, up to " + c.threads_max + ")"
        : c.threads !== c.configured_threads ? " (configured " + c.configured_threads + ")" : ""));
    cell(r, c.threads_alive); cell(r, c.in_effect ? "yes" : "not yet: " + c.pending, c.in_effect ? "" : "muted");
    cell(r, c.last_command ? c.last_command + " at " + c.changed_at : "");
    cell(r, c.tuning ? c.tuning + " at " + c.tuned_at : "", "muted");
  });
  spark(s);
  const sinks = s.sinks || {};
  rows("sinks", Object.keys(sinks).map(k => [k, sinks[k]]), (r, [name, sink]) => {
    const available = sink.available !== false && sink.state !== "open";
    cell(r, name); cell(r, available ? "available" : "unavailable", available ? "ok" : "bad");
    const parts = [];
    if (!available) {
      parts.push("since " + sink.unavailable_since + " (" + sink.seconds_unavailable + " s), next probe in "
                 + sink.next_probe_seconds + " s: " + (sink.reason || "unknown"));
    }
    if (sink.last_probe_error) parts.push("last probe: " + sink.last_probe_error);
    parts.push((sink.opens || 0) + " outages, " + (sink.probes || 0) + " probes so far");
    if (sink.last_outage) parts.push("last outage: " + sink.last_outage + " (" + sink.last_outage_seconds + " s)");
    cell(r, parts.join("; "));
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
    const s = await response.json();
    record(s); render(s); chart();
  } catch (e) {
    const h = document.getElementById("health"); h.textContent = "bridge not answering: " + e; h.className = "bad";
  }
}
refresh(); setInterval(refresh, REFRESH);
</script>
</body>
</html>
"""


def _chart(name: str, caption: str) -> str:
    """An empty chart, drawn by the page's script: its line, the top of its axis and the span."""
    return (f'<figure><figcaption>{caption}: <b id="{name}-now"></b></figcaption>\n'
            f'<svg class="chart" id="chart-{name}" viewBox="0 0 400 110" data-points="0" role="img" '
            f'aria-label="{caption}">\n'
            '<line class="axis" x1="44" y1="90" x2="396" y2="90"/><line class="axis" x1="44" y1="8" x2="44" y2="90"/>\n'
            '<text class="top" x="40" y="14" text-anchor="end"></text>'
            '<text x="40" y="94" text-anchor="end">0</text>\n'
            '<text class="since" x="44" y="106"></text><text x="396" y="106" text-anchor="end">now</text>\n'
            '<polyline class="line" points=""/>\n</svg></figure>')


#: The page as served.
PAGE = (_TEMPLATE.replace("__REFRESH__", str(REFRESH_SECONDS)).replace("__HISTORY__", str(HISTORY_SECONDS))
        .replace("__CHART_rate__", _chart("rate", "committed messages per second"))
        .replace("__CHART_backlog__", _chart("backlog", "messages waiting in the collector")))
