// Disquette dashboard: polls this node's REST API once a second (no build
// step, no framework; the chart is uPlot, vendored in /static/vendor).
"use strict";

const POLL_MS = 1000;
const CHART_POINTS = 300;           // 5 minutes at one point a second
const DEAD_SUFFIX = ":dead";        // the SDK's dead-letter queues

const state = {
  previous: null,                   // {t, queues: {name: {in, out}}}
  rates: {},                        // queue -> {in, out} jobs/s
  chart: null,
  series: [[], [], []],             // x (s), in/s, out/s
  busy: false,
};

// ------------------------------------------------------------------- API calls
function authHeaders() {
  const pw = sessionStorage.getItem("disquette-password");
  return pw ? { Authorization: "Bearer " + pw } : {};
}

async function api(path, options = {}) {
  const init = { ...options, headers: { ...authHeaders(), ...(options.headers || {}) } };
  if (options.json !== undefined) {
    init.body = JSON.stringify(options.json);
    init.headers["Content-Type"] = "application/json";
  }
  const response = await fetch(path, init);
  const doc = await response.json();
  if (response.status === 401) {
    document.getElementById("auth").hidden = false;
  }
  if (!response.ok && response.status !== 207) {
    const err = new Error(doc.message || response.statusText);
    err.status = response.status;
    err.code = doc.error;
    throw err;
  }
  return doc;
}

const q = (name) => encodeURIComponent(name);

function setStatus(text, isError) {
  const el = document.getElementById("status");
  el.textContent = text;
  el.className = "status" + (isError ? " error" : "");
}

// ------------------------------------------------------------------- rendering
function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text === undefined || text === null ? "" : String(text);
  if (cls) td.className = cls;
  return td;
}

function pill(td, text, kind) {
  td.textContent = "";
  const span = document.createElement("span");
  span.className = "pill " + kind;
  span.textContent = text;
  td.appendChild(span);
}

function button(td, label, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.addEventListener("click", onClick);
  td.appendChild(b);
  return b;
}

function nodeState(n) {
  if (n.priority === 100 || n.flags.includes("fail")) return ["fail", "bad"];
  if (n.flags.includes("leaving")) return ["leaving", "warn"];
  if (n.priority === 10 || n.flags.includes("pfail")) return ["pfail", "warn"];
  if (n.priority === 5) return ["no link", "warn"];
  return ["ok", "ok"];
}

function renderNodes(cluster) {
  const body = document.querySelector("#nodes tbody");
  body.textContent = "";
  for (const n of cluster.nodes) {
    const row = body.insertRow();
    row.dataset.node = n.id;
    cell(row, n.id.slice(0, 12) + (n.myself ? " (this node)" : ""), "id");
    cell(row, n.ip + ":" + n.port);
    const [label, kind] = nodeState(n);
    pill(row.insertCell(), label, kind);
    cell(row, n.flags.join(","));
    cell(row, n.link);
  }
  const me = cluster.nodes.find((n) => n.myself);
  if (me) {
    document.getElementById("node-title").textContent =
      me.id.slice(0, 12) + " · " + me.ip + ":" + me.port + " · " + cluster.nodes.length + " nodes";
  }
}

function fmtRate(r) {
  return r === undefined ? "" : r.toFixed(r < 10 ? 1 : 0);
}

async function pause(queue, how) {
  try {
    await api("/queues/" + q(queue) + "/pause", { method: "POST", json: { state: how } });
    await refresh();
  } catch (e) {
    setStatus("pause " + queue + ": " + e.message, true);
  }
}

function renderQueues(queues) {
  const body = document.querySelector("#queues tbody");
  body.textContent = "";
  document.getElementById("no-queues").hidden = queues.length > 0;
  for (const s of queues.slice().sort((a, b) => a.name.localeCompare(b.name))) {
    const row = body.insertRow();
    row.dataset.queue = s.name;
    cell(row, s.name);
    cell(row, s.len, "num");
    const rate = state.rates[s.name] || {};
    cell(row, fmtRate(rate.in), "num");
    cell(row, fmtRate(rate.out), "num");
    cell(row, s.blocked, "num");
    cell(row, s.jobs_in, "num");
    cell(row, s.jobs_out, "num");
    pill(row.insertCell(), s.pause, s.pause === "none" ? "none" : "paused");
    const actions = row.insertCell();
    if (s.pause === "none") {
      button(actions, "Pause in", () => pause(s.name, "in"));
      button(actions, "Pause out", () => pause(s.name, "out"));
    } else {
      button(actions, "Resume", () => pause(s.name, "none"));
    }
  }
}

// --------------------------------------------------------------- rates, chart
function updateRates(queues, now) {
  const current = { t: now, queues: {} };
  let totalIn = 0;
  let totalOut = 0;
  for (const s of queues) current.queues[s.name] = { in: s.jobs_in, out: s.jobs_out };
  const prev = state.previous;
  state.rates = {};
  if (prev) {
    const dt = Math.max((now - prev.t) / 1000, 0.001);
    for (const [name, c] of Object.entries(current.queues)) {
      const p = prev.queues[name] || { in: c.in, out: c.out };
      // A counter that went down (queue collected and created again) restarts.
      const din = c.in >= p.in ? c.in - p.in : c.in;
      const dout = c.out >= p.out ? c.out - p.out : c.out;
      state.rates[name] = { in: din / dt, out: dout / dt };
      totalIn += din / dt;
      totalOut += dout / dt;
    }
    const [xs, ins, outs] = state.series;
    xs.push(now / 1000);
    ins.push(totalIn);
    outs.push(totalOut);
    if (xs.length > CHART_POINTS) {
      xs.shift(); ins.shift(); outs.shift();
    }
    if (state.chart) state.chart.setData(state.series);
  }
  state.previous = current;
}

function makeChart() {
  const el = document.getElementById("chart");
  const width = Math.max(el.clientWidth - 8, 300);
  state.chart = new uPlot({
    width, height: 220,
    scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(max * 1.1, 1)] } },
    series: [
      {},
      { label: "in (jobs/s)", stroke: "#3d5afe", width: 2, fill: "rgba(61,90,254,0.08)",
        value: (u, v) => (v === null || v === undefined ? "" : v.toFixed(1)) },
      { label: "out (jobs/s)", stroke: "#2e7d32", width: 2,
        value: (u, v) => (v === null || v === undefined ? "" : v.toFixed(1)) },
    ],
    axes: [{}, { label: "jobs/s" }],
  }, state.series, el);
  window.addEventListener("resize", () => {
    state.chart.setSize({ width: Math.max(el.clientWidth - 8, 300), height: 220 });
  });
}

// --------------------------------------------------------------- dead letters
function parseLetter(job) {
  try {
    const doc = JSON.parse(job.body);
    return doc && doc.dead_letter === 1 ? doc : null;
  } catch (e) {
    return null;
  }
}

async function requeue(deadQueue, job, letter) {
  // As the SDK's requeue_dead: the original bytes back to the original queue
  // (a new job), then the dead letter is acked.
  const item = letter.body_base64 !== undefined
    ? { body_base64: letter.body_base64 } : { body: letter.body };
  await api("/queues/" + q(letter.queue) + "/jobs", { method: "POST", json: item });
  await api("/jobs/" + q(job.id) + "/ack", { method: "POST" });
}

async function renderDead(queues) {
  const dead = queues.filter((s) => s.name.endsWith(DEAD_SUFFIX) && s.len > 0)
    .sort((a, b) => a.name.localeCompare(b.name));
  document.getElementById("no-dead").hidden = dead.length > 0;
  const container = document.getElementById("dead");
  const blocks = [];
  for (const s of dead) {
    const doc = await api("/queues/" + q(s.name) + "/peek?count=50");
    const block = document.createElement("div");
    block.className = "dead-queue";
    block.dataset.queue = s.name;
    const title = document.createElement("h3");
    title.textContent = s.name + " (" + s.len + ")";
    block.appendChild(title);
    const table = document.createElement("table");
    const head = table.createTHead().insertRow();
    for (const h of ["Job", "Queue", "Attempts", "Error", "HTTP status", "Failed at", ""]) {
      const th = document.createElement("th");
      th.textContent = h;
      head.appendChild(th);
    }
    const body = table.createTBody();
    for (const job of doc.jobs) {
      const letter = parseLetter(job);
      const row = body.insertRow();
      row.dataset.job = job.id;
      cell(row, (letter ? letter.id : job.id) || "", "id");
      cell(row, letter ? letter.queue : "");
      cell(row, letter ? letter.attempts : "", "num");
      cell(row, letter ? letter.error : "(not a dead letter)", "error-text");
      cell(row, letter && letter.status !== undefined ? letter.status : "", "num");
      cell(row, letter && letter.failed_at ? new Date(letter.failed_at * 1000).toLocaleString() : "");
      const actions = row.insertCell();
      if (letter && letter.queue) {
        button(actions, "Requeue", async (ev) => {
          ev.target.disabled = true;
          try {
            await requeue(s.name, job, letter);
            setStatus("requeued " + (letter.id || job.id) + " to " + letter.queue, false);
            await refresh();
          } catch (e) {
            setStatus("requeue: " + e.message, true);
            ev.target.disabled = false;
          }
        });
      }
    }
    block.appendChild(table);
    blocks.push(block);
  }
  container.replaceChildren(...blocks);
}

// ------------------------------------------------------------------ job search
async function showJob(id) {
  const table = document.getElementById("job");
  const missing = document.getElementById("job-missing");
  table.hidden = true;
  missing.hidden = true;
  try {
    const job = await api("/jobs/" + q(id.trim()));
    const body = table.tBodies[0];
    body.textContent = "";
    for (const [k, v] of Object.entries(job)) {
      const row = body.insertRow();
      row.dataset.field = k;
      cell(row, k);
      cell(row, Array.isArray(v) ? v.join(", ") : v, k === "body" || k === "body_base64" ? "id" : "");
    }
    table.hidden = false;
  } catch (e) {
    missing.textContent = e.status === 404 ? "No such job on this node." : e.message;
    missing.hidden = false;
  }
}

// -------------------------------------------------------------------- polling
async function refresh() {
  if (state.busy) return;
  state.busy = true;
  try {
    const [queues, cluster] = await Promise.all([api("/queues"), api("/cluster")]);
    updateRates(queues.queues, Date.now());
    renderQueues(queues.queues);
    renderNodes(cluster);
    await renderDead(queues.queues);
    setStatus("updated " + new Date().toLocaleTimeString(), false);
  } catch (e) {
    setStatus(e.status === 401 ? "password needed" : "error: " + e.message, true);
  } finally {
    state.busy = false;
  }
}

function start() {
  makeChart();
  document.getElementById("search").addEventListener("submit", (ev) => {
    ev.preventDefault();
    showJob(document.getElementById("job-id").value);
  });
  document.getElementById("auth").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem("disquette-password", document.getElementById("password").value);
    document.getElementById("auth").hidden = true;
    refresh();
  });
  refresh();
  setInterval(refresh, POLL_MS);
}

start();
