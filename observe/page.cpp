// The live page (GET / of observe/web.hpp): one HTML file with its style and script, written
// for it and built into the binary, so a machine without internet serves it whole. The script
// reads /stats.json?after=N every 1.5 s (the records --stats_json writes), keeps what came, and
// draws three SVG charts against the global iteration and the table of the job's machines from
// the last network record. Element ids and classes the browser test reads: #iter, #accuracy,
// #leader, #lagging, #machines (rows tr[data-rank], classes leader / lagging / left / down),
// #charts svg, #status, #control.
#include "observe/web.hpp"

namespace hogstream {

const std::string& LivePage() {
  static const std::string page = R"HSPAGE(<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>hogstream job</title>
<style>
 body { font: 14px/1.4 system-ui, sans-serif; margin: 16px 20px; color: #1d2330; background: #fafbfc; }
 h1 { font-size: 18px; margin: 0 0 4px; }
 .sub { color: #5a6170; margin-bottom: 10px; }
 .figures { display: flex; gap: 22px; flex-wrap: wrap; margin: 8px 0 12px; }
 .figure b { display: block; font-size: 20px; font-variant-numeric: tabular-nums; }
 .figure span { color: #5a6170; font-size: 12px; }
 .figure b.small { font-size: 14px; line-height: 27px; }
 #charts { display: flex; gap: 14px; flex-wrap: wrap; }
 .chart { background: #fff; border: 1px solid #dde1e8; border-radius: 6px; padding: 6px 8px; }
 .chart h2 { font-size: 13px; margin: 0 0 2px; color: #3a4150; }
 svg text { font-size: 10px; fill: #5a6170; }
 table { border-collapse: collapse; margin-top: 14px; background: #fff; font-variant-numeric: tabular-nums; font-size: 13px; }
 th, td { border: 1px solid #dde1e8; padding: 3px 6px; text-align: right; white-space: nowrap; }
 th { background: #eef1f5; font-weight: 600; }
 td.name { text-align: left; }
 tr.leader td.name::after { content: "  leader"; color: #0b6e2f; font-weight: 600; }
 tr.lagging { background: #fff4e0; }
 tr.left, tr.down { color: #9aa0aa; }
 .state { text-align: left; }
 .bars { display: inline-flex; gap: 1px; align-items: flex-end; height: 14px; vertical-align: middle; }
 .bars i { display: inline-block; width: 5px; background: #6b8fd6; }
 #status.bad { color: #b3261e; }
 #control button { margin-right: 8px; padding: 4px 12px; }
 #notes { color: #8a5a00; margin-top: 6px; }
</style></head>
<body>
<h1 id="title">hogstream</h1>
<div class="sub"><span id="where"></span> · <span id="status">waiting for the first figures</span></div>
<div class="figures">
 <div class="figure"><b id="iter">–</b><span>global iteration</span></div>
 <div class="figure"><b id="accuracy">–</b><span id="accuracy-name">test accuracy</span></div>
 <div class="figure"><b id="loss">–</b><span>train loss</span></div>
 <div class="figure"><b id="imgs">–</b><span>images/s</span></div>
 <div class="figure"><b id="leader" class="small">–</b><span>leading machine</span></div>
 <div class="figure"><b id="lagging" class="small">none</b><span>lagging</span></div>
</div>
<div id="control" hidden>
 <span id="token-box" hidden>control token <input id="token" type="password" size="20"></span>
 <button id="snap">Snapshot</button><button id="stop">Stop (snapshot, then end)</button>
 <span id="control-said"></span>
</div>
<div id="charts"></div>
<div id="aggregation" class="sub"></div>
<table id="machines" hidden><thead><tr><th>machine</th><th>state</th><th>iter/s</th><th>iterations</th>
 <th>deltas taken</th><th>refused</th><th>staleness</th><th>histogram</th><th>in</th><th>out</th>
 <th title="frames from its address refused: another job's or claiming another sender / a failed MAC / no frame of ours">frames refused:<br>foreign / MAC / malformed</th><th>lost</th></tr></thead><tbody></tbody></table>
<div id="notes"></div>
<script>
"use strict";
const S = { next: 0, tests: [], trains: [], net: null, lastOk: 0, leaderNext: 0, leaderTests: [], meta: {} };
const $ = id => document.getElementById(id);
const fmt = (v, d = 3) => v == null || !isFinite(v) ? "–" : Math.abs(v) >= 1000 ? Math.round(v).toLocaleString("en") : (+v).toPrecision(d);
const bytes = b => b >= 1e9 ? (b / 1e9).toFixed(2) + " GB" : b >= 1e6 ? (b / 1e6).toFixed(1) + " MB" : b >= 1e3 ? (b / 1e3).toFixed(1) + " kB" : b + " B";
const short = v => Math.abs(v) >= 1e6 ? +(v / 1e6).toPrecision(3) + "M" : Math.abs(v) >= 1e4 ? +(v / 1e3).toPrecision(3) + "k" : +(+v).toPrecision(3);
const esc = t => String(t).replace(/[&<>"]/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
const colors = ["#2f6fdb", "#d9480f", "#2b8a3e", "#9c36b5", "#e67700", "#0b7285"];

function take(records, fromLeader) {
  for (const r of records) {
    if (r.type === "test") (fromLeader ? S.leaderTests : S.tests).push(r);
    else if (r.type === "train" && !fromLeader) S.trains.push(r);
    else if (r.type === "network" && !fromLeader) S.net = r;
  }
}

async function poll() {
  try {
    const res = await fetch("/stats.json?after=" + S.next, { cache: "no-store" });
    const j = await res.json();
    take(j.records, false);
    S.next = j.next; S.meta = j; S.lastOk = Date.now();
    await pollLeader();
    draw();
  } catch (e) {
    $("status").textContent = "this machine does not answer (the job ended?) since " + new Date(S.lastOk || Date.now()).toLocaleTimeString();
    $("status").className = "bad";
  }
}

// A machine that does not lead has no test passes of its own: the leader's page has them (the
// same port, the leader's address from the job's list) where it answers.
async function pollLeader() {
  const n = S.net;
  if (!n || n.leader === n.machine || S.tests.length) return;
  const p = (n.peers || []).find(q => q.rank === n.leader);
  const m = p && /^[a-z]+:\/\/([0-9.]+|\[[0-9a-f:]+\]):\d+/i.exec(p.name);
  if (!m || m[1] === location.hostname) return;
  try {
    const res = await fetch(location.protocol + "//" + m[1] + ":" + location.port + "/stats.json?after=" + S.leaderNext, { cache: "no-store" });
    const j = await res.json();
    take(j.records.filter(r => r.type === "test"), true);
    S.leaderNext = j.next;
  } catch (e) { /* the leader's page is elsewhere or not served */ }
}

function chart(title, series, opt = {}) {
  const W = 380, H = 200, L = 46, R = 20, T = 8, B = 24;
  const pts = series.flatMap(s => s.pts).filter(p => isFinite(p[1]));
  let svg = `<svg width="${W}" height="${H}" data-points="${pts.length}">`;
  if (pts.length) {
    let x0 = Math.min(...pts.map(p => p[0])), x1 = Math.max(...pts.map(p => p[0]));
    let y0 = opt.y0 != null ? opt.y0 : Math.min(...pts.map(p => p[1])), y1 = Math.max(...pts.map(p => p[1]));
    if (opt.unit && y1 <= 1 && y0 >= 0) { y0 = Math.max(0, Math.min(y0, 0.5)); y1 = 1; }
    if (x1 === x0) x1 = x0 + 1; if (y1 === y0) y1 = y0 + 1;
    const X = x => L + (x - x0) / (x1 - x0) * (W - L - R), Y = y => H - B - (y - y0) / (y1 - y0) * (H - T - B);
    for (let k = 0; k <= 4; ++k) {
      const y = y0 + (y1 - y0) * k / 4, x = x0 + (x1 - x0) * k / 4;
      svg += `<line x1="${L}" x2="${W - R}" y1="${Y(y)}" y2="${Y(y)}" stroke="#eef0f3"/>`;
      svg += `<text x="${L - 4}" y="${Y(y) + 3}" text-anchor="end">${short(y)}</text>`;
      svg += `<text x="${X(x)}" y="${H - 8}" text-anchor="middle">${short(Math.round(x))}</text>`;
    }
    series.forEach((s, i) => {
      const p = s.pts.filter(q => isFinite(q[1]));
      if (!p.length) return;
      const c = colors[i % colors.length];
      svg += `<polyline fill="none" stroke="${c}" stroke-width="1.6" ${s.dash ? 'stroke-dasharray="5 3"' : ""} points="${p.map(q => X(q[0]).toFixed(1) + "," + Y(q[1]).toFixed(1)).join(" ")}"/>`;
      svg += `<text x="${W - R}" y="${T + 12 + 12 * i}" text-anchor="end" style="fill:${c}">${esc(s.name)}</text>`;
    });
  } else {
    svg += `<text x="${W / 2}" y="${H / 2}" text-anchor="middle">no figures yet</text>`;
  }
  return `<div class="chart"><h2>${esc(title)}</h2>${svg}</svg></div>`;
}

function draw() {
  const n = S.net, tests = S.tests.length ? S.tests : S.leaderTests;
  const lastTrain = S.trains[S.trains.length - 1];
  const job = S.trains.filter(r => r.leads);
  const own = job.length ? job : S.trains;
  $("status").textContent = "updated " + new Date(S.lastOk).toLocaleTimeString(); $("status").className = "";
  if (lastTrain) $("iter").textContent = Math.max(lastTrain.iter, n ? n.iter : 0).toLocaleString("en") + " / " + lastTrain.max_iter.toLocaleString("en");
  else if (n) $("iter").textContent = n.iter.toLocaleString("en");
  if (lastTrain) { $("loss").textContent = fmt(lastTrain.loss); $("imgs").textContent = fmt(lastTrain.img_per_s, 4); }
  const names = [...new Set(tests.flatMap(r => Object.keys(r.outputs)))];
  const scores = names.filter(k => !/loss/i.test(k)), losses = names.filter(k => /loss/i.test(k));
  if (tests.length && scores.length) {
    const t = tests[tests.length - 1];
    $("accuracy").textContent = fmt(t.outputs[scores[0]], 4);
    $("accuracy-name").textContent = "test " + scores[0] + " at " + t.iter.toLocaleString("en") + (S.tests.length ? "" : " (the leader's page)");
  }
  const byNet = k => tests.map(r => [r.iter, r.outputs[k]]);
  $("charts").innerHTML =
    chart("test outputs", scores.map(k => ({ name: k, pts: byNet(k) })), { unit: true }) +
    chart("loss (train smoothed; test dashed)", [{ name: "train loss", pts: own.map(r => [r.iter, r.loss]) }]
      .concat(losses.map(k => ({ name: "test " + k, pts: byNet(k), dash: true }))), { y0: 0 }) +
    chart(job.length ? "images/s, the job" : "images/s, this machine", [{ name: "images/s", pts: own.map(r => [r.iter, r.img_per_s]) }], { y0: 0 });
  let where = "one process";
  if (n) {
    const me = (n.peers || []).find(p => p.self);
    where = "machine " + n.machine + (me ? " (" + me.name + ")" : "") + " of " + (n.peers || []).length + (n.quorum ? "" : " — cut off from a majority");
    $("title").textContent = "hogstream job — " + (n.peers || []).length + " machines";
    $("aggregation").textContent = "aggregation: " + (n.aggregation || "–") + " · mean weight " + fmt(n.weight) +
      (n.policy ? " · policy " + n.policy.name : "") + " · chunks mastered here " + n.owned + " of " + n.chunks;
  } else if (lastTrain) {
    $("title").textContent = "hogstream job";
  }
  $("where").textContent = where;
  drawMachines(n);
  drawControl();
}

function drawMachines(n) {
  const body = $("machines").tBodies[0];
  $("machines").hidden = !n;
  if (!n) { $("leader").textContent = S.trains.length ? "this one" : "–"; return; }
  const lead = (n.peers || []).find(p => p.rank === n.leader);
  $("leader").textContent = n.leader + (lead ? " (" + lead.name + ")" : "");
  const lagging = (n.peers || []).filter(p => p.straggler && p.live);
  $("lagging").textContent = lagging.length ? lagging.map(p => p.rank + " (" + p.name + ")").join(", ") : "none";
  $("notes").textContent = lagging.map(p => "machine " + p.rank + " (" + p.name + ") lags the job's median rate of " + fmt(n.median_iter_per_s) + " iter/s at " + fmt(p.iter_per_s) + " iter/s").join("; ");
  body.innerHTML = (n.peers || []).map(p => {
    const cls = [p.leader && "leader", p.straggler && p.live && "lagging", p.left && "left", !p.live && !p.left && "down"].filter(Boolean).join(" ");
    const state = p.left ? "left" : !p.live ? "down" : p.ready ? (p.straggler ? "training, lagging" : "training") : "up";
    const total = Math.max(1, ...p.staleness_buckets);
    const bars = p.staleness_buckets.map((c, i) => `<i title="≤ ${(n.staleness_bounds || [])[i] ?? "more"}: ${c}" style="height:${(14 * c / total).toFixed(1)}px"></i>`).join("");
    const other = !p.self;
    return `<tr data-rank="${p.rank}" class="${cls}"><td class="name">${p.rank} ${esc(p.name)}${p.self ? " (this page)" : ""}</td>` +
      `<td class="state">${state}</td><td>${fmt(p.iter_per_s)}</td><td>${p.iterations.toLocaleString("en")}</td>` +
      `<td>${other ? p.deltas_applied.toLocaleString("en") : "–"}</td><td>${other ? p.refused : "–"}</td>` +
      `<td>${other ? fmt(p.staleness_mean) : "–"}</td><td>${other ? `<span class="bars">${bars}</span>` : ""}</td>` +
      `<td>${other ? bytes(p.bytes_in) + "<br>" + fmt(p.gbit_in * 1000) + " Mb/s" : "–"}</td>` +
      `<td>${other ? bytes(p.bytes_out) + "<br>" + fmt(p.gbit_out * 1000) + " Mb/s" : "–"}</td>` +
      `<td>${other ? p.frames_foreign + " / " + p.frames_bad_mac + " / " + p.frames_malformed : "–"}</td><td>${other ? p.frames_lost : "–"}</td></tr>`;
  }).join("");
}

function drawControl() {
  $("control").hidden = !S.meta.control;
  $("token-box").hidden = !S.meta.token;
}

async function ask(what) {
  if (what === "stop" && !confirm("Stop the job? It snapshots, then ends.")) return;
  const headers = {};
  if ($("token").value) headers["X-Hogstream-Token"] = $("token").value.trim();
  try {
    const res = await fetch("/control/" + what, { method: "POST", headers });
    $("control-said").textContent = (await res.text()).trim();
  } catch (e) { $("control-said").textContent = "no answer"; }
}
$("snap").onclick = () => ask("snapshot");
$("stop").onclick = () => ask("stop");
poll();
setInterval(poll, 1500);
</script>
</body></html>
)HSPAGE";
  return page;
}

}  // namespace hogstream
