// Folio dashboard: plain JavaScript, no framework and no build step (the binary embeds this
// file as it is). Pages are routed by the URL's hash; each reads JSON from /ui/api/ (or the
// process's /metrics) and redraws every few seconds. The DOM is built with createElement and
// textContent only, so nothing from the cluster (ledger metadata is user data) is parsed as
// HTML. Elements carry data-* attributes that the browser test reads.
"use strict";

const REFRESH_MS = 5000;
const METRICS_MS = 3000;
const FETCH_TIMEOUT_MS = 20000;
const TOKEN_KEY = "folio-admin-token";

let timer = null;
let generation = 0; // bumped on every navigation: late answers of an old page are dropped

// ---- small helpers ----

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// replaceChildren without the nulls of optional parts (the DOM would print them as "null").
function fill(el, ...children) {
  el.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}

function num(v, digits) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  return Number(v).toFixed(digits === undefined ? 1 : digits);
}

function when(ms) {
  if (!ms) return "–";
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function stateBadge(state) {
  return h("span", { class: "state state-" + state }, state);
}

function card(key, value, attrs) {
  return h("div", Object.assign({ class: "card" }, attrs || {}),
    h("div", { class: "k" }, key), h("div", { class: "v" }, value));
}

function showError(message) {
  const el = document.getElementById("error");
  if (message) {
    el.textContent = message;
    el.dataset.error = "true";
    el.hidden = false;
  } else {
    el.textContent = "";
    delete el.dataset.error;
    el.hidden = true;
  }
}

function stamp() {
  document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
}

// An HTTP error or an unreachable endpoint, as one sentence naming the path.
async function fetchText(path, headers) {
  const ctl = new AbortController();
  const t = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
  let r;
  try {
    r = await fetch(path, { headers: headers || {}, signal: ctl.signal, cache: "no-store" });
  } catch (e) {
    throw new Error("cannot reach " + path + ": the admin endpoint is unreachable (" +
      (e.name === "AbortError" ? "no answer within " + FETCH_TIMEOUT_MS / 1000 + " s" : e.message) + ")");
  } finally {
    clearTimeout(t);
  }
  const text = await r.text();
  if (!r.ok) {
    let why = text.trim();
    try { why = JSON.parse(text).error || why; } catch (_) { /* not JSON */ }
    const err = new Error(path + " answered " + r.status + ": " + why);
    err.status = r.status;
    throw err;
  }
  return text;
}

async function api(path, headers) {
  return JSON.parse(await fetchText(path, headers));
}

function params() {
  const q = location.hash.split("?")[1] || "";
  return new URLSearchParams(q);
}

// ---- pages ----

const rates = new Map(); // bookie id -> {t, adds, reads}: adds/s and reads/s between refreshes

function rate(id, facts) {
  const m = (facts && facts.metrics) || {};
  const now = Date.now();
  const prev = rates.get(id);
  rates.set(id, { t: now, adds: m.addsTotal || 0, reads: m.readsTotal || 0 });
  if (!prev || now <= prev.t) return { adds: null, reads: null };
  const s = (now - prev.t) / 1000;
  return {
    adds: Math.max(0, ((m.addsTotal || 0) - prev.adds) / s),
    reads: Math.max(0, ((m.readsTotal || 0) - prev.reads) / s),
  };
}

function disks(facts) {
  const dirs = (facts && facts.directories) || [];
  return h("div", {}, dirs.map((d) => {
    if (d.error) return h("div", { class: "muted" }, d.kind + " " + d.path + ": " + d.error);
    const pct = Math.round(d.usage * 100);
    return h("div", { title: d.path },
      h("span", { class: "muted" }, d.kind + " "), pct + "% used, " + bytes(d.freeBytes) + " free",
      h("div", { class: "bar" + (pct >= 90 ? " high" : "") }, h("span", { style: "width:" + pct + "%" })));
  }));
}

async function cluster(main, gen) {
  const c = await api("/ui/api/cluster");
  if (gen !== generation) return;
  const info = c.clusterInfo || {};
  const rows = c.bookies.map((b) => {
    const f = b.facts;
    const m = (f && f.metrics) || {};
    const r = f ? rate(b.id, f) : { adds: null, reads: null };
    return h("tr", { "data-bookie": b.id, "data-state": b.state },
      h("td", {}, b.id),
      h("td", {}, stateBadge(b.state)),
      h("td", {}, f ? f.version : "–"),
      h("td", {}, num(r.adds)),
      h("td", {}, num(r.reads)),
      h("td", {}, num(m.addP99Ms, 2)),
      h("td", {}, num(m.journalSyncP99Ms, 2)),
      h("td", {}, f ? bytes(f.rssBytes) : "–"),
      h("td", { class: "wrap" }, f ? disks(f) : (b.error ? h("span", { class: "muted" }, b.error) :
        b.state === "gone" ? h("span", { class: "muted" }, "not registered") : "–")));
  });
  fill(main, 
    h("h1", {}, "Cluster"),
    h("div", { class: "cards" },
      card("Metadata", c.metadataUri),
      card("Instance id", c.instanceId),
      card("Bookies", info.writableBookiesCount + " writable, " + info.readonlyBookiesCount +
        " read-only, " + info.unavailableBookiesCount + " gone"),
      card("Auditor", info.auditorElected ? info.auditorId : "none elected"),
      card("Under-replicated", info.clusterUnderReplicated ? "yes" : "no"),
      card("Served by", c.servedBy + " (Folio " + c.version + ")")),
    h("h2", {}, "Bookies"),
    h("div", { class: "scroll" }, h("table", { "data-table": "bookies" },
      h("thead", {}, h("tr", {}, ["Bookie", "State", "Version", "Adds/s", "Reads/s",
        "Add p99 ms", "Journal sync p99 ms", "RSS", "Disks"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows))),
    h("p", { class: "muted" }, "Adds/s, reads/s and RSS are per process: the bookies of one " +
      "folio standalone share them."));
}

function ensembleText(m) {
  return m.ensembleSize + "/" + m.writeQuorumSize + "/" + m.ackQuorumSize;
}

function customText(m) {
  return Object.entries(m.customMetadata || {}).map(([k, v]) => k + "=" + v).join(", ");
}

async function ledgers(main, gen) {
  const p = params();
  const search = p.get("search") || "";
  const page = Number(p.get("page") || 0);
  const q = new URLSearchParams({ page: String(page), page_size: "50" });
  if (search) q.set("search", search);
  const l = await api("/ui/api/ledgers?" + q);
  if (gen !== generation) return;
  const go = (s, pg) => { location.hash = "#/ledgers?" + new URLSearchParams({ search: s, page: String(pg) }); };
  const input = h("input", { type: "search", name: "search", value: search,
    placeholder: "ledger id, state or custom metadata", "aria-label": "search ledgers" });
  const form = h("form", { class: "search", onsubmit: (e) => { e.preventDefault(); go(input.value, 0); } },
    input, h("button", { type: "submit" }, "Search"));
  const rows = l.ledgers.map((m) => h("tr", { "data-ledger": m.ledgerId },
    h("td", {}, h("a", { href: "#/ledger/" + m.ledgerId }, String(m.ledgerId))),
    h("td", {}, stateBadge(m.state)),
    h("td", {}, ensembleText(m)),
    h("td", {}, m.lastEntryId + 1),
    h("td", {}, bytes(m.length)),
    h("td", {}, when(m.ctime)),
    h("td", { class: "wrap" }, customText(m))));
  const pages = Math.max(1, Math.ceil(l.total / l.pageSize));
  fill(main, 
    h("h1", {}, "Ledgers"),
    form,
    h("div", { class: "scroll" }, h("table", { "data-table": "ledgers" },
      h("thead", {}, h("tr", {}, ["Ledger", "State", "E/Qw/Qa", "Entries", "Size", "Created",
        "Custom metadata"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 7, class: "muted" },
        search ? "No ledger matches " + JSON.stringify(search) + "." : "No ledgers yet."))))),
    h("div", { class: "pager" },
      h("button", { disabled: page <= 0, onclick: () => go(search, page - 1) }, "Previous"),
      h("span", { class: "muted" }, "page " + (page + 1) + " of " + pages + ", " + l.total + " ledgers" +
        (l.truncated ? " (search stopped at the newest 10000)" : "")),
      h("button", { disabled: page + 1 >= pages, onclick: () => go(search, page + 1) }, "Next")));
}

// The ensembles on one line of entry ids: each fragment's width is its share of the entries.
function timeline(d) {
  const m = d.metadata;
  const end = m.state === "CLOSED" ? m.lastEntryId : (d.lac !== null && d.lac !== undefined ? d.lac : -1);
  const frags = d.fragments.map((f) => {
    const last = f.lastEntry !== null ? f.lastEntry : Math.max(end, f.firstEntry);
    const count = Math.max(1, last - f.firstEntry + 1);
    const range = f.lastEntry !== null ? f.firstEntry + "–" + f.lastEntry : f.firstEntry + "– (open)";
    return h("div", { class: "fragment" + (f.lastEntry === null ? " open" : ""),
      style: "flex-grow:" + count, "data-first": f.firstEntry, "data-last": f.lastEntry === null ? "open" : f.lastEntry },
      h("div", {}, h("strong", {}, "entries " + range)),
      h("div", { class: "ens" }, f.bookies.map((b) => h("span", {
        "data-ensemble-bookie": b.id, class: b.state === "gone" ? "gone" : null,
        title: b.state }, b.id + (b.state === "gone" ? " (gone)" : "")))));
  });
  return h("div", { class: "timeline" }, h("div", { class: "track" }, frags),
    h("div", { class: "muted" }, "entry ids 0 to " + (end >= 0 ? end : "(none yet)")));
}

function entryReader(d) {
  const m = d.metadata;
  const out = h("div", { "data-entries": m.ledgerId });
  const reads = d.entryReads;
  if (!reads.enabled) {
    out.append(h("p", { class: "muted" }, "Entry reads over HTTP are off on this endpoint " +
      "(http_ledger_read_enabled)."));
    return out;
  }
  const last = m.state === "CLOSED" ? m.lastEntryId : d.lac;
  if (last === null || last === undefined || last < 0) {
    out.append(h("p", { class: "muted" }, "No confirmed entries to show."));
    return out;
  }
  const token = h("input", { type: "password", placeholder: "admin token", "aria-label": "admin token",
    value: sessionStorage.getItem(TOKEN_KEY) || "" });
  const result = h("div", {});
  const read = async () => {
    sessionStorage.setItem(TOKEN_KEY, token.value);
    const headers = token.value ? { Authorization: "Bearer " + token.value } : {};
    fill(result, h("p", { class: "muted" }, "Reading…"));
    try {
      const shown = [];
      for (const e of [...new Set([0, last])]) {
        const v = await api(reads.path + "?" + new URLSearchParams({ ledger_id: m.ledgerId,
          start_entry_id: e, end_entry_id: e }), headers);
        for (const [id, payload] of Object.entries(v)) shown.push(h("div", { "data-entry": id }, h("strong", {}, "entry " + id),
          h("pre", {}, payload)));
      }
      fill(result, ...shown);
    } catch (e) {
      fill(result, h("p", { class: "state-gone" }, e.message));
    }
  };
  out.append(h("form", { class: "search", onsubmit: (e) => { e.preventDefault(); read(); } },
    reads.tokenRequired ? token : null, h("button", { type: "submit" }, "Show the first and last entries")),
    result);
  // Without a token to ask for, the look is taken at once.
  if (!reads.tokenRequired) read();
  return out;
}

let entryPanel = null; // kept across refreshes of one ledger so a read result stays on screen

async function ledger(main, gen, id) {
  const d = await api("/ui/api/ledger?ledger_id=" + encodeURIComponent(id));
  if (gen !== generation) return;
  const m = d.metadata;
  if (!entryPanel || entryPanel.dataset.entries !== String(m.ledgerId)) entryPanel = entryReader(d);
  fill(main, 
    h("h1", { "data-ledger-detail": m.ledgerId }, "Ledger " + m.ledgerId),
    h("div", { class: "cards" },
      card("State", stateBadge(m.state)),
      card("E/Qw/Qa", ensembleText(m)),
      card("Last add confirmed", d.lac !== null && d.lac !== undefined ? d.lac : (d.lacError || "–"),
        { "data-lac": d.lac }),
      card("Size", bytes(m.length)),
      card("Digest", m.digestType),
      card("Created", when(m.ctime)),
      card("Under-replicated", d.underReplicated ? "yes: missing " + d.missingReplicas.join(", ") : "no",
        { "data-under-replicated": d.underReplicated })),
    h("h2", {}, "Fragments"),
    timeline(d),
    customText(m) ? h("p", {}, h("span", { class: "muted" }, "Custom metadata: "), customText(m)) : null,
    h("h2", {}, "Entries"),
    entryPanel);
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 90) return seconds + " s";
  if (seconds < 5400) return Math.round(seconds / 60) + " min";
  return (seconds / 3600).toFixed(1) + " h";
}

function operationRow(o) {
  if (o.error) {
    return h("tr", { "data-operation": "unreadable" }, h("td", { colspan: 7, class: "wrap state-gone" },
      "operation record " + o.record + ": " + o.error));
  }
  const where = (o.startedBy ? o.startedBy.host + " pid " + o.startedBy.pid : "–") +
    (o.startedHere ? " (this endpoint)" : "");
  const progress = o.ledgers === null ? "counting ledgers…" : o.done + " of " + o.ledgers + " ledgers";
  const status = o.running ? "running, " + (o.etaSeconds === null ? "no estimate yet" : "about " +
    duration(o.etaSeconds) + " left") : (o.result && o.result.ok ? "done: " + o.result.ok :
    "stopped: " + ((o.result && o.result.error) || "unknown"));
  return h("tr", { "data-operation": o.kind, "data-record": o.record || "" },
    h("td", {}, o.kind),
    h("td", { class: "wrap" }, where),
    h("td", { class: "wrap" }, o.bookies.join(", ")),
    h("td", {}, when(o.startedAt)),
    h("td", {}, progress),
    h("td", { class: "wrap" }, status),
    h("td", { class: "wrap" }, o.failed.map((f) => h("div", {}, "ledger " + f.ledgerId + ": " + f.reason))));
}

async function autorecovery(main, gen) {
  const a = await api("/ui/api/autorecovery");
  if (gen !== generation) return;
  const rows = a.underReplicated.map((u) => h("tr", { "data-under-replicated-ledger": u.ledgerId },
    h("td", {}, h("a", { href: "#/ledger/" + u.ledgerId }, String(u.ledgerId))),
    h("td", { class: "wrap" }, u.missingReplicas.map((b) => h("div", {}, b.id + " ", stateBadge(b.state)))),
    h("td", {}, when(u.markedAt)),
    h("td", { class: "wrap", "data-locked-by": u.lockedBy || "" }, u.lockedBy ||
      h("span", { class: "muted" }, u.lockedBy === undefined ? "not read" : "nobody")),
    h("td", { class: "wrap" }, u.repairing ? "repairing now" : u.stuck ? h("span", { class: "state-gone",
      "data-stuck": u.ledgerId }, "stuck after " + u.stuck.attempts + " attempt(s): " + u.stuck.reason +
      " (retry in " + duration(u.stuck.retryInSeconds) + ", at " + when(u.stuck.retryAt) + ")") :
      h("span", { class: "muted" }, u.lockedBy ? "taken by another worker" : "queued"))));
  const w = a.worker;
  fill(main,
    h("h1", {}, "Autorecovery"),
    h("div", { class: "cards" },
      card("Autorecovery", a.enabled ? "enabled" : "disabled"),
      card("Auditor", a.auditor || "none elected", { "data-auditor": a.auditor || "" }),
      card("Lost-bookie delay", a.lostBookieRecoveryDelaySeconds + " s"),
      card("Under-replicated ledgers", a.underReplicated.length),
      w ? card("This process's worker", w.ledgersReplicated + " ledgers, " + w.entriesWritten +
        " entries, " + bytes(w.bytesWritten) + " copied") : null),
    h("h2", {}, "Queue"),
    h("div", { class: "scroll" }, h("table", { "data-table": "under-replicated" },
      h("thead", {}, h("tr", {}, ["Ledger", "Missing copies", "Marked", "Locked by", "Status"].map((t) =>
        h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 5, class: "muted" },
        "Nothing is under-replicated."))))),
    w ? null : h("p", { class: "muted" }, "No ReplicationWorker runs in this process: a ledger's " +
      "status shows where the worker runs."),
    h("h2", {}, "Recovers and decommissions"),
    a.operations.length ? h("div", { class: "scroll" }, h("table", { "data-table": "operations" },
      h("thead", {}, h("tr", {}, ["Kind", "Run by", "Bookies", "Started", "Progress", "Status", "Failed"].map((t) =>
        h("th", {}, t)))),
      h("tbody", {}, a.operations.map(operationRow)))) :
      h("p", { class: "muted" }, "None running: a recover or decommission shows here wherever it runs " +
        "(folio shell recover, decommissionbookie, PUT /api/v1/autorecovery/bookie or decommission)."));
}

// ---- live charts from /metrics ----

function parseMetrics(text) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{([^}]*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const kv of (m[3] || "").split(",")) {
      const i = kv.indexOf("=");
      if (i > 0) labels[kv.slice(0, i)] = kv.slice(i + 1).replace(/^"|"$/g, "");
    }
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}

function pick(samples, name, want) {
  let sum = null;
  for (const s of samples) {
    if (s.name !== name) continue;
    if (Object.entries(want || {}).some(([k, v]) => s.labels[k] !== v)) continue;
    if (!Number.isFinite(s.value)) continue;
    sum = (sum || 0) + s.value;
  }
  return sum;
}

const CHARTS = [
  { title: "Throughput (per second)", series: ["adds/s", "reads/s"] },
  { title: "Add latency (ms)", series: ["p50", "p99"] },
  { title: "Journal sync latency (ms)", series: ["p50", "p99"] },
  { title: "Write cache (bytes)", series: ["in use"], bytes: true },
];
const history = []; // {t, values: [[...], ...]} per scrape
let lastScrape = null;

function scrape(samples) {
  const ok = { success: "true" };
  const q = (name, qu) => pick(samples, name, { success: "true", quantile: qu });
  const now = Date.now();
  const adds = pick(samples, "bookkeeper_server_ADD_ENTRY_REQUEST_count", ok);
  const reads = pick(samples, "bookkeeper_server_READ_ENTRY_REQUEST_count", ok);
  let addRate = null, readRate = null;
  if (lastScrape && now > lastScrape.t) {
    const s = (now - lastScrape.t) / 1000;
    addRate = Math.max(0, ((adds || 0) - (lastScrape.adds || 0)) / s);
    readRate = Math.max(0, ((reads || 0) - (lastScrape.reads || 0)) / s);
  }
  lastScrape = { t: now, adds, reads };
  history.push({ t: now, values: [
    [addRate, readRate],
    [q("bookkeeper_server_ADD_ENTRY_REQUEST", "0.5"), q("bookkeeper_server_ADD_ENTRY_REQUEST", "0.99")],
    [q("bookie_journal_JOURNAL_SYNC", "0.5"), q("bookie_journal_JOURNAL_SYNC", "0.99")],
    [pick(samples, "bookie_write_cache_size")],
  ] });
  while (history.length > 120) history.shift();
}

function color(i) {
  return getComputedStyle(document.documentElement).getPropertyValue("--c" + (i + 1)).trim() || "#888";
}

function draw(canvas, chart, ci) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, ht = canvas.clientHeight;
  canvas.width = w * dpr; canvas.height = ht * dpr;
  const g = canvas.getContext("2d");
  g.scale(dpr, dpr);
  const css = getComputedStyle(document.documentElement);
  const fg = css.getPropertyValue("--muted").trim(), line = css.getPropertyValue("--line").trim();
  let max = 0;
  for (const p of history) for (const v of p.values[ci]) if (v !== null && v > max) max = v;
  max = max > 0 ? max * 1.15 : 1;
  const left = 56, bottom = 18, top = 8;
  g.strokeStyle = line; g.fillStyle = fg; g.font = "11px system-ui, sans-serif"; g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = top + (ht - top - bottom) * i / 4;
    g.beginPath(); g.moveTo(left, y); g.lineTo(w, y); g.stroke();
    const v = max * (1 - i / 4);
    g.fillText(chart.bytes ? bytes(v) : (v >= 100 ? v.toFixed(0) : v.toFixed(2)), 2, y + 4);
  }
  g.fillText("last " + Math.round(history.length * METRICS_MS / 1000) + " s", left, ht - 4);
  if (history.length < 2) return;
  const x = (i) => left + (w - left) * i / (history.length - 1);
  const y = (v) => top + (ht - top - bottom) * (1 - v / max);
  chart.series.forEach((_, si) => {
    g.strokeStyle = color(si); g.lineWidth = 2; g.beginPath();
    let moved = false;
    history.forEach((p, i) => {
      const v = p.values[ci][si];
      if (v === null || v === undefined) { moved = false; return; }
      if (!moved) { g.moveTo(x(i), y(v)); moved = true; } else g.lineTo(x(i), y(v));
    });
    g.stroke();
  });
}

async function metricsPage(main, gen) {
  const text = await fetchText("/metrics");
  if (gen !== generation) return;
  scrape(parseMetrics(text));
  if (!main.querySelector(".charts")) {
    fill(main, h("h1", {}, "Metrics"),
      h("p", { class: "muted" }, "This process's /metrics, every " + METRICS_MS / 1000 + " s."),
      h("div", { class: "charts" }, CHARTS.map((c, i) => h("div", { class: "chart", "data-chart": i },
        h("div", {}, h("strong", {}, c.title)),
        h("div", { class: "legend" }, c.series.map((s, si) => h("span", {},
          h("i", { style: "background:" + color(si) }), s))),
        h("canvas", {})))));
  }
  redraw(main);
}

function redraw(root) {
  root.querySelectorAll(".chart").forEach((el) => {
    const i = Number(el.dataset.chart);
    draw(el.querySelector("canvas"), CHARTS[i], i);
  });
}

// ---- router ----

function route() {
  const path = location.hash.replace(/^#/, "").split("?")[0] || "/cluster";
  const parts = path.split("/").filter(Boolean);
  switch (parts[0]) {
    case "ledgers": return { name: "ledgers", run: ledgers, every: REFRESH_MS * 2 };
    case "ledger": return { name: "ledgers", run: (m, g) => ledger(m, g, parts[1]), every: REFRESH_MS };
    case "autorecovery": return { name: "autorecovery", run: autorecovery, every: REFRESH_MS };
    case "metrics": return { name: "metrics", run: metricsPage, every: METRICS_MS };
    default: return { name: "cluster", run: cluster, every: REFRESH_MS };
  }
}

async function tick(r, gen) {
  const main = document.getElementById("main");
  try {
    await r.run(main, gen);
    if (gen !== generation) return;
    showError(null);
    stamp();
    document.body.dataset.loaded = r.name;
  } catch (e) {
    if (gen !== generation) return;
    showError(e.message + " — retrying every " + r.every / 1000 + " s.");
    if (!document.body.dataset.loaded) fill(main, h("p", { class: "muted" }, "No data yet."));
  }
  if (gen === generation) timer = setTimeout(() => tick(r, gen), r.every);
}

function navigate() {
  generation++;
  clearTimeout(timer);
  const r = route();
  document.body.dataset.page = r.name;
  delete document.body.dataset.loaded;
  document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active", a.dataset.nav === r.name));
  fill(document.getElementById("main"), h("p", { class: "muted" }, "Loading…"));
  tick(r, generation);
}

window.addEventListener("hashchange", navigate);
// A new size redraws the charts from the history already scraped (no new page load).
window.addEventListener("resize", () => redraw(document));
navigate();
