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
function jobRow(job, point) {
  const tr = el("tr", null, point ? "point" : "");
  const link = el("a", job.id);
  link.href = job.state === "SWEEP" ? `/sweep/${encodeURIComponent(job.id)}` : `/job/${encodeURIComponent(job.id)}`;
  const first = el("td");
  first.append(link);
  tr.append(first, el("td", job.name), el("td", job.state, `state ${job.state}`), el("td", job.mode || ""),
    el("td", job.nodes || ""), el("td", seconds(job.wait)), el("td", seconds(job.run)));
  const why = job.failed_node ? `${job.reason} (node ${job.failed_node})` : job.reason;
  tr.append(el("td", job.waits_for ? `${why}; waits for ${job.waits_for}` : why));
  tr.dataset.job = job.id;
  return tr;
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
        tr.firstChild.prepend(toggle);
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

// lines: [{label, points: [[x, y]]}]; x is seconds since the start, or (opts.steps) a training step
function drawChart(svg, lines, unitMax, opts = {}) {
  const W = 600, H = 160, P = 28;
  svg.replaceChildren();
  const all = lines.flatMap((l) => l.points);
  if (!all.length) { svg.append(svgText(opts.empty || "no samples yet (one every 5 s)", P, H / 2)); return; }
  const tMin = opts.steps ? Math.min(...all.map((p) => p[0])) : 0;
  const tMax = Math.max(...all.map((p) => p[0]), tMin + 1);
  const yMin = Math.min(0, ...all.map((p) => p[1]));
  const yMax = Math.max(unitMax || 0, ...all.map((p) => p[1]), yMin + (opts.steps ? 1e-9 : 1));
  const axis = document.createElementNS("http://www.w3.org/2000/svg", "path");
  axis.setAttribute("d", `M${P},${P / 2} V${H - P} H${W - 4}`);
  axis.setAttribute("class", "axis");
  const top = opts.steps ? yMax.toPrecision(3) : yMax.toFixed(0);
  svg.append(axis, svgText(top, 2, P / 2 + 4), svgText(opts.steps ? `step ${tMax}` : seconds(tMax), W - 80, H - 8));
  lines.forEach((line, i) => {
    const path = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    const x = (t) => P + ((t - tMin) / (tMax - tMin)) * (W - P - 8);
    const y = (v) => H - P - ((v - yMin) / (yMax - yMin)) * (H - 1.5 * P);
    path.setAttribute("points", line.points.map((p) => `${x(p[0])},${y(p[1])}`).join(" "));
    path.setAttribute("stroke", COLORS[i % COLORS.length]);
    path.setAttribute("class", "line");
    path.dataset.node = line.label;
    svg.append(path);
  });
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
    drawChart(svg, [{ label: tag, points: drawn }], 0, { steps: true, empty: "no points yet" });
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
  const series = Object.entries(data.series).map(([label, s]) => ({ label, node: s.node, points: s.points }));
  drawChart(document.getElementById("chart-cpu"), series.map((s) => ({ label: s.label, points: s.points.map((p) => [p[0], p[1]]) })), 100);
  drawChart(document.getElementById("chart-mem"), series.map((s) => ({ label: s.label, points: s.points.map((p) => [p[0], p[2] / 1048576]) })), 0);
  drawChart(document.getElementById("chart-gpu"), series.filter((s) => s.points.some((p) => p[3].length)).map((s) => ({ label: s.label, points: s.points.map((p) => [p[0], Math.max(0, ...p[3])]) })), 100);
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

// -- a sweep's page -------------------------------------------------------------------------------------
const sweep = { id: document.body.dataset.sweep, sortBy: null, descending: false };

async function refreshSweep() {
  const data = await getJSON(`/api/sweep/${encodeURIComponent(sweep.id)}`);
  document.getElementById("name").textContent = data.name;
  const names = [...new Set(data.points.flatMap((p) => Object.keys(p.params)))];
  const tags = [...new Set(data.points.flatMap((p) => Object.keys(p.scalars || {})))].sort().slice(0, 6);
  const columns = [["point", (p) => p.index], ...names.map((n) => [n, (p) => p.params[n]]),
    ["state", (p) => p.state], ["run time", (p) => p.run], ...tags.map((t) => [t, (p) => { const v = (p.scalars || {})[t]; return v === undefined ? null : scalarValue(v); }]),
    ["reason", (p) => p.reason]];
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
    const scalarCells = tags.map((t) => { const v = (p.scalars || {})[t]; return el("td", v === undefined ? "" : scalarText(v), "scalar"); });
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
    refreshList();
    every(POLL_MS, refreshList);
  } else if (document.body.dataset.page === "job") {
    startJobPage();
  } else if (document.body.dataset.page === "sweep") {
    refreshSweep();
    every(2 * POLL_MS, refreshSweep);
  }
});
