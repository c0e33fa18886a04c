// stepahead trace viewer: sessions of the caller's tenant, and one session's timeline.
// Data only ever comes from /v1/traces/... with the key the user typed (kept in
// sessionStorage for this tab). Everything is written with textContent / SVG nodes,
// never innerHTML, so trace content cannot inject markup, and every text written shows
// control and bidi characters escaped (`visible`), so it cannot hide or reorder what is
// around it. Nothing is cut short: lists page with "load more", content loads whole on
// request. Where the page is lives in its URL's hash (`parseHash`): Back, reload and a
// shared link open the same list (filters, rows loaded) or session (and outlined step).
"use strict";

const KEY_STORAGE = "stepahead.key";

const LIVE_INTERVAL_MS = 2000;
const STEPS_PAGE = 200;
const SESSIONS_PAGE = 50;
const MAX_PAGE = 500;            // the API's largest page
const MAX_RESTORED_ROWS = 5000;  // what a list URL's `rows` may ask for
// `steps`: the session's steps at offsets [stepsStart, stepsEnd) of its index order, one
// run without holes ("load earlier" and "load more" widen it); `requestId`: the request
// id the session's URL names (the filter it was found by), whose step is outlined;
// `openContent`: the steps whose messages are shown, kept open when live steps re-render;
// `sessionsRows`: the list rows asked for so far (its URL's `rows`); `sessionsShown`: the
// keys (`sessionKey`) of the sessions listed; `route`: counts
// routes, so a load that ends after the user went elsewhere shows nothing
const view = { me: null, sessionsOffset: 0, sessionsRows: 0, sessionsShown: new Set(), steps: [], stepsStart: 0, stepsEnd: 0,
               session: null, requestId: "", openContent: new Set(), liveTimer: null, route: 0 };

function setStatus(text) { $("status").textContent = visible(text || ""); }

function apiKey() { return sessionStorage.getItem(KEY_STORAGE) || ""; }

async function api(path) {
  const response = await fetch(path, { headers: { Authorization: "Bearer " + apiKey() } });
  if (!response.ok) {
    let message = response.statusText;
    try {
      const body = await response.json();
      const detail = body.detail && (body.detail.message || body.detail);
      message = (body.error && body.error.message) || detail || message;
    } catch (_) { /* not JSON */ }
    const error = new Error(message);
    error.status = response.status;
    throw error;
  }
  return response.json();
}

const choiceAsked = (choice) =>
  choice.tool_calls.length ? choice.tool_calls.map((c) => c.name).join(", ") : "text answer";
// With several choices (n > 1) each is listed with its number: "#0 get_weather · #1 text answer".
const askedFor = (step) => {
  if (step.error) return "error";
  const choices = [step, ...(step.other_choices || [])];
  return choices.length === 1 ? choiceAsked(step) : choices.map((c, i) => `#${i} ${choiceAsked(c)}`).join(" · ");
};

// "open", or "ended (why)" (idle, evicted, shutdown…), as `stepahead traces` writes it.
const stateOf = (session) => session.is_open ? "open" : session.end_reason ? `ended (${session.end_reason})` : "ended";

// A session's API path: its id as one encoded segment (`/` as %2F), whatever it holds
// (`/`, `%`, `?`, `#`, spaces, unicode); the server splits only at literal slashes.
function sessionPath(session, resource) {
  return "/v1/traces/sessions/" + encodeURIComponent(session) + (resource ? "/" + resource : "");
}

// `requestId`: the request whose step the session opens on, outlined (`?request=`)
function sessionHash(tenant, session, requestId) {
  return "#/session/" + encodeURIComponent(tenant) + "/" + encodeURIComponent(session) +
    (requestId ? "?" + new URLSearchParams({ request: requestId }) : "");
}

// The list's filters as its URL's hash keeps them (the inputs' values), and back.
const LIST_FIELDS = { id: "f-id", agent: "f-agent", tenant: "f-tenant", since: "f-since", until: "f-until" };

function listHash(params) {
  const query = params.toString();
  return "#/" + (query ? "?" + query : "");
}

function filtersInHash() {
  const params = new URLSearchParams();
  for (const [name, input] of Object.entries(LIST_FIELDS)) {
    const value = $(input).value.trim();
    if (value) params.set(name, value);
  }
  if ($("f-errors").checked) params.set("errors", "1");
  return params;
}

function showFilters(params) {
  for (const [name, input] of Object.entries(LIST_FIELDS)) $(input).value = params.get(name) || "";
  $("f-errors").checked = params.get("errors") === "1";
}

// Where the page is, from its URL's hash: a session, `#/session/TENANT/SESSION`, each
// part percent-encoded (so a `?` there starts the query: `request`, the request id whose
// step is outlined), or the list, `#/?FILTERS` (`filtersInHash`, and `rows`, how many
// rows were loaded). Hashes without a query (every link before filters were kept) mean
// what they did. A session part that is not valid percent-encoding (a link cut short or
// edited by hand) throws an error that says so.
function parseHash(hash) {
  const cut = hash.indexOf("?");
  const path = cut < 0 ? hash : hash.slice(0, cut);
  const params = new URLSearchParams(cut < 0 ? "" : hash.slice(cut + 1));
  const match = path.match(/^#\/session\/([^/]*)\/(.+)$/);
  if (!match) return { params };
  try {
    return { tenant: decodeURIComponent(match[1]), session: decodeURIComponent(match[2]), params };
  } catch (_) {
    throw new Error("This link's session address is damaged (its %-encoding is cut short or " +
      `invalid: ${path.slice(2)}). Open the session from the list, or copy its link again.`);
  }
}

// The list's URL now names the rows loaded too (no new history entry: Back still leaves the list).
function rememberRows() {
  const { session, params } = parseHash(location.hash);
  if (session !== undefined) return;
  if (view.sessionsRows > SESSIONS_PAGE) params.set("rows", String(view.sessionsRows)); else params.delete("rows");
  history.replaceState(history.state, "", listHash(params));
  $("brand").href = location.hash;
}

// Go to `hash`; where the page is there already (filters applied again), load it again.
function go(hash) {
  const before = location.hash;
  location.hash = hash;
  if (location.hash === before) route();
}

// --- sessions list -------------------------------------------------------------------
function filterQuery() {
  const params = new URLSearchParams();
  const agent = $("f-agent").value.trim();
  if (agent) params.set("agent", agent);
  const tenant = $("f-tenant").value.trim();
  if (tenant && view.me && view.me.is_admin) params.set("tenant", tenant);
  if ($("f-since").value) params.set("since", String(new Date($("f-since").value).getTime() / 1000));
  if ($("f-until").value) params.set("until", String(new Date($("f-until").value).getTime() / 1000));
  if ($("f-errors").checked) params.set("errors", "true");
  const id = $("f-id").value.trim();
  if (id) params.set("id_contains", id);
  return params;
}

// One line over the list: the steps that arrived in the filter's window (agent, tenant,
// since, until; "errors only" does not apply to steps), from /v1/traces/stats.
async function loadWindowStats() {
  const params = filterQuery();
  params.delete("errors");
  params.delete("id_contains");   // the window's steps: every session's
  const stats = await api("/v1/traces/stats?" + params);
  const t = stats.total;
  $("window-stats").textContent = !t ? "" :
    `Steps in this window: ${t.steps} in ${t.sessions} sessions · ${t.prompt_tokens} prompt tokens, ` +
    `${pct(t.cached_tokens, t.prompt_tokens)} cached · TTFT p50 ${fmtMs(t.ttft_p50_s)} ms, ` +
    `p99 ${fmtMs(t.ttft_p99_s)} ms · ${t.errors} errors` +
    (t.forecasts ? ` · forecasts right ${t.forecast_hits}/${t.forecasts}` : "");
}

// Where a tenant's forecasts stand: its step model (fitted or not yet, how its recent
// forecasts did) and its return gaps, from /v1/traces/forecasters.
function forecasterLine(t) {
  const m = t.step_model, g = t.return_gaps, fit = m.fit;
  const model = !m.fitted
    ? `step model not fitted yet: ${m.sessions_learned} of ${m.sessions_to_fit} sessions finished`
    : `step model fitted on ${fit ? fit.sessions : m.sessions_learned} sessions` +
      (fit ? ` (${fit.states} states` + (fit.val_top1 != null ? `, validation top-1 ${fit.val_top1.toFixed(2)}` : "") + ")" : "");
  const recent = m.recent_top1 != null ? `, recent top-1 ${m.recent_top1.toFixed(2)}` : "";
  const gaps = g.confident ? `return gaps confident (${g.resolved_waits} waits resolved)`
    : `return gaps learning: ${g.resolved_waits} of ${g.waits_to_confident} waits resolved`;
  return `Forecasts for ${t.tenant}: ${model}${recent} · ${gaps}`;
}

const MAX_FORECASTER_LINES = 20;

async function loadForecasters() {
  const params = new URLSearchParams();
  const tenant = $("f-tenant").value.trim();
  if (tenant && view.me && view.me.is_admin) params.set("tenant", tenant);
  params.set("limit", MAX_FORECASTER_LINES);
  const status = await api("/v1/traces/forecasters?" + params);
  const lines = status.data.map((t) => el("li", {}, forecasterLine(t)));
  const more = (status.num_tenants || 0) - status.data.length;
  if (more > 0) lines.push(el("li", {}, `and ${more} more tenants: filter by tenant to see one`));
  $("forecasters").replaceChildren(...lines);
}

// A session's key in `view.sessionsShown`: its tenant and id.
const sessionKey = (s) => JSON.stringify([s.tenant, s.session]);

// `count`: how many to ask for (one page of the API's at most). False when the user
// went elsewhere before the page came (nothing shown). The API pages by offset over an
// order that moves (most recently active first): sessions that arrived since the last
// page push rows already shown into the next one, so a page adds only the sessions not
// shown yet (`view.sessionsShown`), and no session is listed twice.
async function loadSessions(append, count = SESSIONS_PAGE) {
  const ticket = view.route;
  if (!append) {
    loadWindowStats().catch(() => { $("window-stats").textContent = ""; });
    loadForecasters().catch(() => { $("forecasters").replaceChildren(); });
  }
  const offset = append ? view.sessionsOffset : 0;
  const params = filterQuery();
  params.set("offset", String(offset));
  params.set("limit", String(Math.min(count, MAX_PAGE)));
  const page = await api("/v1/traces/sessions?" + params);
  if (ticket !== view.route) return false;
  // a session found by a request id (text its id does not hold) opens on that request's step
  const id = params.get("id_contains") || "";
  const rows = [];
  if (!append) view.sessionsShown = new Set();
  for (const s of page.data) {
    if (view.sessionsShown.has(sessionKey(s))) continue;
    view.sessionsShown.add(sessionKey(s));
    const requestId = id && !s.session.includes(id) ? id : "";
    const link = el("a", { href: sessionHash(s.tenant, s.session, requestId) }, s.session);
    rows.push(el("tr", { class: s.num_errors ? "error" : "" },
      el("td", { class: "text" }, link), el("td", { class: "text admin-only" }, s.tenant),
      el("td", { class: "text" }, s.agent || "—"), el("td", { class: "text" }, fmtTime(s.last_s)),
      el("td", {}, fmtS(s.duration_s)), el("td", {}, s.num_steps), el("td", {}, s.num_tool_runs),
      el("td", {}, s.num_input_tokens), el("td", {}, s.num_cached_tokens),
      el("td", {}, pct(s.num_cached_tokens, s.num_input_tokens)),
      el("td", {}, s.num_output_tokens), el("td", {}, s.num_errors),
      el("td", { title: forecastsNote(s) }, s.num_forecasts ? `${s.num_forecast_hits}/${s.num_forecasts}` : "—"),
      el("td", { class: "text" }, stateOf(s))));
  }
  const body = $("sessions").tBodies[0];
  if (append) body.append(...rows); else body.replaceChildren(...rows);   // replaced whole: no flicker
  view.sessionsOffset = offset + page.data.length;
  view.sessionsRows = (append ? view.sessionsRows : 0) + Math.min(count, MAX_PAGE);
  $("more-sessions").hidden = !page.has_more;
  setStatus(view.sessionsOffset ? "" : "No sessions match.");
  if (!append) setLive();
  return true;
}

// The list as its URL names it: its filters, and as many rows as were loaded (a page of
// the API's at a time), scrolled where it was left (`history.state`, saved when a
// session was opened from it).
async function showSessions(params, ticket) {
  showFilters(params);
  $("sessions-view").hidden = false;
  $("brand").href = location.hash || "#/";   // back to the list as it is
  const wanted = Math.min(Math.max(parseInt(params.get("rows"), 10) || SESSIONS_PAGE, SESSIONS_PAGE),
                          MAX_RESTORED_ROWS);
  await loadSessions(false, wanted);
  while (ticket === view.route && view.sessionsRows < wanted && !$("more-sessions").hidden) {
    await loadSessions(true, wanted - view.sessionsRows);
  }
  const scrollY = history.state && history.state.listScrollY;
  if (ticket === view.route && scrollY) window.scrollTo(0, scrollY);
}

// --- one session ---------------------------------------------------------------------
function contentRow(step, columns) {
  const cell = el("td", { colspan: String(columns), class: "text" }, "loading…");
  const row = el("tr", { class: "content-row" }, cell);
  const query = "?tenant=" + encodeURIComponent(view.session.tenant);
  api(sessionPath(view.session.session, `steps/${step.index}/content`) + query)
    .then((c) => {
      const pre = el("pre", { class: "content" });
      pre.textContent = jsonVisible(JSON.stringify(c, null, 2));   // its own lines: not through `visible`
      cell.replaceChildren(pre);
    })
    .catch((e) => { cell.textContent = visible("Could not load content: " + e.message); });
  return row;
}

const notConfident = "This forecast was not confident (the tenant's model cold or recently inaccurate, and " +
  "too few of its waits seen yet): the cache treated the session as plain LRU.";

// How many of a session's forecasts were confident (the only ones the cache acted on),
// and how many of those were right.
function forecastsNote(s) {
  if (!s.num_forecasts) return "";
  if (!s.num_confident_forecasts) return "none made confident";
  return `${s.num_confident_forecast_hits}/${s.num_confident_forecasts} of those made confident`;
}

// Tokens the previous step's prompt shared with this one that were not cached (0: none
// lost); the server counts them (`evicted_prefix_tokens`, one rule for every view).
const lostPrefix = (s) => s.evicted_prefix_tokens || 0;

function renderSteps(steps) {
  const body = $("steps").tBodies[0];
  body.replaceChildren();
  for (const s of steps) {
    const f = s.forecast;
    const button = s.has_content ? el("button", { class: "show-content" }, "show")
      : el("span", { title: "messages are kept only with capture_content on: stepahead serve " +
        "--capture-content, or [tracing] capture_content = true" }, "not captured");
    // the step the filter named by its request id (a reply's x-request-id) is marked
    const found = s.response_id && s.response_id === view.requestId;
    const row = el("tr", { class: (s.error ? "error step-row" : "step-row") + (found ? " found" : ""),
      "data-step": s.index },
      el("td", s.response_id ? { title: "request " + s.response_id } : {}, s.index),
      el("td", { class: "tools" }, s.after_label), el("td", {}, fmtS(s.gap_s)),
      el("td", {}, s.num_input_tokens), el("td", {}, s.prefix_from_previous_tokens ?? "—"),
      el("td", lostPrefix(s) ? { class: "miss", title: `${lostPrefix(s)} tokens the previous step left were ` +
        "no longer cached (evicted while the session was away)" } : {}, s.num_cached_tokens),
      el("td", {}, pct(s.num_cached_tokens, s.num_input_tokens)), el("td", {}, fmtMs(s.ttft_s)),
      el("td", {}, s.num_output_tokens), el("td", { class: "text" }, s.model),
      el("td", { class: "text", title: s.service_tier === "flex" ? "served in the flex tier, after other requests" : "" },
        (s.worker || "—") + (s.service_tier === "flex" ? " · flex" : "")),
      el("td", { class: "tools" }, askedFor(s)),
      el("td", { class: "text", title: f && !f.is_confident ? notConfident : "" },
        f ? `${f.predicted} (${percent(f.p_predicted)})` + (f.is_confident ? "" : " · not confident") : "—"),
      el("td", { class: f ? (f.is_hit ? "text hit" : "text miss") : "text" },
        f ? `${f.actual} ${f.is_hit ? "✓" : "✗"}` : "—"),
      el("td", {}, f && f.eta_p50_s !== null ? `${fmtS(f.eta_p50_s)} (was ${fmtS(s.gap_s)})` : "—"),
      el("td", { class: "tools" }, s.error ? (s.error_message ? `${s.error}: ${s.error_message}` : s.error) : ""),
      el("td", { class: "text" }, button));
    body.append(row);
    if (s.has_content) {
      let shown = null;
      const open = () => { shown = contentRow(s, row.children.length); row.after(shown); button.textContent = "hide"; };
      button.addEventListener("click", () => {
        if (!shown) { open(); view.openContent.add(s.index); return; }
        shown.remove(); shown = null; button.textContent = "show";
        view.openContent.delete(s.index);
      });
      if (view.openContent.has(s.index)) open();
    }
  }
}

function renderSession() {
  const s = view.session;
  $("session-title").textContent = visible(`Session ${s.session}` + (view.me.is_admin ? ` (tenant ${s.tenant})` : ""));
  $("session-summary").textContent = visible(`agent ${s.agent || "—"} · ${count(s.num_steps, "step")} · ` +
    `${count(s.num_tool_runs, "tool run")} · ${s.num_input_tokens} prompt tokens (${s.num_cached_tokens} cached, ` +
    `${pct(s.num_cached_tokens, s.num_input_tokens)}) · ${s.num_output_tokens} output tokens · ` +
    `${count(s.num_errors, "error")} · started ${fmtTime(s.started_s)} · ${stateOf(s)}` +
    (s.num_forecasts ? ` · forecasts right ${s.num_forecast_hits}/${s.num_forecasts} (${forecastsNote(s)})` : ""));
  $("export-link").onclick = (event) => { event.preventDefault(); downloadExport(); };
  renderGantt(view.steps);
  renderContextChart(view.steps);
  renderSteps(view.steps);
}

async function downloadFile(path, name) {
  const response = await fetch(path, { headers: { Authorization: "Bearer " + apiKey() } });
  if (!response.ok) { setStatus("Export failed: " + response.status); return; }
  const url = URL.createObjectURL(await response.blob());
  const link = el("a", { href: url, download: name });
  link.click();
  URL.revokeObjectURL(url);
}

function downloadExport() {
  const path = sessionPath(view.session.session, "export") + "?tenant=" + encodeURIComponent(view.session.tenant);
  return downloadFile(path, visible(view.session.session) + ".jsonl");   // no name that reads backwards
}

// Which of the session's steps are shown, when not all of them: by the numbers their rows
// (# column) and the timeline show.
function renderStepsShown() {
  const total = view.session.num_steps, shown = view.steps;
  const whole = view.stepsStart === 0 && view.stepsEnd >= total;
  $("steps-shown").textContent = whole || !shown.length ? "" :
    `Showing steps #${shown[0].index} to #${shown[shown.length - 1].index} (${shown.length} of ${total}, in index order).`;
  $("earlier-steps").hidden = view.stepsStart === 0;
}

function stepsQuery(tenant, offset, limit) {
  const query = new URLSearchParams({ offset: String(offset), limit: String(limit) });
  if (view.me.is_admin) query.set("tenant", tenant);
  return query;
}

// `how`: "open" (the first page, or the page holding the step of `requestId`, wherever
// it lies: the API finds it, so a step 9,000 steps in costs one page, and the page
// scrolls to it), "reload" (the same, for the request id it opened with, without
// scrolling), "more" (the page after those shown) or "earlier" (the page before them).
// The session view shows only once its session has loaded, and nothing is shown when the
// user went elsewhere meanwhile; a load that succeeds clears the status line (a Live
// refresh's error included).
async function loadSession(tenant, session, how, requestId = "") {
  const ticket = view.route;
  if (how === "open") {
    const same = view.session && view.session.tenant === tenant && view.session.session === session;
    if (!same) view.openContent = new Set();
    view.requestId = requestId;
  }
  const start = how === "earlier" ? Math.max(0, view.stepsStart - STEPS_PAGE) : how === "more" ? view.stepsEnd : 0;
  const query = stepsQuery(tenant, start, how === "earlier" ? view.stepsStart - start : STEPS_PAGE);
  const fresh = how === "open" || how === "reload";
  if (fresh && view.requestId) query.set("request_id", view.requestId);   // its page, not the first
  const detail = await api(sessionPath(session) + "?" + query);
  if (ticket !== view.route) return;
  const page = detail.steps.data;
  view.session = detail.session;
  if (how === "more") {
    view.steps = view.steps.concat(page);
    view.stepsEnd += page.length;
  } else if (how === "earlier") {
    view.steps = page.concat(view.steps);
    view.stepsStart = start;
  } else {
    view.steps = page;
    view.stepsStart = detail.steps.offset;   // the page the API chose
    view.stepsEnd = view.stepsStart + page.length;
  }
  if (how !== "earlier") $("more-steps").hidden = !detail.steps.has_more;
  $("session-view").hidden = false;
  renderSession();
  renderStepsShown();
  if (how === "open" && detail.request_step) {
    const row = $("steps").querySelector("tr.step-row.found");
    if (row) row.scrollIntoView({ block: "center" });
  }
  $("live-label").hidden = !view.session.is_open;
  if (!view.session.is_open) $("live").checked = false;
  setStatus("");
  setLive();
}

// Live: while a view's box is ticked and the tab visible, ask every LIVE_INTERVAL_MS.
// A session (while open): the steps after those shown; a step that arrived out of order
// (a session's concurrent calls) or a session that ended reloads it (its first page, or
// the one holding the outlined step). The list: its first page again (not once "load
// more" has shown more).
function setLive() {
  if (view.liveTimer) { clearInterval(view.liveTimer); view.liveTimer = null; }
  if ($("live").checked && view.session && view.session.is_open && !$("session-view").hidden) {
    view.liveTimer = setInterval(() => refreshLive().catch((e) => setStatus(e.message)), LIVE_INTERVAL_MS);
  } else if ($("f-live").checked && !$("sessions-view").hidden) {
    view.liveTimer = setInterval(() => refreshList().catch((e) => setStatus(e.message)), LIVE_INTERVAL_MS);
  }
}

async function refreshList() {
  if (document.hidden || view.sessionsOffset > SESSIONS_PAGE) return;
  await loadSessions(false);
}

// A refresh that succeeds clears the status line: an error a refresh showed (the session
// deleted, the gateway restarting) is over.
async function refreshLive() {
  if (document.hidden || $("more-steps").hidden === false) return;   // the last steps shown first
  const s = view.session, ticket = view.route;
  const detail = await api(sessionPath(s.session) + "?" + stepsQuery(s.tenant, view.stepsEnd, STEPS_PAGE));
  if (ticket !== view.route) return;
  setStatus("");
  const added = detail.steps.data;
  if (detail.session.num_steps === view.stepsEnd + added.length && detail.session.is_open) {
    if (!added.length) return;
    view.session = detail.session;
    view.steps = view.steps.concat(added);
    view.stepsEnd += added.length;
    renderSession();
    renderStepsShown();
    return;
  }
  await loadSession(s.tenant, s.session, "reload");
}
// --- routing -------------------------------------------------------------------------
// Show what the URL's hash names (`parseHash`). A view shows only what loaded for it: on
// a failure, the status says why and neither the last session nor the last list's rows
// stay on screen under the new URL.
async function route() {
  const ticket = ++view.route;
  $("sessions-view").hidden = true;
  $("session-view").hidden = true;
  setLive();   // off while another view shows
  if (!apiKey()) { setStatus("Enter an API key to see your agent sessions."); return; }
  try {
    if (!view.me) {
      view.me = await api("/v1/traces/me");
      $("who").textContent = visible(`tenant ${view.me.tenant}` + (view.me.is_admin ? " (admin: all tenants)" : ""));
      document.body.classList.toggle("admin", view.me.is_admin);
      $("f-tenant-label").hidden = !view.me.is_admin;
    }
    const where = parseHash(location.hash);
    setStatus("loading…");
    if (where.session !== undefined) {
      await loadSession(where.tenant, where.session, "open", where.params.get("request") || "");
    } else {
      await showSessions(where.params, ticket);
    }
  } catch (error) {
    if (ticket !== view.route) return;   // the user is elsewhere now
    view.session = null;
    $("session-view").hidden = true;
    $("sessions").tBodies[0].replaceChildren();
    $("more-sessions").hidden = true;
    if (error.status === 401) { view.me = null; $("who").textContent = ""; }
    setStatus(error.status === 404 ? "Session not found (or not visible to this key)."
      : error.status ? `Error ${error.status}: ${error.message}` : `Error: ${error.message}`);
  }
}

$("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(KEY_STORAGE, $("api-key").value.trim());
  $("api-key").value = "";
  view.me = null;
  route();
});
$("filters").addEventListener("submit", (event) => { event.preventDefault(); go(listHash(filtersInHash())); });
$("more-sessions").addEventListener("click", () =>
  loadSessions(true).then((shown) => shown && rememberRows()).catch((e) => setStatus(e.message)));
// the list's scroll position, kept in its history entry as a session is opened from it
$("sessions").addEventListener("click", (event) => {
  if (event.target.closest("a")) history.replaceState({ listScrollY: window.scrollY }, "");
});
$("export-all-link").addEventListener("click", (event) => {
  event.preventDefault();
  downloadFile("/v1/traces/export?" + filterQuery(), "sessions.jsonl").catch((e) => setStatus(e.message));
});
$("live").addEventListener("change", setLive);
$("f-live").addEventListener("change", setLive);
$("more-steps").addEventListener("click", () =>
  loadSession(view.session.tenant, view.session.session, "more").catch((e) => setStatus(e.message)));
$("earlier-steps").addEventListener("click", () =>
  loadSession(view.session.tenant, view.session.session, "earlier").catch((e) => setStatus(e.message)));
window.addEventListener("hashchange", route);
route();
