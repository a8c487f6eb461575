// The job's page: fetches /status every 2 s and renders it; the store browser asks
// /stores/<store>/get and /prefix. A token in the URL's fragment (#token=...) is sent as
// "Authorization: Bearer <token>" on every fetch. Data is only ever set as text.
"use strict";

const REFRESH_MS = 2000;
const PAGE = 50;
const token = new URLSearchParams(location.hash.slice(1)).get("token");

async function ask(path) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const resp = await fetch(path, { headers, cache: "no-store" });
  let body;
  try { body = await resp.json(); } catch (e) { body = { error: `${resp.status} ${resp.statusText}` }; }
  return { status: resp.status, body, servedBy: resp.headers.get("Millpond-Served-By") };
}

const $ = (id) => document.getElementById(id);

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text === null || text === undefined ? "-" : String(text);
  if (cls) td.className = cls;
  return td;
}

function fill(tableId, rows, render) {
  const body = $(tableId).tBodies[0];
  body.replaceChildren();
  for (const item of rows) render(body.insertRow(), item);
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  return seconds < 60 ? `${seconds.toFixed(1)} s` : `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
}

function when(iso) {
  return iso ? iso.replace("T", " ").replace(/Z$/, "").slice(0, 23) : "-";
}

function restoreCell(row, live) {
  const td = row.insertCell();
  td.className = "restore";
  if (!live || live.state !== "opening") { td.textContent = "-"; return; }
  for (const s of live.stores) {
    if (s.restore_fraction === null) continue;
    const bar = document.createElement("span");
    bar.className = "bar";
    const done = document.createElement("span");
    done.style.width = `${Math.round(100 * s.restore_fraction)}%`;
    bar.append(done);
    const text = document.createElement("span");
    text.textContent = `${s.store} ${s.restore_records}/${s.restore_records + s.restore_remaining}`;
    const line = document.createElement("div");
    line.append(bar, text);
    td.append(line);
  }
  if (!td.childNodes.length) td.textContent = "waiting to open";
}

function render(status) {
  $("job").textContent = status.job;
  const kafka = status.kafka || {};
  const live = new Map();  // task -> [process url, live task]
  for (const p of status.processes) {
    for (const t of p.tasks || []) {
      if (t.state !== "closed") live.set(t.task, [p.url, t]);
    }
  }
  const rows = new Map((kafka.partitions || []).map((r) => [r.task, r]));
  const tasks = [...new Set([...rows.keys(), ...live.keys()])].sort(
    (a, b) => Number(a.split("-").pop()) - Number(b.split("-").pop()));
  const group = kafka.error ? `Kafka: ${kafka.error}` :
    `group ${kafka.group}: ${kafka.group_state}, ${kafka.members} member(s)`;
  const kafkaAge = status.kafka_age_s === null ? "" : ` (Kafka's view ${status.kafka_age_s.toFixed(1)} s old)`;
  $("summary").textContent = `${group}${kafkaAge} · ${tasks.length} task(s) · asked ${status.served_by}`;

  fill("processes", status.processes, (row, p) => {
    row.dataset.url = p.url;
    cell(row, p.url, "mono");
    cell(row, p.host);
    cell(row, p.pid, "num");
    cell(row, p.tasks ? p.tasks.filter((t) => t.state !== "closed").map((t) => t.task).join(", ") : null);
    cell(row, p.error ? p.error : "answering", p.error ? "error" : "");
  });

  fill("tasks", tasks, (row, task) => {
    const [url, t] = live.get(task) || [null, null];
    const k = rows.get(task);
    row.dataset.task = task;
    cell(row, task, "task");
    cell(row, url || (k && (k.owner_url || (k.owner && k.owner.client_id))), "process mono");
    cell(row, t ? t.state : (k && k.owner ? "assigned (no endpoint)" : "unassigned"), "state");
    cell(row, t ? t.lag_total : null, "num lag");
    cell(row, t ? t.processed : null, "num processed");
    cell(row, t ? age(t.commit_age_s) : "-", "num commit-age");
    cell(row, k ? k.lag : null, "num committed-lag");
    cell(row, k && k.checkpoint ? when(k.checkpoint.time) : null, "checkpoint");
    restoreCell(row, t);
  });

  const stores = [];
  for (const task of tasks) {
    const k = rows.get(task);
    const t = (live.get(task) || [null, null])[1];
    const samples = new Map(((t && t.stores) || []).map((s) => [s.store, s]));
    for (const s of (k && k.stores) || []) stores.push([task, s, samples.get(s.store)]);
  }
  fill("stores", stores, (row, [task, s, sample]) => {
    row.dataset.task = task;
    row.dataset.store = s.store;
    cell(row, task);
    cell(row, s.store);
    cell(row, s.end, "num");
    cell(row, s.checkpointed, "num");
    cell(row, s.local || "not on this machine");
    cell(row, snapshot(s.backup, sample && sample.backup), "snapshot");
  });
}

function snapshot(kafka, live) {
  if (live && live.last_snapshot_time) {
    const at = new Date(live.last_snapshot_time * 1000).toISOString();
    return `@${live.last_snapshot_offset} ${when(at)} (${live.uploads} uploaded, ${live.failures} failed)`;
  }
  if (!kafka) return "not backed up";
  if (kafka.error) return `unreachable (${kafka.error})`;
  return kafka.snapshot ? `@${kafka.offset} ${when(kafka.time)}` : "none yet";
}

async function refresh() {
  try {
    const got = await ask("/status");
    if (got.status !== 200) throw new Error(got.body.error || `answered ${got.status}`);
    render(got.body);
    $("error").hidden = true;
    $("updated").textContent = `updated ${new Date().toISOString().slice(11, 19)} UTC`;
  } catch (e) {
    $("error").textContent = `status: ${e.message}`;
    $("error").hidden = false;
  }
  setTimeout(refresh, REFRESH_MS);
}

// ---- the store browser -------------------------------------------------------------------
let nextScan = null;

function storePath(op, params) {
  return `/stores/${encodeURIComponent($("store").value)}/${op}?${new URLSearchParams(params)}`;
}

function showEntries(entries, append) {
  const body = $("entries").tBodies[0];
  if (!append) body.replaceChildren();
  for (const e of entries) {
    const row = body.insertRow();
    row.dataset.key = typeof e.key === "string" ? e.key : JSON.stringify(e.key);
    cell(row, JSON.stringify(e.key), "key mono");
    cell(row, JSON.stringify(e.value), "value mono");
  }
}

function said(got, text) {
  $("browse-status").textContent = got.status === 200 ? `${text} (served by ${got.servedBy})`
    : `${got.status}: ${got.body.error}`;
  $("browse-status").className = got.status === 200 ? "" : "error";
}

async function lookup(event) {
  event.preventDefault();
  const got = await ask(storePath("get", { key: $("key").value }));
  $("more").hidden = true;
  if (got.status === 200) {
    showEntries(got.body.found ? [got.body] : [], false);
    said(got, got.body.found ? `found in partition ${got.body.partition}`
      : `not found (partition ${got.body.partition})`);
  } else {
    showEntries([], false);
    said(got);
  }
}

async function scan(event, append) {
  if (event) event.preventDefault();
  const params = { prefix: $("prefix").value, limit: PAGE };
  if (append && nextScan) params.next = nextScan;
  const got = await ask(storePath("prefix", params));
  if (got.status !== 200) { showEntries([], false); said(got); return; }
  showEntries(got.body.entries, append);
  nextScan = got.body.next;
  $("more").hidden = !nextScan;
  said(got, `${$("entries").tBodies[0].rows.length} entries${nextScan ? ", more to come" : ""}`);
}

async function loadStores() {
  const got = await ask("/stores");
  if (got.status !== 200) { said(got); return; }
  $("store").replaceChildren(...got.body.stores.map((s) => new Option(s, s)));
}

$("lookup").addEventListener("submit", lookup);
$("scan").addEventListener("submit", (e) => scan(e, false));
$("more").addEventListener("click", () => scan(null, true));
loadStores();
refresh();
