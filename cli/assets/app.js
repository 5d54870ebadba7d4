// The spex board and conversation. Everything comes from this server (no request leaves it);
// every text is set with textContent, never parsed as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const board = { rows: new Map(), applied: -Infinity, history: new Map(), fleet: [] };
let open = null; // the open conversation (see openConversation)

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = text;
  return node;
}

// "3 min ago", from an ISO time.
function relative(ts) {
  if (!ts) return "-";
  const seconds = Math.max(0, (Date.now() - Date.parse(ts)) / 1000);
  if (!isFinite(seconds)) return "-";
  if (seconds < 45) return "just now";
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `${minutes} min ago`;
  const hours = Math.round(minutes / 60);
  if (hours < 24) return `${hours} h ago`;
  return `${Math.round(hours / 24)} d ago`;
}

const when = (row) => row.lastActivity || row.createdAt || "";

// The watch stream's consumer rule: a reset replaces everything held; an increment applies
// only when its version is newer than the last one applied.
function apply(value) {
  const version = value.version ?? 0;
  if (value.type === "reset") {
    board.rows.clear();
    board.history.clear();
    for (const row of value.sessions || []) board.rows.set(row.id, row);
    for (const h of value.history || []) board.history.set(`${h.harness}/${h.id}`, h);
    board.applied = version;
    return true;
  }
  if (version <= board.applied) return false;
  board.applied = version;
  if (value.type === "update" && value.session) board.rows.set(value.session.id, value.session);
  if (value.type === "update" && value.history) {
    board.history.set(`${value.history.harness}/${value.history.id}`, value.history);
  }
  if (value.type === "remove" && value.id) board.rows.delete(value.id);
  if (value.type === "remove" && value.history) {
    board.history.delete(`${value.history.harness}/${value.history.id}`);
  }
  return true;
}

// Every session on the board: spex's own and the Claude Code and Codex sessions found, each
// with its kind, title, project, state and last activity.
function boardRows() {
  const spex = [...board.rows.values()].map((row) => ({
    kind: "spex", id: row.id, href: `#/s/${encodeURIComponent(row.id)}`, title: row.title || "",
    state: row.state.display, when: when(row), archived: row.archived,
    owed: row.owed === null ? "? owed (damaged queue)" : row.owed ? `${row.owed} owed` : "",
    preview: row.preview || row.state.note || "",
  }));
  const harness = [...board.history.values()].map((h) => ({
    kind: h.harness, id: h.id, href: `#/h/${encodeURIComponent(h.harness)}/${encodeURIComponent(h.id)}`,
    title: h.title || "", state: h.state, when: h.lastActivity || h.last || "", archived: false,
    owed: h.spexSession ? `spex ${h.spexSession}` : "", preview: h.project || "",
  }));
  // Other devices' sessions (the fleet), each naming its device.
  const fleet = board.fleet.map((h) => ({
    kind: h.harness, id: h.id, device: h.device.name,
    href: `#/f/${encodeURIComponent(h.device.name)}/${encodeURIComponent(h.harness)}/${encodeURIComponent(h.id)}`,
    title: h.title || "", state: h.state, when: h.lastActivity || h.last || "", archived: false,
    owed: `on ${h.device.name}`, preview: h.project || "",
  }));
  return spex.concat(harness, fleet);
}

// The fleet's sessions, asked of this server (which asks each device); again every 30 s.
async function loadFleet() {
  try {
    const response = await fetch("/api/fleet/history");
    if (!response.ok) return;
    const body = await response.json();
    board.fleet = body.history || [];
    renderBoard();
  } catch (error) {
    // The next round asks again.
  }
}

// The title a session is shown by (a UUID only when it has none).
function titleOf(kind, id) {
  const row = kind === "spex" ? board.rows.get(id) : board.history.get(`${kind}/${id}`);
  return (row && row.title) || id;
}

function renderBoard() {
  const status = $("status-filter").value;
  const kind = $("kind-filter").value;
  const archived = $("archived").checked;
  const every = boardRows();
  const rows = every
    .filter((row) => archived || !row.archived)
    .filter((row) => !kind || row.kind === kind)
    .filter((row) => !status || row.state === status)
    .sort((a, b) => b.when.localeCompare(a.when) || a.id.localeCompare(b.id));
  const list = $("board");
  list.replaceChildren();
  for (const row of rows) {
    const item = el("li");
    item.dataset.id = row.id;
    item.dataset.kind = row.kind;
    if (row.device) item.dataset.device = row.device;
    const link = el("a");
    link.href = row.href;
    // A spex session by its name, then its title; a harness session by its title (its id is a
    // UUID, kept as the tooltip).
    const name = el("span", "id");
    name.append(el("span", `kind ${row.kind}`, row.kind), ` ${row.kind === "spex" ? row.id : row.title || row.id}`);
    if (row.kind === "spex" && row.title) name.append(el("span", "title", ` · ${row.title}`));
    name.title = row.id;
    link.append(
      name,
      el("span", `status ${row.state.split(" ")[0]}`, row.state),
      el("span", "when", relative(row.when)),
      el("span", "owed", row.owed),
      el("span", "preview", row.preview),
    );
    item.append(link);
    list.append(item);
  }
  $("empty").hidden = rows.length > 0;
  // The status filter offers the words present (and keeps the chosen one).
  const words = new Set(every.filter((row) => !kind || row.kind === kind).map((row) => row.state));
  if (status) words.add(status);
  const select = $("status-filter");
  const have = [...select.options].map((option) => option.value).filter(Boolean);
  if (have.join() !== [...words].sort().join()) {
    select.replaceChildren(el("option", null, "all"));
    select.options[0].value = "";
    for (const word of [...words].sort()) {
      const option = el("option", null, word);
      option.value = word;
      select.append(option);
    }
    select.value = status;
  }
}

function connect() {
  const source = new EventSource("/api/watch");
  source.onopen = () => { $("live").textContent = "live"; };
  source.onerror = () => { $("live").textContent = "reconnecting…"; };
  source.onmessage = (message) => {
    const value = JSON.parse(message.data);
    if (!apply(value)) return;
    renderBoard();
    if (open && !open.transcript && !open.answers.length && value.type === "reset") loadAnswers(open);
    // An open transcript grew: read its newest page again.
    const grown = value.type === "update" && value.history;
    if (open && open.transcript && !open.device && grown && value.history.harness === open.harness && value.history.id === open.id) {
      refreshTranscript(open);
    }
  };
}

// A hit's snippet with its matches (`marks`: [start, end) in characters) as <mark>, built as
// nodes: brackets in the text stay text.
function snippetNodes(hit) {
  const chars = Array.from(hit.snippet || "");
  const nodes = [];
  let at = 0;
  for (const [start, end] of hit.marks || []) {
    if (start < at || end > chars.length) continue;
    nodes.push(document.createTextNode(chars.slice(at, start).join("")));
    nodes.push(el("mark", null, chars.slice(start, end).join("")));
    at = end;
  }
  nodes.push(document.createTextNode(chars.slice(at).join("")));
  return nodes;
}

async function search(query) {
  const results = $("results");
  if (!query.trim()) { results.hidden = true; return; }
  const response = await fetch(`/api/search?q=${encodeURIComponent(query)}&limit=20`);
  const body = await response.json();
  const hits = $("hits");
  hits.replaceChildren();
  for (const hit of body.hits || []) {
    const item = el("li");
    const link = el("a");
    link.href = hit.source === "spex"
      ? `#/s/${encodeURIComponent(hit.session)}`
      : `#/h/${encodeURIComponent(hit.source)}/${encodeURIComponent(hit.session)}`;
    link.append(...snippetNodes(hit));
    const kind = hit.source === "spex" ? "spex" : hit.source;
    const where = el("div", "where", `${kind} · ${titleOf(kind, hit.session)} · ${hit.kind} · ${relative(hit.ts)}`);
    where.title = hit.session;
    item.append(link, where);
    hits.append(item);
  }
  if (!(body.hits || []).length) hits.append(el("li", "empty", `No matches for “${query}”.`));
  results.hidden = false;
}

function dayOf(ts) {
  return new Date(ts).toLocaleDateString(undefined, { weekday: "short", year: "numeric", month: "short", day: "numeric" });
}

function timeOf(ts) {
  return new Date(ts).toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" });
}

// One timeline event as a conversation entry: what was said to the session (by you or by
// another session), or the session's declaration as its reply.
function entry(event, id, owed) {
  const item = el("li");
  if (event.kind === "sent") {
    const mine = !event.from;
    const bubble = el("div", mine ? "message mine" : "message");
    const who = mine ? `you → ${id}` : `${event.from} → ${id}`;
    const meta = el("span", "meta", `${timeOf(event.ts)} · ${who}`);
    if (event.replyVia) meta.append(` · reply via ${event.replyVia}`);
    if (event.mid) {
      const isOwed = owed.has(event.mid);
      meta.append(el("span", `mark ${isOwed ? "owed" : "delivered"}`, isOwed ? "owed" : "delivered"));
    }
    bubble.append(meta, document.createTextNode(event.text));
    item.append(bubble);
  } else if (event.kind === "asked") {
    const bubble = el("div", "message mine");
    bubble.append(el("span", "meta", `${timeOf(event.ts)} · asked in ${event.harness}`));
    bubble.append(document.createTextNode(event.text));
    item.append(bubble);
  } else if (event.kind === "tool") {
    // A tool call the reader opened stays open when the conversation is drawn again.
    const details = el("details", "tool");
    const key = `${event.harness}:${event.line}`;
    const mine = open;
    details.open = Boolean(mine && mine.openTools.has(key));
    details.addEventListener("toggle", () => {
      if (details.open) mine.openTools.add(key); else mine.openTools.delete(key);
    });
    details.append(el("summary", null, `${timeOf(event.ts)} · ran ${event.tool}`));
    details.append(el("pre", null, event.input || ""));
    item.append(details);
  } else if (event.kind === "answer") {
    const bubble = el("div", "message agent");
    bubble.append(el("span", "meta", `${timeOf(event.ts)} · ${id} answered (${event.harness})`));
    bubble.append(document.createTextNode(event.text));
    item.append(bubble);
  } else {
    const bubble = el("div", "message");
    const meta = el("span", "meta", `${timeOf(event.ts)} · ${id} · `);
    meta.append(el("span", `status ${event.display}`, event.display));
    if (event.proposal) meta.append(` (proposes ${event.proposal})`);
    bubble.append(meta);
    if (event.note) bubble.append(document.createTextNode(event.note));
    item.append(bubble);
  }
  return item;
}

const PAGE = 100; // events a page of the conversation reads

// The open conversation: its events (oldest first), where the next older page starts, the
// session's own stream, what it is owed, and the agent's answers from its transcript.
function closeConversation() {
  if (open && open.source) open.source.close();
  if (open && open.retry) clearTimeout(open.retry);
  open = null;
}

async function openConversation(id) {
  closeConversation();
  const mine = { id, events: [], older: null, end: null, owed: new Set(), state: null, answers: [], source: null, openTools: new Set() };
  open = mine;
  const response = await fetch(`/api/sessions/${encodeURIComponent(id)}/timeline?limit=${PAGE}`);
  const page = await response.json();
  if (open !== mine) return;
  if (!response.ok) {
    $("conversation").replaceChildren(el("li", "empty", page.error || `cannot read ${id}`));
    return;
  }
  mine.events = page.events || [];
  mine.older = page.older;
  mine.end = page.end;
  renderConversation("bottom");
  follow(mine);
  loadAnswers(mine);
}

// A Claude Code or Codex session (`#/h/HARNESS/ID`): what the person asked, what the agent
// answered and the tools it ran (folded), read-only, redacted by the server; paged back by
// transcript line, and read again whenever the watch stream says it grew.
const TRANSCRIPT_PAGE = 200;
function transcriptEvents(events, harness) {
  return (events || []).flatMap((event) => {
    if ((event.kind === "user" || event.kind === "assistant") && event.text) {
      return [{ ts: event.ts, line: event.line, kind: event.kind === "user" ? "asked" : "answer", text: event.text, harness }];
    }
    if (event.kind === "tool-call") {
      return [{ ts: event.ts, line: event.line, kind: "tool", tool: event.tool, input: event.input, harness }];
    }
    return [];
  });
}

async function readTranscript(mine, before) {
  const at = before ? `&before=${before}` : "";
  const base = mine.device ? `/api/fleet/${encodeURIComponent(mine.device)}/history` : "/api/history";
  const response = await fetch(`${base}/${encodeURIComponent(mine.harness)}/${encodeURIComponent(mine.id)}?limit=${TRANSCRIPT_PAGE}${at}`);
  const body = await response.json();
  return { ok: response.ok, body };
}

async function openTranscript(harness, id, device) {
  closeConversation();
  const mine = { id, harness, device, transcript: true, events: [], older: null, end: null, owed: new Set(), state: null, answers: [], source: null, openTools: new Set() };
  open = mine;
  const { ok, body } = await readTranscript(mine);
  if (open !== mine) return;
  if (!ok) {
    $("conversation").replaceChildren(el("li", "empty", body.error || `cannot read ${id}`));
    return;
  }
  setTranscript(mine, body, "bottom");
}

// The newest page replaces what the loaded pages had from its first line on.
function setTranscript(mine, body, scroll) {
  const events = transcriptEvents(body.events, mine.harness);
  const first = body.events && body.events.length ? body.events[0].line : Infinity;
  mine.events = mine.events.filter((event) => event.line < first).concat(events);
  if (!mine.events.length || mine.events[0].line >= first) {
    mine.older = body.more && body.events.length ? first : null;
  }
  const listed = body.history || board.history.get(`${mine.harness}/${mine.id}`);
  if (listed && listed.title) {
    $("session-title").textContent = mine.device ? `${listed.title} · on ${mine.device}` : listed.title;
  }
  mine.state = { display: listed ? listed.state : "" };
  renderConversation(scroll);
}

async function refreshTranscript(mine) {
  const { ok, body } = await readTranscript(mine);
  if (!ok || open !== mine) return;
  const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
  setTranscript(mine, body, atBottom ? "bottom" : "keep");
}

async function loadOlderTranscript(mine) {
  const before = mine.older;
  mine.older = null; // one request at a time
  const { ok, body } = await readTranscript(mine, before);
  if (open !== mine) return;
  if (!ok) { mine.older = before; return; }
  const height = document.body.scrollHeight;
  mine.events = transcriptEvents(body.events, mine.harness).concat(mine.events);
  mine.older = body.more && body.events.length ? body.events[0].line : null;
  renderConversation("keep");
  window.scrollBy(0, document.body.scrollHeight - height);
}

// The session's own stream, from where the page ended: each new event once, and its state.
function follow(mine) {
  const source = new EventSource(`/api/sessions/${encodeURIComponent(mine.id)}/events?after=${encodeURIComponent(mine.end)}`);
  mine.source = source;
  source.onmessage = (message) => {
    if (open !== mine) return;
    const value = JSON.parse(message.data);
    if (value.type === "events") {
      const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
      mine.events.push(...value.events);
      mine.end = value.end;
      renderConversation(atBottom ? "bottom" : "keep");
    } else if (value.type === "session") {
      mine.owed = new Set((value.owed || []).map((message) => message.mid));
      mine.state = value.state;
      mine.agent = value.agent || null;
      renderConversation("keep");
    }
  };
  // A broken stream is opened again from the last position seen (never from the first one:
  // the browser's own reconnection would repeat what was already shown).
  // An error the server sent (the session was closed, or cannot be read) is final: say it and
  // stop, rather than asking again every second.
  source.onerror = (event) => {
    source.close();
    if (open !== mine) return;
    if (event.data) {
      const said = JSON.parse(event.data);
      $("send-state").textContent = `no longer live: ${said.error || "the session cannot be read"}`;
      return;
    }
    mine.retry = setTimeout(() => open === mine && follow(mine), 1000);
  };
}

// The linked harness session, interleaved: what the agent answered and the tools it ran, and
// what a person asked in the harness itself (a prompt spex delivered is already a message here).
async function loadAnswers(mine) {
  const linked = [...board.history.values()].find((h) => h.spexSession === mine.id);
  if (!linked) return;
  const response = await fetch(`/api/history/${encodeURIComponent(linked.harness)}/${encodeURIComponent(linked.id)}?limit=500`);
  if (!response.ok || open !== mine) return;
  const body = await response.json();
  const said = new Set(mine.events.filter((event) => event.kind === "sent").map((event) => event.text.trim()));
  mine.answers = transcriptEvents(body.events, linked.harness)
    .filter((event) => event.kind !== "asked" || !said.has(event.text.trim()));
  renderConversation("keep");
}

async function loadOlder() {
  const mine = open;
  if (!mine || !mine.older) return;
  if (mine.transcript) return loadOlderTranscript(mine);
  const before = mine.older;
  mine.older = null; // one request at a time
  const response = await fetch(`/api/sessions/${encodeURIComponent(mine.id)}/timeline?limit=${PAGE}&before=${encodeURIComponent(before)}`);
  const page = await response.json();
  if (open !== mine) return;
  if (!response.ok) { mine.older = before; return; }
  const height = document.body.scrollHeight;
  mine.events = (page.events || []).concat(mine.events);
  mine.older = page.older;
  renderConversation("keep");
  window.scrollBy(0, document.body.scrollHeight - height); // the reader stays where they were
}

function renderConversation(scroll) {
  const mine = open;
  if (!mine) return;
  const id = mine.id;
  // Answers older than the loaded events wait for their page.
  const from = mine.older && mine.events.length ? mine.events[0].ts : "";
  // A transcript is in its own order (by line); a spex conversation interleaves by time.
  const items = mine.transcript
    ? mine.events
    : mine.events.concat(mine.answers.filter((answer) => answer.ts >= from));
  if (!mine.transcript) items.sort((a, b) => (a.ts || "").localeCompare(b.ts || ""));
  const list = $("conversation");
  list.replaceChildren();
  let day = null;
  for (const event of items) {
    const today = dayOf(event.ts);
    if (today !== day) {
      list.append(el("li", "day", today));
      day = today;
    }
    list.append(entry(event, id, mine.owed));
  }
  if (!items.length) list.append(el("li", "empty", "Nothing said yet."));
  $("older").hidden = !mine.older;
  const row = board.rows.get(id);
  const display = (mine.state && mine.state.display) || (row && row.state.display) || "";
  const status = $("session-status");
  status.textContent = mine.agent ? `${display} · ${mine.agent}` : display;
  status.className = `status ${display}`;
  if (scroll === "bottom") window.scrollTo(0, document.body.scrollHeight);
}

// The usage view: tokens per day for the last 30 days with any, in the reader's zone, as
// stacked bars (output, input, cache) and a table, from GET /api/usage.
const USAGE_DAYS = 30;
// The chart's own namespace (the page names no origin, not even the SVG namespace's URL).
function svg(tag, attributes, text) {
  const node = document.createElementNS($("usage-chart").namespaceURI, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

function count(n) {
  return Number(n || 0).toLocaleString("en-US");
}

function costOf(row) {
  if (row.cost === null || row.cost === undefined) return "no price";
  return `$${row.cost.toFixed(2)}${row.unpriced && row.unpriced.length ? "+?" : ""}`;
}

function drawUsage(report) {
  const rows = (report.rows || []).slice(-USAGE_DAYS);
  const chart = $("usage-chart");
  const width = 800;
  const height = 200;
  const bottom = 18;
  chart.setAttribute("viewBox", `0 0 ${width} ${height}`);
  chart.replaceChildren();
  const most = Math.max(1, ...rows.map((row) => row.tokens));
  const slot = width / Math.max(rows.length, 1);
  const bar = Math.max(2, Math.min(40, slot * 0.7));
  rows.forEach((row, index) => {
    const x = index * slot + (slot - bar) / 2;
    let y = height - bottom;
    const group = svg("g", { class: "day", "data-day": row.key, "data-tokens": row.tokens });
    group.append(svg("title", {}, `${row.key}: ${count(row.tokens)} tokens, ${costOf(row)}`));
    for (const [part, value] of [["output", row.output], ["input", row.input + row.cacheWrite], ["cache", row.cacheRead]]) {
      const tall = ((height - bottom - 4) * value) / most;
      y -= tall;
      group.append(svg("rect", { class: part, x, y, width: bar, height: tall }));
    }
    if (rows.length <= 12 || index % Math.ceil(rows.length / 12) === 0) {
      group.append(svg("text", { class: "axis", x: x + bar / 2, y: height - 4, "text-anchor": "middle" }, row.key.slice(5)));
    }
    chart.append(group);
  });
  const body = $("usage-table").tBodies[0];
  body.replaceChildren();
  const total = { ...report.total, key: "all days" };
  for (const row of [...rows].reverse().concat(rows.length ? [total] : [])) {
    const tr = el("tr");
    for (const text of [row.key, count(row.turns), count(row.replies), count(row.tokens), costOf(row)]) {
      tr.append(el("td", "", text));
    }
    body.append(tr);
  }
  $("usage-state").textContent = rows.length ? "" : "no usage recorded";
  const prices = report.prices || {};
  $("usage-prices").textContent =
    `Costs at list prices as of ${prices.asOf} (${(prices.sources || []).join(", ")}); ` +
    "a model without a price is left out of them (+?).";
}

async function openUsage() {
  $("usage-state").textContent = "reading…";
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
  const response = await fetch(`/api/usage?by=day&tz=${encodeURIComponent(zone)}`);
  const report = await response.json();
  if (!response.ok) {
    $("usage-state").textContent = report.error || `HTTP ${response.status}`;
    return;
  }
  drawUsage(report);
}

function route() {
  const hash = location.hash;
  $("usage-view").hidden = hash !== "#/usage";
  // Another device's session: read through this server, not live.
  const remote = hash.match(/^#\/f\/([^/]+)\/([^/]+)\/(.+)$/);
  if (remote) {
    const [device, harness, id] = remote.slice(1).map(decodeURIComponent);
    if (open && open.transcript && open.device === device && open.harness === harness && open.id === id) return;
    $("board-view").hidden = true;
    $("session-view").hidden = false;
    $("composer").hidden = true;
    $("older").hidden = true;
    $("session-title").textContent = `${id} · on ${device}`;
    $("send-state").textContent = "";
    $("conversation").replaceChildren();
    openTranscript(harness, id, device);
    return;
  }
  if (hash === "#/usage") {
    closeConversation();
    $("board-view").hidden = true;
    $("session-view").hidden = true;
    openUsage();
    return;
  }
  const transcript = hash.match(/^#\/h\/([^/]+)\/(.+)$/);
  if (transcript) {
    const harness = decodeURIComponent(transcript[1]);
    const id = decodeURIComponent(transcript[2]);
    if (open && open.transcript && !open.device && open.harness === harness && open.id === id) return;
    $("board-view").hidden = true;
    $("session-view").hidden = false;
    $("composer").hidden = true; // a harness session is answered in its harness
    $("older").hidden = true;
    $("session-title").textContent = id;
    $("send-state").textContent = "";
    $("conversation").replaceChildren();
    openTranscript(harness, id);
    return;
  }
  const match = hash.match(/^#\/s\/(.+)$/);
  if (match) {
    const id = decodeURIComponent(match[1]);
    if (open && !open.transcript && open.id === id) return;
    $("board-view").hidden = true;
    $("session-view").hidden = false;
    $("composer").hidden = false;
    $("session-title").textContent = id;
    $("send-state").textContent = "";
    $("conversation").replaceChildren();
    openConversation(id);
    $("message").focus();
    return;
  }
  closeConversation();
  $("session-view").hidden = true;
  $("board-view").hidden = false;
}

// A client key per message: a failed request is sent again with the same key, so the server
// keeps one message whatever happened to the first attempt.
function newKey() {
  if (crypto.randomUUID) return `web-${crypto.randomUUID()}`;
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return `web-${[...bytes].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
}

async function send(id, text) {
  const key = newKey();
  const state = $("send-state");
  for (let attempt = 1; attempt <= 6; attempt++) {
    try {
      state.textContent = attempt === 1 ? "sending…" : `sending again (attempt ${attempt})…`;
      const response = await fetch(`/api/sessions/${encodeURIComponent(id)}/input`, {
        method: "POST",
        headers: { "Content-Type": "application/json", "Idempotency-Key": key },
        body: JSON.stringify({ text }),
      });
      const body = await response.json();
      if (response.ok) {
        state.textContent = body.replayed ? "sent (already there)" : "sent";
        return true;
      }
      if (response.status !== 503) {
        state.textContent = `not sent: ${body.error || response.status}`;
        return false;
      }
    } catch (error) {
      // The network failed: the message may or may not have landed; the same key finds out.
    }
    await new Promise((resolve) => setTimeout(resolve, 250 * attempt));
  }
  state.textContent = "not sent: the server did not answer";
  return false;
}

$("composer").addEventListener("submit", async (event) => {
  event.preventDefault();
  if (!open) return;
  const box = $("message");
  const text = box.value;
  if (!text.trim()) return;
  box.disabled = true;
  const sent = await send(open.id, text);
  box.disabled = false;
  if (sent) box.value = "";
  box.focus();
});

$("message").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    $("composer").requestSubmit();
  }
});

$("older").addEventListener("click", loadOlder);
// Scrolling to the top reads the next older page.
window.addEventListener("scroll", () => {
  if (open && open.older && window.scrollY < 80) loadOlder();
});

$("search").addEventListener("submit", (event) => {
  event.preventDefault();
  search($("q").value);
});
$("clear-search").addEventListener("click", () => {
  $("q").value = "";
  $("results").hidden = true;
});
$("status-filter").addEventListener("change", renderBoard);
$("kind-filter").addEventListener("change", renderBoard);
$("archived").addEventListener("change", renderBoard);
window.addEventListener("hashchange", route);
setInterval(renderBoard, 15000); // relative times stay true

// The printed URL carries the token once: the page's own answer set the cookie, so the token
// leaves the address bar (and the history) at once.
if (new URLSearchParams(location.search).has("token")) {
  history.replaceState(null, "", location.pathname + location.hash);
}
connect();
loadFleet();
setInterval(loadFleet, 30000);
route();
