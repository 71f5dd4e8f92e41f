"""The dashboard's one HTML page: inline CSS, JS and SVG, no build step and no third-party assets.

It holds no data: the script polls `api/flows` (relative, so it works under any `[api] base_url`) with the
browser's Airflow session cookie and draws what comes back. Values are put into the DOM as text, never as HTML.
The page's own query (`?dag_id=` from a flow DAG's Replication tab, or `?flow=`) is passed on to `api/flows`,
which narrows the answer to that flow; the page then says so and links to all flows.
While the page is open it keeps a history of each flow's total lag and draws it beside the per-partition bars.
"""

from __future__ import annotations

import json

POLL_MS = 5000
HISTORY_POINTS = 120

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Mirrorflow replication</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:16px;color:#1f2933;background:#fff}
h1{font-size:20px;margin:0 0 4px}
.muted{color:#616e7c}.err{color:#b42318}
.flow{border:1px solid #d9e2ec;border-radius:8px;padding:12px;margin:12px 0}
.head{display:flex;gap:12px;align-items:baseline;flex-wrap:wrap}
.name{font-size:17px;font-weight:600}
.state{padding:2px 8px;border-radius:10px;font-weight:600;color:#fff}
.s-ok{background:#2f855a}.s-lagging{background:#c05621}.s-stale-heartbeat{background:#b7791f}
.s-unreachable{background:#b42318}
.flow.breached{border:2px solid #b42318;background:#fef3f2}
.slo{font-weight:600;color:#2f855a}.breached .slo{color:#b42318}
.drill{color:#2f855a}.drill.failed{color:#b42318;font-weight:600}
.facts{display:flex;gap:18px;flex-wrap:wrap;margin:8px 0}
.facts div b{display:block;font-size:16px}
table{border-collapse:collapse;margin-top:8px}
td,th{padding:3px 10px;border-bottom:1px solid #e4e7eb;text-align:right}
td:first-child,th:first-child{text-align:left}
.charts{display:flex;gap:24px;flex-wrap:wrap;margin-top:8px}
svg text{font:11px system-ui,sans-serif;fill:#3e4c59}
</style></head>
<body>
<h1>Mirrorflow replication</h1>
<div class="muted" id="status">loading&hellip;</div>
<div id="flows"></div>
<script>
const LOGIN = __LOGIN__, POLL_MS = __POLL__, KEEP = __KEEP__;
const history = {};
const NS = "http://www.w3.org/2000/svg";
function el(tag, attrs, ...kids) {
  const e = tag.startsWith("svg:") ? document.createElementNS(NS, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}
function secs(s) {
  if (s === null || s === undefined) return "none";
  if (s < 120) return s.toFixed(1) + " s";
  if (s < 7200) return (s / 60).toFixed(1) + " min";
  return (s / 3600).toFixed(1) + " h";
}
function hhmm(ms) { return new Date(ms).toLocaleTimeString([], {hour: "2-digit", minute: "2-digit"}); }
function sloText(s) {
  const goals = [];
  if (s.rpo_target_s !== null && (s.rpo_breached || !s.breached))
    goals.push(Math.round(s.rpo_target_s * 10) / 10 + " s RPO");
  if (s.lag_target_records !== null && (s.lag_breached || !s.breached))
    goals.push(s.lag_target_records + "-record lag target");
  if (!s.breached) return "within its " + goals.join(" and ") + " (RPO now " + secs(s.rpo_s) + ")";
  return "outside its " + goals.join(" and ") + " since " + hhmm(s.since_ms) + " (RPO now " + secs(s.rpo_s) + ")";
}
function rate(x, unit) { return (x || 0).toFixed(1) + " " + unit + "/s"; }
function fact(label, value) { return el("div", {}, el("span", {class: "muted"}, label), el("b", {}, value)); }
function bars(parts) {
  const w = 520, row = 18, h = Math.max(1, parts.length) * row + 24;
  const svg = el("svg:svg", {width: w, height: h, role: "img", "aria-label": "lag per partition"});
  svg.append(el("svg:text", {x: 0, y: 12}, "lag per partition (records)"));
  const max = Math.max(1, ...parts.map(p => p.lag_records));
  parts.forEach((p, i) => {
    const y = 20 + i * row, len = Math.round(200 * p.lag_records / max);
    svg.append(el("svg:text", {x: 0, y: y + 12}, p.topic + "-" + p.partition));
    svg.append(el("svg:rect", {x: 170, y: y + 2, width: Math.max(1, len), height: row - 6,
      fill: p.lag_records ? "#c05621" : "#2f855a"}));
    svg.append(el("svg:text", {x: 176 + len, y: y + 12}, p.lag_records + " / " + secs(p.lag_seconds)));
  });
  return svg;
}
function line(points) {
  const w = 320, h = 110;
  const svg = el("svg:svg", {width: w, height: h, role: "img", "aria-label": "lag history"});
  svg.append(el("svg:text", {x: 0, y: 12}, "total lag while this page is open (records)"));
  if (!points.length) return svg;
  const max = Math.max(1, ...points.map(p => p[1])), t0 = points[0][0], span = Math.max(1, points.at(-1)[0] - t0);
  const xy = points.map(p => [10 + 300 * (p[0] - t0) / span, h - 10 - 80 * p[1] / max]);
  svg.append(el("svg:polyline", {points: xy.map(p => p.join(",")).join(" "), fill: "none",
    stroke: "#2563eb", "stroke-width": 2}));
  for (const [x, y] of xy) svg.append(el("svg:circle", {cx: x, cy: y, r: 3, fill: "#2563eb"}));
  svg.append(el("svg:text", {x: 260, y: 26}, "max " + max));
  return svg;
}
function card(f, now) {
  const key = f.flow, pts = history[key] = history[key] || [];
  if (f.state !== "unreachable") { pts.push([now, f.lag_records]); if (pts.length > KEEP) pts.shift(); }
  const box = el("div", {class: "flow", "data-flow": f.flow, "data-state": f.state},
    el("div", {class: "head"}, el("span", {class: "name"}, f.flow),
      el("span", {class: "state s-" + f.state.replace(" ", "-")}, f.state)));
  if (f.error) { box.append(el("div", {class: "err"}, f.error)); return box; }
  if (f.slo) {
    box.dataset.slo = f.slo.breached ? "breached" : "ok";
    if (f.slo.breached) box.classList.add("breached");
    box.append(el("div", {class: "slo"}, sloText(f.slo)));
  }
  if (f.last_drill) {
    const d = f.last_drill;
    box.dataset.drill = d.passed ? "passed" : "failed";
    box.append(el("div", {class: d.passed ? "drill" : "drill failed"}, "last DR drill " + hhmm(d.at_ms) + ": " +
      (d.passed ? "passed" : "FAILED (" + d.failed.join(", ") + ")")));
  }
  box.append(el("div", {class: "facts"}, fact("lag", f.lag_records + " records"),
    fact("oldest uncopied", secs(f.lag_seconds)), fact("heartbeat age", secs(f.heartbeat_age_s)),
    fact("checkpoint age", secs(f.checkpoint_age_s)), fact("throughput", rate(f.record_rate, "rec")),
    fact("bytes", rate(f.byte_rate, "B"))));
  const t = el("table", {}, el("tr", {}, ...["topic", "partition", "lag (records)", "lag (s)", "copied",
    "records/s", "bytes/s", "latency avg ms"].map(h => el("th", {}, h))));
  for (const p of f.partitions) {
    t.append(el("tr", {}, el("td", {}, p.topic), el("td", {}, p.partition), el("td", {class: "lag"}, p.lag_records),
      el("td", {}, p.lag_seconds.toFixed(1)), el("td", {}, p.record_count), el("td", {}, p.record_rate.toFixed(1)),
      el("td", {}, p.byte_rate.toFixed(1)), el("td", {}, Math.round(p.latency_avg_ms))));
  }
  box.append(t, el("div", {class: "charts"}, bars(f.partitions), line(pts)));
  return box;
}
async function poll() {
  const status = document.getElementById("status"), out = document.getElementById("flows");
  try {
    const r = await fetch("api/flows" + location.search,
      {credentials: "same-origin", headers: {Accept: "application/json"}});
    if (r.status === 401 || r.status === 403) {
      status.replaceChildren((r.status === 401 ? "Not signed in to Airflow" :
        "Not allowed to read any Mirrorflow flow's DAG") + " (HTTP " + r.status + "). ",
        el("a", {href: LOGIN, target: "_top"}, "Log in"));
      return;
    }
    if (!r.ok) throw new Error("HTTP " + r.status);
    const data = await r.json(), only = data.filter && (data.filter.dag_id || data.filter.flow);
    status.textContent = data.flows.length + " flow(s)" + (only ? " of " + only : "") + ", read " +
      new Date(data.generated_ms).toLocaleTimeString();
    if (only) {
      if (!data.flows.length) status.append(el("div", {}, "No flow you may read matches " + only + "."));
      status.append(" ", el("a", {href: "./", id: "all-flows"}, "all flows"));
    }
    if (data.error) status.append(el("div", {class: "err"}, data.error));
    out.replaceChildren(...data.flows.map(f => card(f, data.generated_ms / 1000)));
    document.body.dataset.loaded = "1";
  } catch (e) {
    status.textContent = "cannot load flows: " + e.message;
  } finally {
    setTimeout(poll, POLL_MS);
  }
}
poll();
</script></body></html>
"""


def render_page(*, login_url: str) -> str:
    """The page, with the login address (for when the session has expired) as a JS string literal."""
    login = json.dumps(login_url).replace("</", "<\\/")
    return _PAGE.replace("__LOGIN__", login).replace("__POLL__", str(POLL_MS)).replace("__KEEP__", str(HISTORY_POINTS))
