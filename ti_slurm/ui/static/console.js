// ti-slurm console: fetches JSON from the console and shows it. User text (job names, reasons, log lines)
// is only ever set as text (textContent), never parsed as HTML.
"use strict";

const csrf = document.querySelector('meta[name="csrf-token"]').content;
const POLL_MS = 1000;

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function seconds(s) {
  if (s === null || s === undefined) return "";
  if (s < 60) return `${Math.round(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
}

function mib(bytes) {
  return bytes === null || bytes === undefined ? "" : `${(bytes / 1048576).toFixed(0)} MiB`;
}

// run fn every ms, counted from when its last answer came: a slow server is never asked twice at once by a page
function every(ms, fn) {
  const next = async () => {
    try { await fn(); } catch (err) { /* said by fn where it matters; the next round tries again */ }
    setTimeout(next, ms);
  };
  setTimeout(next, ms);
}

async function getJSON(url) {
  const res = await fetch(url, { credentials: "same-origin" });
  const data = await res.json();
  if (!res.ok) throw new Error(data.error || res.statusText);
  return data;
}

// -- the job list ------------------------------------------------------------------------------------
const picked = new Set();  // the jobs ticked for a comparison (kept across the list's refreshes)
function pickBox(job) {
  const td = el("td");
  if (job.state === "SWEEP") return td;
  const box = document.createElement("input");
  box.type = "checkbox";
  box.className = "pick";
  box.checked = picked.has(job.id);
  box.addEventListener("change", () => { if (box.checked) picked.add(job.id); else picked.delete(job.id); showPicked(); });
  td.append(box);
  return td;
}
function showPicked() {
  const button = document.getElementById("compare");
  button.disabled = picked.size < 2 || picked.size > 20;
  button.textContent = `Compare selected (${picked.size})`;
}

function jobRow(job, point) {
  const tr = el("tr", null, point ? "point" : "");
  tr.append(pickBox(job));
  const link = el("a", job.id);
  link.href = job.state === "SWEEP" ? `/sweep/${encodeURIComponent(job.id)}` : `/job/${encodeURIComponent(job.id)}`;
  const first = el("td");
  first.append(link);
  const sent = job.submitted ? new Date(job.submitted * 1000).toLocaleString() : "";
  tr.append(first, el("td", job.name), el("td", job.state, `state ${job.state}`), el("td", sent, "when"),
    el("td", job.cluster || ""), el("td", job.mode || ""), el("td", job.nodes || ""), el("td", seconds(job.wait)),
    el("td", seconds(job.run)));
  const why = job.failed_node ? `${job.reason} (node ${job.failed_node})` : job.reason;
  tr.append(el("td", job.waits_for ? `${why}; waits for ${job.waits_for}` : why), rowActions(job));
  tr.dataset.job = job.id;
  return tr;
}

// a row's actions: its logs (the job's page, at its log), cancel while it may run, resubmit once it ended
function rowActions(job) {
  const td = el("td", null, "actions");
  if (job.state === "SWEEP") return td;
  const logs = el("a", "logs");
  logs.href = `/job/${encodeURIComponent(job.id)}#log`;
  td.append(logs);
  const act = (label, path, question, done) => {
    const button = el("button", label, `act-${label}`);
    button.type = "button";
    button.addEventListener("click", async () => {
      if (!window.confirm(question)) return;
      const res = await fetch(path, { method: "POST", headers: { "X-CSRF-Token": csrf }, credentials: "same-origin" });
      const answer = res.ok ? await res.json() : null;
      document.getElementById("said").textContent = answer ? done(answer) : `${label} refused: ${res.status}`;
      refreshList();
    });
    td.append(" ", button);
  };
  const id = encodeURIComponent(job.id);
  if (!job.terminal) act("cancel", `/api/job/${id}/cancel`, `Cancel job ${job.id}? Its nodes stop now.`, () => `cancel of ${job.id} requested`);
  else act("resubmit", `/api/job/${id}/resubmit`, `Submit job ${job.id} again, as it was planned? It becomes a new job.`, (a) => `${job.id} submitted again as ${a.resubmitted}`);
  return td;
}

async function refreshList() {
  const form = new FormData(document.getElementById("filters"));
  const query = new URLSearchParams(form).toString();
  try {
    const rows = await getJSON(`/api/jobs?${query}`);
    const body = document.querySelector("#jobs tbody");
    const open = new Set([...body.querySelectorAll("tr.sweep.open")].map((r) => r.dataset.job));
    body.replaceChildren();
    for (const job of rows) {
      const tr = jobRow(job, false);
      body.append(tr);
      if (job.points) {
        tr.classList.add("sweep");
        if (open.has(job.id)) tr.classList.add("open");
        const toggle = el("button", open.has(job.id) ? "−" : "+", "toggle");
        toggle.type = "button";
        toggle.title = "its points";
        toggle.addEventListener("click", () => { tr.classList.toggle("open"); refreshList(); });
        tr.children[1].prepend(toggle);
        if (open.has(job.id)) for (const p of job.points) body.append(jobRow(p, true));
      }
    }
    document.getElementById("empty").hidden = rows.length > 0;
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    document.getElementById("updated").textContent = `not updated: ${err.message}`;
  }
}

// -- charts: a small SVG line chart, one line per node -------------------------------------------------
const COLORS = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#be185d", "#4b5563"];

// lines: [{label, points: [[x, y]]}]; x is seconds since the start, or (opts.steps) a training step.
// Axes with ticks; the values at the pointer on hover; drag across to zoom on a range, double-click for all of
// it; opts.marks: [{x, text, level}] events drawn across the chart at their time.
const zooms = {}, hovers = {};  // chart key -> the x range zoomed to; -> the x the pointer was last at
const SVG = "http://www.w3.org/2000/svg";
function svgEl(tag, attrs, cls, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (cls) e.setAttribute("class", cls);
  if (text !== undefined) e.textContent = text;
  return e;
}
function niceTicks(lo, hi, n = 5) {
  const span = hi - lo || 1, raw = span / n, mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((st) => span / st <= n) || 10 * mag;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + span * 1e-9 && out.length < 12; v += step) out.push(+v.toPrecision(12));
  return out;
}
function num(v) { const a = Math.abs(v); return a >= 1e5 || (a > 0 && a < 1e-3) ? v.toExponential(1) : String(+v.toPrecision(4)); }
function nearest(points, t) {
  let best = null;
  for (const p of points) if (best === null || Math.abs(p[0] - t) < Math.abs(best[0] - t)) best = p;
  return best;
}

function drawChart(svg, lines, unitMax, opts = {}) {
  const W = 600, H = 160, L = 46, R = 10, T = 8, B = 22;
  const key = opts.key || svg.id;
  svg.replaceChildren();
  svg.redraw = () => drawChart(svg, lines, unitMax, opts);
  const all = lines.flatMap((l) => l.points);
  if (!all.length) { svg.append(svgText(opts.empty || "no samples yet (one every 5 s)", L, H / 2)); return; }
  let tMin = opts.steps ? Math.min(...all.map((p) => p[0])) : 0;
  let tMax = Math.max(...all.map((p) => p[0]), tMin + 1);
  if (zooms[key]) [tMin, tMax] = zooms[key];
  const shown = lines.map((l) => ({ label: l.label, points: l.points.filter((p) => p[0] >= tMin && p[0] <= tMax) }));
  const seen = shown.flatMap((l) => l.points);
  const ys = (seen.length ? seen : all).map((p) => p[1]);
  const yMin = Math.min(0, ...ys);
  const yMax = Math.max(unitMax || 0, ...ys, yMin + (opts.steps ? 1e-9 : 1));
  const x = (t) => L + ((t - tMin) / (tMax - tMin)) * (W - L - R);
  const y = (v) => H - B - ((v - yMin) / (yMax - yMin)) * (H - B - T);
  const xText = (t) => (opts.steps ? num(t) : seconds(t));
  for (const v of niceTicks(yMin, yMax, 4)) {
    svg.append(svgEl("line", { x1: L, x2: W - R, y1: y(v), y2: y(v) }, "grid"));
    svg.append(svgEl("text", { x: L - 4, y: y(v) + 4, "text-anchor": "end" }, "tick y", num(v)));
  }
  for (const t of niceTicks(tMin, tMax, 6)) {
    svg.append(svgEl("line", { x1: x(t), x2: x(t), y1: H - B, y2: H - B + 4 }, "axis"));
    svg.append(svgEl("text", { x: x(t), y: H - 6, "text-anchor": "middle" }, "tick x", xText(t)));
  }
  svg.append(svgEl("path", { d: `M${L},${T} V${H - B} H${W - R}` }, "axis"));
  for (const m of opts.marks || []) {
    if (m.x < tMin || m.x > tMax) continue;
    const mark = svgEl("line", { x1: x(m.x), x2: x(m.x), y1: T, y2: H - B }, `mark mark-${m.level}`);
    mark.dataset.mark = m.text;
    mark.append(svgEl("title", {}, "", m.text));
    svg.append(mark);
  }
  shown.forEach((line, i) => {
    const path = svgEl("polyline", { points: line.points.map((p) => `${x(p[0])},${y(p[1])}`).join(" "), stroke: COLORS[i % COLORS.length] }, "line");
    path.dataset.node = line.label;
    svg.append(path);
  });
  const cursor = svgEl("line", { y1: T, y2: H - B, visibility: "hidden" }, "cursor");
  const tip = svgEl("text", { y: T + 10, visibility: "hidden" }, "hover-tip");
  svg.append(cursor, tip);
  const at = (e) => { const r = svg.getBoundingClientRect(); return tMin + (((e.clientX - r.left) / r.width) * W - L) / (W - L - R) * (tMax - tMin); };
  const hover = (t) => {
    const near = shown.map((l) => [l.label, nearest(l.points, t)]).filter(([, p]) => p);
    if (!near.length) return;
    const t0 = near[0][1][0];
    tip.textContent = `${opts.steps ? "step " : ""}${xText(t0)}: ${near.map(([lab, p]) => (shown.length > 1 ? `${lab} ` : "") + num(p[1])).join(", ")}`;
    svg.dataset.hover = tip.textContent;
    const px = x(t0);
    for (const [k, v] of [["x1", px], ["x2", px], ["visibility", "visible"]]) cursor.setAttribute(k, v);
    tip.setAttribute("x", px > W / 2 ? px - 6 : px + 6);
    tip.setAttribute("text-anchor", px > W / 2 ? "end" : "start");
    tip.setAttribute("visibility", "visible");
  };
  if (hovers[key] !== undefined) hover(hovers[key]);
  let from = null;
  svg.onmousemove = (e) => { hovers[key] = at(e); hover(hovers[key]); };
  svg.onmouseleave = () => { delete hovers[key]; cursor.setAttribute("visibility", "hidden"); tip.setAttribute("visibility", "hidden"); delete svg.dataset.hover; };
  svg.onmousedown = (e) => { from = at(e); e.preventDefault(); };
  svg.onmouseup = (e) => {
    const to = at(e);
    if (from !== null && Math.abs(to - from) > (tMax - tMin) / 50) { zooms[key] = [Math.min(from, to), Math.max(from, to)]; svg.redraw(); }
    from = null;
  };
  svg.ondblclick = () => { delete zooms[key]; svg.redraw(); };
  svg.classList.toggle("zoomed", !!zooms[key]);
}

// a training scalar: a number, or "NaN", "Infinity", "-Infinity" (JSON has no such numbers); shown as such
function scalarValue(v) { return typeof v === "number" ? v : Number(v); }
function scalarText(v) { const n = scalarValue(v); return Number.isFinite(n) ? n.toPrecision(4) : String(n); }

// the training's own scalars (TensorBoard event files in TI_SLURM_TENSORBOARD_DIR): a chart per tag
const SCALAR_CHARTS = 12;
function drawScalars(scalars) {
  const box = document.getElementById("scalars");
  const tags = Object.keys(scalars).sort().slice(0, SCALAR_CHARTS);
  document.getElementById("scalars-none").hidden = tags.length > 0;
  box.replaceChildren(...tags.map((tag) => {
    const figure = el("figure");
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("viewBox", "0 0 600 160");
    svg.setAttribute("class", "chart scalar");
    svg.dataset.tag = tag;
    const points = scalars[tag];
    const last = points.length ? ` (last: ${scalarText(points[points.length - 1][1])} at step ${points[points.length - 1][0]})` : "";
    figure.append(el("figcaption", `${tag}${last}`), svg);
    const drawn = points.filter((p) => Number.isFinite(scalarValue(p[1])));  // a NaN or Inf is said, not drawn
    drawChart(svg, [{ label: tag, points: drawn }], 0, { steps: true, empty: "no points yet", key: `scalar:${tag}` });
    return figure;
  }));
}

function svgText(text, x, y) {
  const t = document.createElementNS("http://www.w3.org/2000/svg", "text");
  t.setAttribute("x", x); t.setAttribute("y", y);
  t.textContent = text;
  return t;
}

// -- a job's page --------------------------------------------------------------------------------------
const job = { id: document.body.dataset.job, logNode: "", logOffset: -1, terminal: false, lastEvents: 0, picked: false };

// the events worth seeing on the time axis (an attempt's end, a restart, a signal, a straggler), at their time
// since the series' start
function faultMarks(events, series) {
  const starts = series.map((s) => s.started).filter((t) => t);
  if (!starts.length) return [];
  const origin = Math.min(...starts);
  const wanted = (ev) => ev.level !== "info" || (ev.event === "start" && !ev.text.startsWith("attempt 0 "));
  return events.filter(wanted).map((ev) => ({ x: ev.time - origin, text: ev.text, level: ev.level }));
}

// a bar of where the job's time went: each part's share, its name and seconds on hover
function showGoodput(spent) {
  const parts = ["queued", "starting", "productive", "lost", "recomputed"].filter((k) => spent[k] > 0);
  const total = parts.reduce((sum, k) => sum + spent[k], 0);
  const bar = document.getElementById("goodput");
  bar.replaceChildren(...parts.map((k) => {
    const part = el("span", null, `part ${k}`);
    part.style.width = `${(100 * spent[k]) / total}%`;
    part.title = `${k}: ${seconds(spent[k])} (${((100 * spent[k]) / total).toFixed(1)}%)`;
    part.dataset.part = k;
    return part;
  }));
  bar.hidden = !total;
}

// a training's step of its total, its pace and when it ends (follow/progress.py), with a warning past the limit
function showProgress(p) {
  const section = document.getElementById("progress");
  section.hidden = !p;
  if (!p) return;
  const share = p.fraction === null ? null : p.fraction * 100;
  document.getElementById("progress-bar").style.width = share === null ? "0" : `${share}%`;
  const parts = [p.total ? `step ${p.step} of ${p.total} (${share.toFixed(1)}%)` : `step ${p.step} (no total reported)`];
  if (p.rate) parts.push(`${p.rate >= 1 ? p.rate.toFixed(2) : p.rate.toPrecision(2)} steps/s`);
  if (p.left !== null) parts.push(`ends in ${seconds(p.left)} (at ${new Date(p.finish_at * 1000).toLocaleString()})`);
  document.getElementById("progress-text").textContent = parts.join(", ");
  const warning = document.getElementById("progress-warning");
  warning.textContent = p.warning;
  warning.hidden = !p.warning;
}

function showJob(data) {
  document.getElementById("name").textContent = data.name;
  const state = document.getElementById("state");
  state.textContent = data.state;
  state.className = `state ${data.state}`;
  document.getElementById("reason").textContent = data.waits_for ? `${data.reason} (waits for ${data.waits_for})` : data.reason;
  document.getElementById("cancel").disabled = data.terminal;
  const summary = document.getElementById("summary");
  summary.replaceChildren();
  const effective = data.effective === null || data.effective === undefined ? "" : `${(data.effective * 100).toFixed(1)}% of the time since the first start`;
  const spent = data.goodput || {};
  const went = ["queued", "starting", "productive", "lost", "recomputed"].filter((k) => spent[k] !== undefined).map((k) => `${k} ${seconds(spent[k])}`).join(", ");
  const submitted = data.submitted ? new Date(data.submitted * 1000).toLocaleString() : "";
  const facts = [["submitted", submitted], ["submitted by", data.submitted_by], ["mode", data.mode], ["nodes", data.nodes.length], ["effective training time", effective], ["where the time went", went], ["code", data.code.commit ? `git ${data.code.commit.slice(0, 12)}${data.code.dirty ? " with changes" : ""}` : ""]];
  for (const [k, v] of facts) if (v) summary.append(el("dt", k), el("dd", v));
  showGoodput(spent);
  showProgress(data.progress);
  document.getElementById("settings").replaceChildren(...data.settings.flatMap(([k, v]) => [el("dt", k), el("dd", v)]));
  const spec = document.getElementById("spec-text");
  if (spec.textContent !== (data.spec || "")) spec.textContent = data.spec || "";
  document.getElementById("spec").hidden = !data.spec;
  const attempts = document.getElementById("attempts");
  attempts.replaceChildren();
  for (const a of data.attempts) {
    const when = a.started ? new Date(a.started * 1000).toLocaleTimeString() : "";
    const how = a.requeued ? (a.in_place ? " -> restarted in place" : " -> requeued") : "";
    const li = el("li", `attempt ${a.attempt}: ${when} ${a.ended ? a.state + how : "running"}${a.reason ? ": " + a.reason : ""}`);
    li.className = a.in_place ? "in-place" : a.requeued ? "requeued" : "";
    if (a.start) li.append(el("div", `start: ${a.start}`, "note"));
    if (a.cause && a.ended) {
      const ev = a.evidence || {};
      const where = ev.line ? `${ev.log}:${ev.line}` : ev.log || "";
      const said = [where, ev.text || ""].filter((x) => x).join(": ");
      li.append(el("div", `cause: ${a.cause}${ev.node ? " on " + ev.node : ""}${said ? ": " + said : ""}`, `note cause cause-${a.cause}`));
    }
    for (const [lost, spare] of Object.entries(a.replaced || {})) li.append(el("div", spare ? `spare ${spare} took the place of lost node ${lost}` : `went on without lost node ${lost}`, "note"));
    attempts.append(li);
  }
  const body = document.querySelector("#nodes tbody");
  body.replaceChildren();
  const select = document.getElementById("log-node");
  const labels = [...select.options].map((o) => o.value);
  for (const n of data.nodes) {
    const tr = el("tr", null, n.failed ? "failed" : "");
    const gpus = Object.entries(n.gpus).map(([i, u]) => `${i}: ${u}`).join(", ");
    tr.append(el("td", n.label), el("td", n.component), el("td", n.rank), el("td", n.node), el("td", n.state),
      el("td", n.exit_code ?? ""), el("td", data.terminal ? "" : n.cpu ?? ""), el("td", mib(n.rss)), el("td", gpus));
    tr.dataset.node = n.label;
    body.append(tr);
    if (!labels.includes(n.label)) select.append(new Option(`${n.label} (${n.node})`, n.label));
  }
  // the log shown: the first node's, and once a node fails, the failed one's (unless the user picked a node)
  const failed = data.nodes.find((n) => n.failed);
  const wanted = failed ? failed.label : job.logNode || (select.options.length ? select.options[0].value : "");
  if (wanted && !job.picked && wanted !== job.logNode) {
    job.logNode = wanted; job.logOffset = -1;
    document.getElementById("log").textContent = "";  // not the last node's lines under this node's name
    select.value = job.logNode;
    showLogLinks();  // the log follows at the next poll (a second reader now would append its start twice)
  }
  const series = Object.entries(data.series).map(([label, s]) => ({ label, node: s.node, points: s.points, started: s.started }));
  const marks = faultMarks(data.events, series);
  drawChart(document.getElementById("chart-cpu"), series.map((s) => ({ label: s.label, points: s.points.map((p) => [p[0], p[1]]) })), 100, { marks });
  drawChart(document.getElementById("chart-mem"), series.map((s) => ({ label: s.label, points: s.points.map((p) => [p[0], p[2] / 1048576]) })), 0, { marks });
  drawChart(document.getElementById("chart-gpu"), series.filter((s) => s.points.some((p) => p[3].length)).map((s) => ({ label: s.label, points: s.points.map((p) => [p[0], Math.max(0, ...p[3])]) })), 100, { marks });
  const legend = document.getElementById("legend");
  legend.replaceChildren(...series.map((s, i) => { const sp = el("span", `${s.label} (${s.node})`, "key"); sp.style.setProperty("--c", COLORS[i % COLORS.length]); return sp; }));
  drawScalars(data.scalars || {});
  showEvents(data.events);
  job.terminal = data.terminal;
}

function showLogLinks() {
  document.getElementById("download").href = `/job/${encodeURIComponent(job.id)}/log/${encodeURIComponent(job.logNode)}`;
  document.getElementById("log-cli").textContent = `ti-slurm logs ${job.id} --node ${job.logNode} -f`;
}

function showEvents(events) {
  const level = document.getElementById("event-level").value;
  const body = document.querySelector("#events tbody");
  body.replaceChildren();
  for (const ev of events.slice(-500).reverse()) {
    if (level && ev.level !== level) continue;
    const tr = el("tr", null, ev.level);
    tr.append(el("td", ev.time ? new Date(ev.time * 1000).toLocaleTimeString() : ""), el("td", ev.level), el("td", ev.event), el("td", ev.text));
    body.append(tr);
  }
}

async function followLog() {
  if (!job.logNode) return;
  const node = job.logNode, asked = job.logOffset;
  try {
    const chunk = await getJSON(`/api/job/${encodeURIComponent(job.id)}/log?node=${encodeURIComponent(node)}&offset=${job.logOffset}`);
    if (node !== job.logNode || asked !== job.logOffset) return;  // another node picked, or another read landed first
    const log = document.getElementById("log");
    if (job.logOffset < 0) { log.textContent = ""; document.getElementById("log-cut").hidden = !chunk.cut; }
    if (chunk.text) {
      log.append(document.createTextNode(chunk.text));
      if (log.textContent.length > 2000000) log.textContent = log.textContent.slice(-1000000);  // bounded
      applySearch();
      if (document.getElementById("follow").checked) log.scrollTop = log.scrollHeight;
    }
    job.logOffset = chunk.offset;
  } catch (err) { /* the next poll tries again */ }
}

function applySearch() {
  const term = document.getElementById("log-search").value;
  const log = document.getElementById("log");
  log.classList.toggle("searching", !!term);
  if (!term) return;
  const lines = log.textContent.split("\n").filter((l) => l.includes(term));
  log.dataset.matches = String(lines.length);
}

async function refreshJob() {
  try {
    showJob(await getJSON(`/api/job/${encodeURIComponent(job.id)}`));
  } catch (err) {
    document.getElementById("reason").textContent = `not updated: ${err.message}`;
  }
}

function startJobPage() {
  document.getElementById("log-node").addEventListener("change", (e) => {
    job.logNode = e.target.value; job.logOffset = -1; job.picked = true;
    document.getElementById("log").textContent = "";
    showLogLinks();
    followLog();
  });
  document.getElementById("log-search").addEventListener("input", () => {
    const term = document.getElementById("log-search").value;
    const log = document.getElementById("log");
    const all = log.dataset.all ?? log.textContent;
    log.dataset.all = all;
    log.textContent = term ? all.split("\n").filter((l) => l.includes(term)).join("\n") : all;
    if (!term) delete log.dataset.all;
  });
  document.getElementById("event-level").addEventListener("change", refreshJob);
  document.getElementById("cancel").addEventListener("click", async () => {
    if (!window.confirm(`Cancel job ${job.id}? Its nodes stop now.`)) return;
    const res = await fetch(`/api/job/${encodeURIComponent(job.id)}/cancel`, { method: "POST", headers: { "X-CSRF-Token": csrf }, credentials: "same-origin" });
    document.getElementById("reason").textContent = res.ok ? "cancel requested" : `cancel refused: ${res.status}`;
    refreshJob();
  });
  document.getElementById("resubmit").addEventListener("click", async () => {
    if (!window.confirm(`Submit job ${job.id} again, as it was planned? It becomes a new job.`)) return;
    const res = await fetch(`/api/job/${encodeURIComponent(job.id)}/resubmit`, { method: "POST", headers: { "X-CSRF-Token": csrf }, credentials: "same-origin" });
    const answer = res.ok ? await res.json() : null;
    if (answer) window.location.assign(`/job/${encodeURIComponent(answer.resubmitted)}`);
    else document.getElementById("reason").textContent = `resubmit refused: ${res.status} ${(await res.text()).slice(0, 200)}`;
  });
  refreshJob().then(followLog);
  every(2 * POLL_MS, refreshJob);
  every(POLL_MS, () => (document.getElementById("log-search").value ? null : followLog()));
}

// -- runs compared: one scalar of 2-20 jobs overlaid, their settings side by side ------------------------------
async function refreshCompare(tag) {
  const ids = document.body.dataset.jobs;
  const data = await getJSON(`/api/compare?jobs=${encodeURIComponent(ids)}${tag ? `&tag=${encodeURIComponent(tag)}` : ""}`);
  const select = document.getElementById("compare-tag");
  if (select.options.length !== data.tags.length) select.replaceChildren(...data.tags.map((t) => new Option(t, t)));
  select.value = data.tag;
  document.getElementById("compare-caption").textContent = data.tag ? `${data.tag} by step` : "no TensorBoard scalars in these runs";
  const lines = data.runs.map((r) => ({ label: r.id, points: r.points.filter((p) => Number.isFinite(scalarValue(p[1]))) }));
  drawChart(document.getElementById("chart-compare"), lines, 0, { steps: true, empty: "no points yet", key: `compare:${data.tag}` });
  document.getElementById("compare-legend").replaceChildren(...data.runs.map((r, i) => {
    const sp = el("span", `${r.id} ${r.name} (${r.state})`, "key");
    sp.style.setProperty("--c", COLORS[i % COLORS.length]);
    return sp;
  }));
  const names = [...new Set(data.runs.flatMap((r) => Object.keys(r.settings)))];
  const head = document.querySelector("#compare-settings thead tr");
  head.replaceChildren(el("th", "setting"), ...data.runs.map((r) => el("th", r.id)));
  document.querySelector("#compare-settings tbody").replaceChildren(...names.map((n) => {
    const values = data.runs.map((r) => r.settings[n] ?? "");
    const tr = el("tr", null, new Set(values).size > 1 ? "differs" : "");
    tr.append(el("td", n), ...values.map((v) => el("td", v)));
    tr.dataset.setting = n;
    return tr;
  }));
}

// -- the nodes your jobs avoid ---------------------------------------------------------------------------
async function refreshNodes() {
  const rows = await getJSON("/api/nodes");
  const when = (t) => (t ? new Date(t * 1000).toLocaleString() : "");
  document.querySelector("#avoided tbody").replaceChildren(...rows.map((n) => {
    const tr = el("tr");
    const job = el("a", n.job);
    job.href = `/job/${encodeURIComponent(n.job)}`;
    const jobCell = el("td");
    jobCell.append(job);
    const release = el("button", "release", "act-release");
    release.type = "button";
    release.addEventListener("click", async () => {
      if (!window.confirm(`Let your jobs use ${n.node} again?`)) return;
      await fetch(`/api/nodes/${encodeURIComponent(n.node)}/release`, { method: "POST", headers: { "X-CSRF-Token": csrf }, credentials: "same-origin" });
      refreshNodes();
    });
    const last = el("td");
    last.append(release);
    tr.append(el("td", n.node), el("td", n.cluster), el("td", n.cause, `cause cause-${n.cause}`), jobCell, el("td", when(n.since)), el("td", when(n.until)), last);
    tr.dataset.node = n.node;
    return tr;
  }));
  document.getElementById("none").hidden = rows.length > 0;
}

// -- a sweep's page -------------------------------------------------------------------------------------
const sweep = { id: document.body.dataset.sweep, sortBy: null, descending: false };

async function refreshSweep() {
  const data = await getJSON(`/api/sweep/${encodeURIComponent(sweep.id)}`);
  document.getElementById("name").textContent = data.name;
  const names = [...new Set(data.points.flatMap((p) => Object.keys(p.params)))];
  const kind = document.getElementById("scalar-kind").value;  // each scalar's last or best value
  const valuesOf = (p) => (kind === "best" ? p.best : p.scalars) || {};
  const tags = [...new Set(data.points.flatMap((p) => Object.keys(p.scalars || {})))].sort().slice(0, 6);
  const columns = [["point", (p) => p.index], ...names.map((n) => [n, (p) => p.params[n]]),
    ["state", (p) => p.state], ["run time", (p) => p.run], ...tags.map((t) => [kind === "best" ? `${t} (best)` : t, (p) => { const v = valuesOf(p)[t]; return v === undefined ? null : scalarValue(v); }]),
    ["reason", (p) => p.reason]];
  document.getElementById("compare-points").href = `/compare?jobs=${encodeURIComponent(data.points.slice(0, 20).map((p) => p.id).join(","))}`;
  const head = document.querySelector("#points thead tr");
  head.replaceChildren(...columns.map(([label], i) => {
    const th = el("th", label);
    th.addEventListener("click", () => { sweep.descending = sweep.sortBy === i ? !sweep.descending : false; sweep.sortBy = i; refreshSweep(); });
    return th;
  }));
  let points = data.points;
  if (sweep.sortBy !== null) {
    const key = columns[sweep.sortBy][1];
    points = [...points].sort((a, b) => { const x = key(a), y = key(b); return (x > y ? 1 : x < y ? -1 : 0) * (sweep.descending ? -1 : 1); });
  }
  const body = document.querySelector("#points tbody");
  body.replaceChildren(...points.map((p) => {
    const tr = el("tr", null, ["COMPLETED", "RUNNING", "PENDING"].includes(p.state) ? "" : "failed");
    const link = el("a", p.index);
    link.href = `/job/${encodeURIComponent(p.id)}`;
    const first = el("td");
    first.append(link);
    const scalarCells = tags.map((t) => { const v = valuesOf(p)[t]; return el("td", v === undefined ? "" : scalarText(v), "scalar"); });
    tr.append(first, ...names.map((n) => el("td", p.params[n])), el("td", p.state, `state ${p.state}`), el("td", seconds(p.run)), ...scalarCells, el("td", p.reason));
    return tr;
  }));
}

// every CLI command shown gets a button that copies it (the clipboard, else the text selected for Ctrl-C)
function addCopyButtons() {
  for (const code of document.querySelectorAll("code.cli")) {
    const button = el("button", "copy", "copy-cli");
    button.type = "button";
    button.title = "copy the command";
    button.addEventListener("click", async () => {
      try { await navigator.clipboard.writeText(code.textContent); button.textContent = "copied"; }
      catch { window.getSelection().selectAllChildren(code); button.textContent = "selected"; }
      setTimeout(() => { button.textContent = "copy"; }, 1500);
    });
    code.after(button);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  addCopyButtons();
  if (document.body.dataset.page === "list") {
    document.getElementById("filters").addEventListener("input", refreshList);
    document.getElementById("filters").addEventListener("submit", (e) => e.preventDefault());
    document.getElementById("compare").addEventListener("click", () => {
      window.location.assign(`/compare?jobs=${encodeURIComponent([...picked].join(","))}`);
    });
    refreshList();
    every(POLL_MS, refreshList);
  } else if (document.body.dataset.page === "job") {
    startJobPage();
  } else if (document.body.dataset.page === "compare") {
    const tag = () => document.getElementById("compare-tag").value;
    document.getElementById("compare-tag").addEventListener("change", () => refreshCompare(tag()));
    refreshCompare("");
    every(5 * POLL_MS, () => refreshCompare(tag()));
  } else if (document.body.dataset.page === "nodes") {
    refreshNodes();
    every(10 * POLL_MS, refreshNodes);
  } else if (document.body.dataset.page === "sweep") {
    document.getElementById("scalar-kind").addEventListener("change", refreshSweep);
    refreshSweep();
    every(2 * POLL_MS, refreshSweep);
  }
});
