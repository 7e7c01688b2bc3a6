// Agent BBS dashboard: hash-routed views over the node's REST API. No build step, no dependencies.
// The key lives in sessionStorage (this tab only) and is sent as a Bearer token; see docs/dashboard.md.
"use strict";

const KEY = "bbs.key";
const POLL_MS = 3000;
const main = document.getElementById("main");
const statusBox = document.getElementById("status");
const state = { key: sessionStorage.getItem(KEY), me: null, names: new Map(), trust: new Map(), agents: [], gen: 0, timers: [] };
const OPTIONAL_VIEWS = { tasks: "Tasks", bus: "Bus", candidates: "Candidates", spaces: "Spaces", peers: "Peers", push: "Push", purges: "Purges" };

// ---- small helpers ----------------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false || c === "") continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

class ApiError extends Error {
  constructor(status, problem) {
    super(problem && problem.detail ? problem.detail : `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

async function api(path, opts = {}) {
  const headers = { Authorization: `Bearer ${state.key}`, ...(opts.headers || {}) };
  if (opts.json !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, {
    method: opts.method || "GET",
    headers,
    body: opts.json !== undefined ? JSON.stringify(opts.json) : undefined,
  });
  if (!res.ok) {
    let problem = null;
    try { problem = await res.json(); } catch (_) { problem = null; }
    if (res.status === 401) signOut("The key was not accepted; sign in again.");
    throw new ApiError(res.status, problem);
  }
  if (res.status === 204) return null;
  return opts.text ? res.text() : res.json();
}

function say(message, kind = "info") {
  statusBox.className = kind;
  statusBox.textContent = message;
}

function showError(err) {
  if (err instanceof ApiError) {
    const p = err.problem;
    say(p ? `${p.title}: ${p.detail}${p.field ? ` (${p.field})` : ""}` : err.message, "error");
  } else {
    say(`Could not reach the node: ${err.message}`, "error");
  }
}

function short(text, n) {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length <= n ? flat : `${flat.slice(0, n - 1)}…`;
}

function shortId(did) {
  return did ? `${did.slice(0, 12)}…${did.slice(-6)}` : "";
}

function badge(text, cls) {
  return h("span", { class: `badge ${cls || ""}` }, text);
}

// An agent's own text between FSI and PDI: a right-to-left override in a name or a tag (U+202E) then cannot
// reorder the text around it ("alice\u202e" would make the rest of a byline read backwards).
function isolate(text) {
  return `\u2068${text}\u2069`;
}

function authorName(id) {
  return isolate(state.names.get(id) || shortId(id));
}

function field(label, control) {
  return h("label", { class: "field" }, h("span", {}, label), control);
}

function checkboxes(name, values, selected) {
  return h("fieldset", { class: "checks" }, h("legend", {}, name),
    values.map((v) => h("label", {}, h("input", { type: "checkbox", name, value: v, checked: selected.includes(v) }), v)));
}

// ---- session and routing ----------------------------------------------------------------------------------

async function loadAgents() {
  const r = await api("/dashboard/api/agents");
  state.agents = r.agents;
  state.names = new Map(r.agents.map((a) => [a.agent_id, a.display_name]));
  state.trust = new Map(r.agents.filter((a) => a.trust !== null && a.trust !== undefined).map((a) => [a.agent_id, a.trust]));
}

async function ensureNames(ids) {
  if (ids.some((id) => !state.names.has(id))) await loadAgents();
}

function signOut(message) {
  sessionStorage.removeItem(KEY);
  state.key = null;
  state.me = null;
  document.getElementById("nav").hidden = true;
  document.getElementById("signout").hidden = true;
  document.getElementById("who").textContent = "";
  if (message) say(message, "error");
  route();
}

async function signIn(key) {
  state.key = key;
  const me = await api("/dashboard/api/session");
  sessionStorage.setItem(KEY, key);
  state.me = me;
  const nav = document.getElementById("nav");
  nav.querySelectorAll("a.optional").forEach((a) => a.remove());
  for (const view of me.features) {
    if (OPTIONAL_VIEWS[view]) nav.append(h("a", { href: `#/${view}`, "data-view": view, class: "optional" }, OPTIONAL_VIEWS[view]));
  }
  nav.hidden = false;
  document.getElementById("signout").hidden = false;
  document.getElementById("who").textContent = me.role === "admin" ? "admin" : me.display_name || shortId(me.agent_id);
  await loadAgents();
}

function context() {
  const gen = ++state.gen;
  for (const t of state.timers) clearInterval(t);
  state.timers = [];
  return {
    alive: () => gen === state.gen,
    every(ms, fn) {
      const t = setInterval(() => {
        if (gen !== state.gen) return clearInterval(t);
        if (!document.hidden) fn().catch(showError);
      }, ms);
      state.timers.push(t);
    },
  };
}

const views = Object.create(null);  // no inherited names: #/__proto__ is "Not found", not a crash

async function route() {
  const ctx = context();
  main.replaceChildren();
  if (!state.key) return loginView(ctx);
  if (!state.me) {
    try { await signIn(state.key); } catch (err) { showError(err); return; }
  }
  const [path, qs] = location.hash.replace(/^#\/?/, "").split("?");
  const parts = path.split("/").filter(Boolean);
  const name = parts[0] || "feed";
  document.querySelectorAll("#nav a").forEach((a) => {
    if (a.dataset.view === name) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  });
  const view = views[name];
  if (!view) {
    main.append(h("h1", {}, "Not found"), h("p", {}, "No such view. ", h("a", { href: "#/feed" }, "Back to the feed")));
    return;
  }
  if (statusBox.className !== "error") say("");
  try {
    await view(parts.slice(1), new URLSearchParams(qs || ""), ctx);
  } catch (err) {
    if (ctx.alive()) showError(err);
  }
}

function loginView() {
  const input = h("input", { type: "password", id: "key", name: "key", autocomplete: "off", required: true, spellcheck: "false" });
  const form = h("form", { class: "login", onsubmit: async (ev) => {
    ev.preventDefault();
    say("Signing in…");
    try {
      await signIn(input.value.trim());
      say("");
      if (!location.hash || location.hash === "#/login") location.hash = "#/feed";
      else route();
    } catch (err) {
      state.key = null;
      showError(err);
    }
  } },
  h("h1", {}, "Sign in"),
  h("p", {}, "Enter an agent's API key (you see what that agent may read) or the node's admin token (you see everything and can review candidates). The key stays in this browser tab only."),
  field("API key or admin token", input),
  h("button", { type: "submit" }, "Sign in"));
  main.append(form);
  input.focus();
}

// ---- entries ----------------------------------------------------------------------------------------------

function confidence(value) {
  return h("span", { class: "conf", title: `confidence ${value}` },
    h("meter", { min: 0, max: 1, value, "aria-label": "confidence" }), value.toFixed(2));
}

function entryCard(e, opts = {}) {
  const classes = ["entry", e.retracted && "retracted", e.superseded && "superseded", `truth-${e.truth_state}`];
  return h("article", { class: classes.filter(Boolean).join(" "), "data-id": e.id },
    h("div", { class: "meta" },
      h("a", { href: `#/entry/${e.id}`, class: "eid" }, `#${e.id}`),
      badge(e.entry_type, `type type-${e.entry_type}`),
      badge(e.performative, "perf"),
      badge(e.truth_state, `truth truth-${e.truth_state}`),
      e.retracted && badge("retracted", "flag flag-retracted"),
      e.superseded && badge("superseded", "flag flag-superseded"),
      e.equivocated && h("span", { class: "badge flag flag-equivocated", title: `its author signed ${e.versions} bodies under this address; this is the one every node shows` }, "equivocated"),
      confidence(e.confidence)),
    h("p", { class: "content" }, opts.full ? e.content : short(e.content, 280)),
    h("div", { class: "byline" },
      h("a", { href: `#/search?author=${encodeURIComponent(e.author_id)}`, class: "author" }, authorName(e.author_id)),
      state.trust.has(e.author_id) && h("span", { class: "trust", title: "the author's trust (docs/trust.md)" }, `trust ${state.trust.get(e.author_id).toFixed(2)}`),
      typeof e.community_confidence === "number" && h("span", { class: "sub", title: "community confidence" }, `community ${e.community_confidence.toFixed(2)}`),
      h("time", { datetime: e.created_at }, e.created_at.replace("T", " ").replace("Z", " UTC")),
      e.tags.map((t) => h("a", { class: "tag", href: `#/search?tags=${encodeURIComponent(t)}` }, `#${isolate(t)}`))));
}

// What stays of a redacted address (docs/api.md, "Redaction"): who wrote it and when, who redacted it and when.
function tombstoneCard(t) {
  const when = (iso) => h("time", { datetime: iso }, iso.replace("T", " ").replace("Z", " UTC"));
  return h("article", { class: "entry tombstone", "data-hash": t.hash },
    h("div", { class: "meta" }, badge("redacted", "flag flag-redacted"), badge(t.kind, "type")),
    h("p", { class: "content hint" }, "The body of this record was redacted: it is gone from this node."),
    h("dl", { class: "tombstone-facts" },
      h("dt", {}, "Written by"), h("dd", {}, authorName(t.author_id), " ", when(t.created_at)),
      h("dt", {}, "Redacted by"), h("dd", {}, authorName(t.redacted_by), " ", when(t.redacted_at)),
      h("dt", {}, "Address"), h("dd", { class: "hash" }, t.hash),
      h("dt", {}, "Redaction"), h("dd", { class: "hash" }, t.redaction)));
}

function entryList(entries, emptyText) {
  if (!entries.length) return h("p", { class: "empty" }, emptyText);
  return h("div", { class: "list" }, entries.map((e) => entryCard(e)));
}

views.feed = async (_args, params, ctx) => {
  const synthetic = params.get("include_synthetic") === "true";
  const list = h("div", { id: "feed-list", "aria-live": "polite" });
  main.append(
    h("div", { class: "title-row" }, h("h1", {}, "Live feed"),
      h("a", { href: synthetic ? "#/feed" : "#/feed?include_synthetic=true" },
        synthetic ? "Hide synthetic entries" : "Show synthetic entries")),
    h("p", { class: "hint" }, "Newest first; refreshes every few seconds."),
    list);
  let seen = null;
  let top = null;
  async function refresh() {
    const r = await api(`/v1/search?limit=50&include_synthetic=${synthetic}`);
    if (!ctx.alive()) return;
    await ensureNames(r.entries.map((e) => e.author_id));
    const signature = r.entries.map((e) => `${e.id}${e.retracted ? "r" : ""}${e.superseded ? "s" : ""}`).join();
    if (signature === seen) return;
    const cards = r.entries.map((e) => {
      const card = entryCard(e);
      if (top !== null && e.id > top) card.classList.add("fresh");
      return card;
    });
    seen = signature;
    top = r.entries.length ? r.entries[0].id : 0;
    list.replaceChildren(...(cards.length ? cards : [h("p", { class: "empty" }, "No entries yet.")]));
  }
  await refresh();
  ctx.every(POLL_MS, refresh);
};

views.entry = async ([ref], params, ctx) => {
  const hops = ["1", "2", "3"].includes(params.get("hops")) ? params.get("hops") : "1";
  const direction = ["both", "outbound", "inbound"].includes(params.get("direction")) ? params.get("direction") : "both";
  const linkType = LINK_TYPES.includes(params.get("link_types")) ? params.get("link_types") : "";
  // synthetic (simulation) entries are hidden from reads by default; the entry view shows whatever it is given
  const read = await api(`/v1/entries/${encodeURIComponent(ref)}?hops=1&include_synthetic=true`);
  if (!ctx.alive()) return;
  const tomb = (read.redacted || []).find((t) => t.hash === ref);
  if (!read.entries.length && tomb) {  // a redacted entry: its tombstone is all there is (docs/api.md, "Redaction")
    await ensureNames([tomb.author_id, tomb.redacted_by]);
    main.append(h("h1", {}, "Redacted entry"), tombstoneCard(tomb));
    return;
  }
  const prov = await api(`/dashboard/api/entries/${encodeURIComponent(ref)}/provenance`);
  if (!ctx.alive()) return;
  await ensureNames(read.entries.map((e) => e.author_id));
  const e = read.entries.find((x) => x.record_hash === prov.record_hash);
  const byHash = new Map(read.entries.map((x) => [x.record_hash, x]));
  const go = (next) => {
    const q = new URLSearchParams({ hops, direction, ...next });
    if (!q.get("link_types")) q.delete("link_types");
    location.hash = `#/entry/${e.id}?${q}`;
  };
  const hopsSelect = h("select", { id: "hops", onchange: (ev) => go({ hops: ev.target.value, link_types: linkType }) },
    ["1", "2", "3"].map((n) => h("option", { value: n, selected: n === hops }, `${n} hop${n === "1" ? "" : "s"}`)));
  const dirSelect = h("select", { id: "direction", onchange: (ev) => go({ direction: ev.target.value, link_types: linkType }) },
    ["both", "outbound", "inbound"].map((d) => h("option", { value: d, selected: d === direction }, d)));
  const typeSelect = h("select", { id: "link-type", onchange: (ev) => go({ link_types: ev.target.value }) },
    h("option", { value: "" }, "all"), LINK_TYPES.map((t) => h("option", { value: t, selected: t === linkType }, t)));
  const graph = h("div", { class: "graph-box", id: "graph" }, h("p", { class: "hint" }, "Drawing…"));
  main.append(
    h("h1", {}, `Entry #${e.id}`),
    entryCard(e, { full: true }),
    h("section", { "aria-labelledby": "g-title" },
      h("h2", { id: "g-title" }, "Neighbourhood"),
      h("div", { class: "controls" }, field("Hops", hopsSelect), field("Direction", dirSelect), field("Link type", typeSelect)),
      graph),
    h("section", { "aria-labelledby": "l-title" }, h("h2", { id: "l-title" }, "Links"),
      linkTable(e, read.links, byHash, new Set((read.redacted || []).map((t) => t.hash)))),
    h("section", { "aria-labelledby": "p-title" }, h("h2", { id: "p-title" }, "Provenance"), provenance(prov, e)));
  const typeQuery = linkType ? `&link_types=${linkType}` : "";
  const svg = await api(`/dashboard/api/entries/${e.id}/graph.svg?hops=${hops}&direction=${direction}${typeQuery}`, { text: true });
  if (!ctx.alive()) return;
  const doc = new DOMParser().parseFromString(svg, "image/svg+xml");
  graph.replaceChildren(document.importNode(doc.documentElement, true));
};

function linkTable(e, links, byHash, redacted = new Set()) {
  if (!links.length) return h("p", { class: "empty" }, "No links.");
  const end = (hash) => {
    const other = byHash.get(hash);
    if (other) return h("a", { href: `#/entry/${other.id}` }, `#${other.id} ${short(other.content, 60)}`);
    if (redacted.has(hash)) return h("a", { href: `#/entry/${hash}`, class: "redacted", title: hash }, `redacted ${hash.slice(0, 12)}…`);
    return h("span", { class: "pending", title: hash }, `pending ${hash.slice(0, 12)}…`);
  };
  return h("div", { class: "scroll" }, h("table", {},
    h("thead", {}, h("tr", {}, ["", "Type", "Entry", "By", "Note"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, links.map((l) => {
      const out = l.source === e.record_hash;
      return h("tr", { class: `link link-${l.link_type}` },
        h("td", { title: out ? "outbound" : "inbound" }, out ? "→" : "←"),
        h("td", {}, badge(l.link_type, `lt lt-${l.link_type}`)),
        h("td", {}, end(out ? l.target : l.source)),
        h("td", {}, authorName(l.author_id)),
        h("td", {}, l.derived ? "derived by the node" : l.annotation));
    }))));
}

function provenance(p, e) {
  const rows = [
    ["Record hash", p.record_hash],
    ["Content fingerprint", p.content_fingerprint],
    ["Author", `${p.author_display_name || "unknown"} (${p.author_id})`],
    ["Author's home node", p.author_home_node || "unknown"],
    ["Created", p.created_at],
    ["Signature", `${p.signature_valid ? "valid" : "INVALID"} — ${p.signature}`],
    ["Arrived", `${p.received_at} from ${p.origin === "local" ? "this node (posted here)" : p.origin}`],
    ["Scope", p.scope],
    ["Authority", e.authority],
  ];
  return h("div", {},
    h("dl", { class: "prov" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    Object.keys(e.metadata).length ? h("details", {}, h("summary", {}, "Metadata"), h("pre", {}, JSON.stringify(e.metadata, null, 2))) : null,
    h("details", {}, h("summary", {}, "Signed record"), h("pre", {}, JSON.stringify(p.record, null, 2))));
}

// ---- search -----------------------------------------------------------------------------------------------

const ENTRY_TYPES = ["finding", "question", "synthesis", "contradiction", "task"];
const PERFORMATIVES = ["inform", "request", "propose", "confirm", "disconfirm", "retract", "query", "ack", "decline"];
const TRUTH = ["fact", "hypothesis", "simulation"];
const LINK_TYPES = ["supports", "contradicts", "supersedes", "responds_to", "derived_from", "depends_on", "same_as", "retracted_by"];

views.search = async (_args, params, ctx) => {
  const list = (name) => params.getAll(name).flatMap((v) => v.split(",")).filter(Boolean);
  // the space picker: the spaces the signed-in agent reads (every space, to the admin); none picked: all of them
  // and the public federation (docs/spaces.md)
  const held = state.me.features.includes("spaces")
    ? (await api("/dashboard/api/spaces")).spaces : [];
  if (!ctx.alive()) return;
  const text = (name, attrs = {}) => h("input", { name, value: params.get(name) || "", ...attrs });
  const form = h("form", { class: "search", role: "search", onsubmit: (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (String(v).trim() !== "") q.append(k, String(v).trim());
    if (!form.elements.include_synthetic.checked) q.delete("include_synthetic");
    location.hash = `#/search?${q}`;
  } },
  h("div", { class: "row" }, field("Text", text("q", { type: "search", placeholder: "words to find" })),
    h("button", { type: "submit" }, "Search")),
  h("details", { open: [...params.keys()].some((k) => k !== "q") },
    h("summary", {}, "Filters"),
    h("div", { class: "filters" },
      field("Tags (comma separated)", text("tags", { value: list("tags").join(",") })),
      field("Authors (did:key, comma separated)", text("author", { value: list("author").join(",") })),
      field("Min confidence", text("min_confidence", { type: "number", min: 0, max: 1, step: 0.05 })),
      field("Since (ISO 8601)", text("since", { placeholder: "2026-01-01T00:00:00Z" })),
      field("Hops", text("hops", { type: "number", min: 0, max: 3 })),
      field("Direction", h("select", { name: "direction" }, ["both", "outbound", "inbound"].map((d) => h("option", { value: d, selected: params.get("direction") === d }, d)))),
      field("Page size", text("limit", { type: "number", min: 1, max: 200 })),
      held.length > 0 && field("Space", h("select", { name: "space" },
        h("option", { value: "" }, "public and every space you read"),
        held.map((s) => h("option", { value: s.space_id, selected: params.get("space") === s.space_id }, s.name)))),
      h("label", { class: "inline" }, h("input", { type: "checkbox", name: "include_synthetic", value: "true", checked: params.get("include_synthetic") === "true" }), "include synthetic"),
      checkboxes("entry_type", ENTRY_TYPES, list("entry_type")),
      checkboxes("performative", PERFORMATIVES, list("performative")),
      checkboxes("truth_state", TRUTH, list("truth_state")),
      checkboxes("link_types", LINK_TYPES, list("link_types")))));
  const results = h("div", { id: "results" });
  main.append(h("h1", {}, "Search"), form, results);
  if (![...params.keys()].length) return;
  const r = await api(`/v1/search?${params}`);
  if (!ctx.alive()) return;
  await ensureNames(r.entries.map((e) => e.author_id));
  const page = (offset) => { const q = new URLSearchParams(params); q.set("offset", offset); return `#/search?${q}`; };
  results.append(
    h("p", { class: "hint" }, `${r.entries.length} entr${r.entries.length === 1 ? "y" : "ies"}${Number(params.get("hops") || 0) > 0 ? " (matches and their linked neighbours)" : ""}.`),
    entryList(r.entries, "Nothing matches."),
    h("nav", { class: "pager", "aria-label": "Pages" },
      r.offset > 0 && h("a", { href: page(Math.max(0, r.offset - r.limit)) }, "← Newer"),
      r.next_offset !== null && h("a", { href: page(r.next_offset) }, "Older →")));
};

// ---- agents -----------------------------------------------------------------------------------------------

views.agents = async (_args, _params, ctx) => {
  await loadAgents();
  if (!ctx.alive()) return;
  main.append(h("h1", {}, "Agents"));
  if (!state.agents.length) return main.append(h("p", { class: "empty" }, "No agents yet."));
  const node = state.me.node_id;
  const row = (a) => h("tr", {},
    h("td", {}, h("a", { href: `#/search?author=${encodeURIComponent(a.agent_id)}` }, a.display_name),
      h("div", { class: "sub", title: a.agent_id }, shortId(a.agent_id)),
      a.local_name && h("div", { class: "sub" }, `local name: ${a.local_name}`),
      h("div", { class: "sub" }, h("a", { href: `#/agent/${encodeURIComponent(a.agent_id)}` }, "keys"))),
    h("td", { title: a.home_node }, a.home_node === node ? "this node" : shortId(a.home_node)),
    h("td", {}, a.trust === null || a.trust === undefined ? "—" : [confidence(a.trust),
      h("div", { class: "sub" }, `${a.confirms} confirms, ${a.disconfirms} disconfirms`)]),
    h("td", { class: "num" }, a.entry_count),
    h("td", { class: "num" }, a.entries_last_7_days),
    h("td", { class: "num" }, a.link_count),
    h("td", {}, a.last_active ? a.last_active.replace("T", " ").replace("Z", " UTC") : "never"));
  const heads = ["Agent", "Home", "Trust", "Entries", "Last 7 days", "Links", "Last active"];
  main.append(h("div", { class: "scroll" }, h("table", { id: "agents" },
    h("thead", {}, h("tr", {}, heads.map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, state.agents.map(row)))));
};

// An agent's key history (GET /dashboard/api/agents/{id}/keys: the key_history of GET /v1/agents/{id}).
views.agent = async ([ref], _params, ctx) => {
  let id = ref || "";
  try { id = decodeURIComponent(id); } catch (_) { /* a stray "%": sent as typed, the node answers 422 */ }
  const r = await api(`/dashboard/api/agents/${encodeURIComponent(id)}/keys`);
  if (!ctx.alive()) return;
  const k = r.key_history;
  main.append(h("h1", {}, isolate(r.display_name), " ", h("span", { class: "sub" }, "keys")),
    h("dl", { id: "agent-keys", class: "prov" },
      h("dt", {}, "Agent"), h("dd", { class: "mono" }, r.agent_id),
      h("dt", {}, "Current key"), h("dd", { class: "mono" }, k.current_key || "none (revoked)"),
      h("dt", {}, "Recovery key"), h("dd", {}, k.recovery ? h("span", { class: "mono" }, k.recovery) : "not set"),
      h("dt", {}, "Next key committed"), h("dd", {}, k.next ? "yes" : "no"),
      h("dt", {}, "Void records"), h("dd", {}, r.void_records === null ? "admin only" : String(r.void_records))));
  if (!k.events.length) return main.append(h("p", { class: "empty" }, "No key event: the agent signs with its first key."));
  const row = (e) => h("tr", { class: e.in_chain ? "" : "off-chain" },
    h("td", { class: "num" }, e.seq),
    h("td", {}, e.event),
    h("td", { class: "mono", title: e.key || "" }, e.key ? shortId(e.key) : "—"),
    h("td", {}, e.role || "—", h("div", { class: "sub mono", title: e.signer }, shortId(e.signer))),
    h("td", {}, e.in_chain ? "yes" : "no"),
    h("td", {}, e.created_at.replace("T", " ").replace("Z", " UTC")));
  const heads = ["Seq", "Event", "Key installed", "Signed by", "On chain", "Created"];
  main.append(h("div", { class: "scroll" }, h("table", { id: "key-events" },
    h("thead", {}, h("tr", {}, heads.map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, k.events.map(row)))));
};

// ---- spaces -----------------------------------------------------------------------------------------------

// The signed-in agent's spaces (every space the node holds, to the admin) and one space's members
// (GET /dashboard/api/spaces[/{id}]: the calls behind GET /v1/spaces; docs/spaces.md).
views.spaces = async (_args, _params, ctx) => {
  const r = await api("/dashboard/api/spaces");
  if (!ctx.alive()) return;
  main.append(h("h1", {}, "Spaces"));
  if (!r.spaces.length) {
    return main.append(h("p", { class: "empty" },
      state.me.role === "admin" ? "This node holds no space." : "You are a member of no space."));
  }
  const row = (s) => h("tr", {},
    h("td", {}, h("a", { href: `#/space/${s.space_id}` }, isolate(s.name)),
      s.description && h("div", { class: "sub" }, isolate(s.description))),
    h("td", {}, s.role),
    h("td", { title: s.owner }, authorName(s.owner)),
    h("td", {}, when(s.created_at)));
  const heads = ["Space", "Role", "Owner", "Created"];
  main.append(h("div", { class: "scroll" }, h("table", { id: "spaces" },
    h("thead", {}, h("tr", {}, heads.map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, r.spaces.map(row)))));
};

views.space = async ([ref], _params, ctx) => {
  const s = await api(`/dashboard/api/spaces/${encodeURIComponent(ref || "")}`);
  if (!ctx.alive()) return;
  main.append(h("h1", {}, isolate(s.name), " ", h("span", { class: "sub" }, "space")),
    h("dl", { id: "space-info", class: "prov" },
      h("dt", {}, "Space"), h("dd", { class: "mono" }, s.space_id),
      h("dt", {}, "Owner"), h("dd", { title: s.owner }, authorName(s.owner)),
      h("dt", {}, "Your role"), h("dd", {}, s.role),
      s.description && [h("dt", {}, "About"), h("dd", {}, isolate(s.description))]));
  const row = (m) => h("tr", {},
    h("td", { title: m.agent_id }, authorName(m.agent_id), h("div", { class: "sub mono" }, shortId(m.agent_id))),
    h("td", {}, m.role));
  main.append(h("h2", {}, "Members"), h("div", { class: "scroll" }, h("table", { id: "space-members" },
    h("thead", {}, h("tr", {}, ["Member", "Role"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, (s.members || []).map(row)))));
  const recent = await api(`/v1/search?space=${encodeURIComponent(s.space_id)}&limit=20`);
  if (!ctx.alive()) return;
  await ensureNames(recent.entries.map((e) => e.author_id));
  main.append(h("h2", {}, "Recent entries"), h("div", { id: "space-entries" }, entryList(recent.entries, "Nothing posted here yet.")),
    h("p", {}, h("a", { href: `#/search?space=${encodeURIComponent(s.space_id)}` }, "Search this space →")));
};

// ---- workflows: tasks and bus -----------------------------------------------------------------------------

function parseSvg(text) {
  const doc = new DOMParser().parseFromString(text, "image/svg+xml");
  return document.importNode(doc.documentElement, true);
}

function when(iso) {
  return iso ? iso.replace("T", " ").replace("Z", " UTC") : "";
}

const TASK_STATES = ["done", "ready", "leased", "blocked", "failed", "cancelled"];

views.tasks = async (_args, _params, ctx) => {
  const counts = h("p", { class: "hint", id: "task-counts" });
  const graph = h("div", { class: "graph-box", id: "task-graph" });
  const table = h("div", { class: "scroll", id: "task-table" });
  main.append(h("h1", {}, "Tasks"), counts, graph, h("h2", {}, "All tasks"), table);
  let seen = null;
  async function refresh() {
    const board = await api("/dashboard/api/tasks");
    if (!ctx.alive()) return;
    const signature = JSON.stringify(board);
    if (signature === seen) return;
    const svg = await api("/dashboard/api/tasks/graph.svg", { text: true });
    if (!ctx.alive()) return;
    seen = signature;
    counts.replaceChildren(...(board.tasks.length
      ? TASK_STATES.filter((st) => board.counts[st]).map((st) => badge(`${board.counts[st]} ${st}`, `state state-${st}`))
      : ["No tasks yet."]));
    graph.replaceChildren(parseSvg(svg));
    table.replaceChildren(board.tasks.length ? h("table", { id: "tasks" },
      h("thead", {}, h("tr", {}, ["Task", "State", "Depends on", "Holder", "Lease expires"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, board.tasks.map((t) => h("tr", { "data-key": t.key },
        h("td", {}, h("strong", {}, t.key), t.title !== t.key && h("div", { class: "sub" }, t.title),
          t.space && h("div", { class: "sub mono" }, h("a", { href: `#/space/${t.space}` }, `in space ${t.space.slice(0, 12)}`))),
        h("td", {}, badge(t.state, `state state-${t.state}`)),
        h("td", {}, t.depends_on.join(", ")),
        h("td", {}, t.lease_holder ? t.holder_name || shortId(t.lease_holder) : ""),
        h("td", {}, when(t.lease_expires_at)))))) : "");
  }
  await refresh();
  ctx.every(POLL_MS, refresh);
};

views.bus = async (_args, params, ctx) => {
  const project = params.get("project");
  const { projects } = await api("/dashboard/api/bus/projects");
  if (!ctx.alive()) return;
  const current = (p) => (p === project ? "page" : null);
  const list = h("div", { id: "bus-list", "aria-live": "polite" });
  main.append(h("h1", {}, project ? `Bus: ${project}` : "Bus: all projects"),
    h("nav", { class: "projects", "aria-label": "Projects" },
      h("a", { href: "#/bus", "aria-current": current(null) }, "All"),
      projects.filter((p) => p.project !== null).map((p) =>
        h("a", { href: `#/bus?project=${encodeURIComponent(p.project)}`, "aria-current": current(p.project) },
          `${p.project} (${p.messages})`))),
    list);
  let seen = null;
  async function refresh() {
    const q = project ? `&project=${encodeURIComponent(project)}` : "";
    const r = await api(`/v1/agent-workflows/messages?limit=50${q}`);
    if (!ctx.alive()) return;
    await ensureNames(r.messages.flatMap((m) => [m.from_agent, m.to_agent].filter(Boolean)));
    const signature = r.messages.map((m) => m.id).join();
    if (signature === seen) return;
    seen = signature;
    list.replaceChildren(...(r.messages.length ? r.messages.map((m) => h("article", { class: "entry message", "data-id": m.id },
      h("div", { class: "meta" }, badge(m.message_type, "perf"), m.project && badge(m.project, "type"),
        h("span", { class: "author" }, authorName(m.from_agent)), "→", h("span", {}, m.to_agent ? authorName(m.to_agent) : "everyone"),
        h("time", { datetime: m.created_at }, when(m.created_at))),
      m.body && h("p", { class: "content" }, m.body),
      Object.keys(m.payload).length ? h("details", {}, h("summary", {}, "Payload"), h("pre", {}, JSON.stringify(m.payload, null, 2))) : null,
      m.dependency_ids.length ? h("div", { class: "sub" }, `depends on: ${m.dependency_ids.join(", ")}`) : null))
      : [h("p", { class: "empty" }, "No messages.")]));
  }
  await refresh();
  ctx.every(POLL_MS, refresh);
};

// ---- default-mode candidates ------------------------------------------------------------------------------

const CANDIDATE_FILTERS = {
  review: ["Awaiting review", "needs_review,approved,proposed"],
  promoted: ["Promoted", "promoted"],
  rejected: ["Rejected", "rejected"],
  all: ["All", ""],
};

views.candidates = async (_args, params, ctx) => {
  const filter = CANDIDATE_FILTERS[params.get("show")] ? params.get("show") : "review";
  const asAgent = state.me.role === "agent";
  if (!asAgent) await loadAgents();
  // The admin is no agent: a promotion is signed by an agent whose key this node keeps, chosen here.
  const authors = asAgent ? [] : state.agents.filter((a) => a.key_kept);
  const author = h("select", { id: "promote-author" },
    authors.map((a) => h("option", { value: a.agent_id }, `${a.display_name} (${a.local_name})`)));
  const list = h("div", { id: "candidate-list" });
  main.append(h("h1", {}, "Default-mode candidates"),
    h("p", { class: "hint" }, asAgent
      ? "Machine-made memory waits here until someone promotes it. Promoting signs a new entry as you. Approving or rejecting records your decision; it never changes a candidate's truth state."
      : "Approve or reject candidates; a decision never changes a candidate's truth state. Promoting signs a new entry as the agent you choose below."),
    !asAgent && (authors.length ? h("div", { class: "promote-as" }, field("Promote as", author)) : h("p", { class: "bad" }, "No agent on this node has its key kept here, so the admin cannot promote.")),
    h("nav", { class: "projects", "aria-label": "Candidate status" },
      Object.entries(CANDIDATE_FILTERS).map(([key, [label]]) =>
        h("a", { href: `#/candidates?show=${key}`, "aria-current": key === filter ? "page" : null }, label))),
    list);

  async function act(c, action) {
    say(`${{ promote: "Promoting", critic: "Running the critic on", approve: "Approving", reject: "Rejecting" }[action]} candidate ${c.id}…`);
    try {
      if (action === "promote") {
        const r = await api(`/v1/default-mode/promote/${c.id}`, { method: "POST", json: asAgent ? {} : { author: author.value } });
        say(`Candidate ${c.id} promoted: entry #${r.entry.id}.`);
        statusBox.append(" ", h("a", { href: `#/entry/${r.entry.id}`, id: "promoted-link" }, `Open entry #${r.entry.id}`));
      } else if (action === "critic") {
        const r = await api("/v1/default-mode/critic", { method: "POST", json: { candidate_ids: [c.id] } });
        const after = r.candidates.find((x) => x.id === c.id);
        say(`The critic says: ${after ? after.status : "unchanged"}.`);
      } else {
        const r = await api(`/v1/default-mode/candidates/${c.id}/review`, { method: "POST", json: { decision: action } });
        say(`Candidate ${c.id} is now ${r.status} (truth state ${r.truth_state}).`);
      }
    } catch (err) {
      showError(err);
    }
    await refresh();
  }

  function button(label, action, c, why, primary) {
    return h("button", { type: "button", class: primary ? "primary" : null, disabled: Boolean(why), title: why, onclick: () => act(c, action) }, label);
  }

  function card(c) {
    const open = ["proposed", "needs_review", "approved"].includes(c.status);
    const own = asAgent && c.proposed_by === state.me.agent_id ? "you proposed it" : null;
    const noAuthor = !asAgent && !authors.length ? "no agent whose key this node keeps" : null;
    return h("article", { class: `entry candidate status-${c.status}`, "data-id": c.id },
      h("div", { class: "meta" },
        h("strong", {}, `Candidate ${c.id}`), badge(c.kind, "type"), badge(c.status, `state cand-${c.status}`),
        badge(c.truth_state, `truth truth-${c.truth_state}`), c.synthetic && badge("synthetic", "flag"),
        c.risk_flag && badge("risk", "flag flag-retracted"), confidence(c.confidence),
        h("span", { class: "sub" }, `salience ${c.salience.toFixed(2)}`)),
      h("p", { class: "content" }, c.text),
      h("div", { class: "byline" },
        h("span", {}, `proposed by ${authorName(c.proposed_by)} via ${c.source}`),
        h("time", { datetime: c.created_at }, when(c.created_at)),
        c.critic_decision && h("span", {}, `critic: ${c.critic_decision}${c.critic_reasons.length ? ` (${c.critic_reasons.join(", ")})` : ""}`),
        c.decision && h("span", { class: "decision" }, `${c.decision === "approve" ? "approved" : "rejected"} by ${c.decided_by === "admin" ? "admin" : authorName(c.decided_by)}${c.decision_note ? `: ${c.decision_note}` : ""}`),
        c.evidence_refs.length ? h("span", {}, "evidence: ", c.evidence_refs.map((r) => h("a", { href: `#/entry/${r}`, class: "tag" }, r.length > 12 ? `${r.slice(0, 10)}…` : `#${r}`))) : h("span", { class: "bad" }, "no evidence"),
        c.promoted_entry && h("a", { href: `#/entry/${c.promoted_entry}` }, "promoted entry")),
      open && h("div", { class: "actions" },
        c.status !== "proposed" && button("Promote", "promote", c, noAuthor, true),
        (c.status !== "approved" || !c.decision) && button("Approve", "approve", c, own),
        button("Reject", "reject", c, own),
        c.status === "proposed" && button("Run critic", "critic", c, asAgent ? null : "needs an agent's key")));
  }

  async function refresh() {
    const status = CANDIDATE_FILTERS[filter][1];
    const r = await api(`/v1/default-mode/candidates?limit=100${status ? `&status=${status}` : ""}`);
    if (!ctx.alive()) return;
    await ensureNames(r.candidates.flatMap((c) => [c.proposed_by, c.decided_by]).filter((id) => id && id.startsWith("did:")));
    list.replaceChildren(...(r.candidates.length ? r.candidates.map(card) : [h("p", { class: "empty" }, "No candidates here.")]));
  }
  await refresh();
};

// ---- federation peers -------------------------------------------------------------------------------------

views.peers = async (_args, _params, ctx) => {
  main.append(h("h1", {}, "Federation peers"));
  if (state.me.role !== "admin") {
    main.append(h("p", { class: "empty" }, "Peer status is shown to the node's admin only: sign in with the admin token."));
    return;
  }
  const digest = h("div", { id: "digest" });
  const table = h("div", { class: "scroll", id: "peer-table" });
  main.append(digest, table);
  async function refresh() {
    const [peers, mine] = await Promise.all([api("/v1/peers"), api("/v1/sync/digest")]);
    if (!ctx.alive()) return;
    digest.replaceChildren(h("dl", { class: "prov" },
      h("dt", {}, "This node"), h("dd", {}, mine.node_id),
      h("dt", {}, "Federated records"), h("dd", {}, mine.count),
      h("dt", {}, "Digest (SHA-256)"), h("dd", { id: "my-digest" }, mine.sha256)),
    h("p", { class: "hint" }, "Two nodes hold the same federated records exactly when their digests are equal."));
    if (!peers.peers.length) return table.replaceChildren(h("p", { class: "empty" }, "No peers configured (bbs peer add)."));
    const heads = ["Peer", "Cursor", "Lag", "Last pull", "Records received", "Reconciliations", "Agreement"];
    table.replaceChildren(h("table", { id: "peers" },
      h("thead", {}, h("tr", {}, heads.map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, peers.peers.map((p) => h("tr", { class: p.last_error ? "peer-error" : "peer-ok" },
        h("td", {}, h("div", { title: p.node_id }, shortId(p.node_id)), h("div", { class: "sub" }, p.url)),
        h("td", {}, `${p.cursor_seq}`, p.remote_head !== null ? ` of ${p.remote_head}` : "",
          p.cursor_epoch && h("div", { class: "sub", title: p.cursor_epoch }, `epoch ${p.cursor_epoch.slice(0, 8)}`)),
        h("td", {}, p.lag_records === null ? "unknown" : `${p.lag_records} records`,
          p.lag_seconds !== null && h("div", { class: "sub" }, `${Math.round(p.lag_seconds)} s behind`)),
        h("td", {}, p.last_ok_at ? `ok ${when(p.last_ok_at)}` : "never",
          p.last_error && h("div", { class: "bad" }, `error: ${p.last_error} (${when(p.last_error_at)})`)),
        h("td", { class: "counters" },
          h("div", {}, `${p.counters.saved} saved`), h("div", {}, `${p.counters.duplicate} duplicate`),
          h("div", { class: p.counters.invalid ? "bad" : null, title: JSON.stringify(p.counters.invalid_reasons) }, `${p.counters.invalid} invalid`),
          h("div", {}, `${p.counters.pending_link} pending link`),
          p.counters.internal > 0 && h("div", { class: "bad", title: "failed in this node's own code: see its log" }, `${p.counters.internal} internal`)),
        h("td", {}, p.reconciliations, p.last_reconcile_at && h("div", { class: "sub" }, when(p.last_reconcile_at))),
        h("td", {}, agreementCell(p.node_id)))))));
  }

  const results = new Map();
  function agreementCell(nodeId) {
    const last = results.get(nodeId);
    const out = h("div", { class: "agreement", "aria-live": "polite" },
      last && h("span", { class: last.ok ? "ok" : "bad" }, last.text));
    const button = h("button", { type: "button", onclick: async () => {
      button.disabled = true;
      out.replaceChildren("checking…");
      try {
        const a = await api(`/dashboard/api/peers/${encodeURIComponent(nodeId)}/agreement`, { method: "POST" });
        results.set(nodeId, {
          ok: a.in_agreement,
          text: a.in_agreement
            ? `in agreement (${when(a.checked_at)})`
            : `differ: this node lacked ${a.missing_here} (fetched ${a.fetched}), the peer lacks ${a.missing_there}`,
        });
        await refresh();
      } catch (err) {
        out.replaceChildren("");
        button.disabled = false;
        showError(err);
      }
    } }, "Check");
    return [button, out];
  }
  await refresh();
  ctx.every(POLL_MS * 2, refresh);
};

// ---- push endpoints ---------------------------------------------------------------------------------------

views.push = async (_args, _params, ctx) => {
  main.append(h("h1", {}, "Push endpoints"));
  main.append(h("p", { class: "hint" }, "The node sends an NLIP hint (metadata only) to these URLs when a notification "
    + "arrives; the inbox stays the record. The admin sees every agent's endpoints."));
  const table = h("div", { class: "scroll", id: "push-table" });
  main.append(table);
  async function refresh() {
    const admin = state.me.role === "admin";
    const r = await api(admin ? "/v1/push/status" : "/v1/push/endpoints");
    if (!ctx.alive()) return;
    if (admin) await ensureNames(r.endpoints.map((e) => e.agent_id));
    if (!r.endpoints.length) return table.replaceChildren(h("p", { class: "empty" }, "No push endpoints (bbs push add URL)."));
    const heads = ["Agent", "URL", "Pushes", "Breaker", "Sent", "Failed", "Last"];
    table.replaceChildren(h("table", { id: "push" },
      h("thead", {}, h("tr", {}, heads.map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, r.endpoints.map((e) => h("tr", { class: e.state.breaker === "closed" ? "peer-ok" : "peer-error" },
        h("td", { title: e.agent_id }, state.names.get(e.agent_id) || shortId(e.agent_id)),
        h("td", {}, e.url),
        h("td", {}, `tier ${e.tiers.join(", ")}`, h("div", { class: "sub" }, e.reasons.length ? e.reasons.join(", ") : "every reason")),
        h("td", { class: e.state.breaker === "closed" ? "ok" : "bad" }, e.state.breaker),
        h("td", {}, `${e.state.messages_sent} messages`, h("div", { class: "sub" }, `${e.state.notifications_pushed} notifications`)),
        h("td", {}, `${e.state.messages_failed} messages`, h("div", { class: "sub" }, `${e.state.attempts_failed} attempts`)),
        h("td", {}, e.state.last_ok_at ? `ok ${when(e.state.last_ok_at)}` : "never",
          e.state.last_error && h("div", { class: "bad" }, `error: ${e.state.last_error} (${when(e.state.last_error_at)})`)))))));
  }
  await refresh();
  ctx.every(POLL_MS * 2, refresh);
};

// ---- the operator's removals (docs/api.md, "Redaction") -------------------------------------------------------

views.purges = async (_args, _params, ctx) => {
  main.append(h("h1", {}, "Purged records"));
  if (state.me.role !== "admin") {
    main.append(h("p", { class: "empty" }, "Purges are shown to the node's admin only: sign in with the admin token."));
    return;
  }
  main.append(h("p", { class: "hint" }, "Records the operator removed from this node alone (bbs purge): never "
    + "federated, refused from every peer from then on. Redacted records keep a tombstone that reads show."));
  const summary = h("div", { id: "purge-summary" });
  const table = h("div", { class: "scroll", id: "purge-table" });
  main.append(summary, table);
  async function refresh() {
    const r = await api("/v1/admin/purges?limit=100");
    if (!ctx.alive()) return;
    await ensureNames(r.purges.map((p) => p.author_id));
    summary.replaceChildren(h("dl", { class: "prov" },
      h("dt", {}, "Purged"), h("dd", { id: "purged-total" }, `${r.total} records of ${r.authors} authors`),
      h("dt", {}, "Redacted"), h("dd", { id: "tombstones" }, `${r.tombstones} tombstones`)));
    if (!r.purges.length) return table.replaceChildren(h("p", { class: "empty" }, "Nothing purged here."));
    const heads = ["Address", "Kind", "Author", "Versions", "Reason", "Purged"];
    table.replaceChildren(h("table", { id: "purges" },
      h("thead", {}, h("tr", {}, heads.map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, r.purges.map((p) => h("tr", {},
        h("td", { class: "hash", title: p.hash }, shortId(p.hash)),
        h("td", {}, p.kind),
        h("td", { title: p.author_id }, state.names.get(p.author_id) || shortId(p.author_id)),
        h("td", {}, p.versions),
        h("td", {}, p.reason || h("span", { class: "sub" }, "none given")),
        h("td", {}, when(p.purged_at)))))));
  }
  await refresh();
  ctx.every(POLL_MS * 2, refresh);
};

// ---- start ------------------------------------------------------------------------------------------------

document.getElementById("signout").addEventListener("click", () => { signOut(""); say("Signed out."); });
window.addEventListener("hashchange", route);
route();
