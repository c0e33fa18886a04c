// stepahead trace viewer: the sessions list (its filters, the window's figures, the
// forecasters' state, and the sessions a page at a time). Loaded before app.js.
"use strict";

// The API's query for the list's filters as applied: the ones its URL names (Apply put
// them there, `filtersInHash`), never text typed in the inputs but not applied yet, so the
// rows, the window's figures, "load more", Live and the download all match what is listed.
// the empty list's words: none match the filters, or (with none applied) none was traced yet
const noSessions = () => (filterQuery().toString() ? "No sessions match." : "No sessions yet.");

function filterQuery() {
  const applied = parseHash(location.hash).params;
  const value = (name) => (applied.get(name) || "").trim();
  // a time as its input shows it (local), in epoch seconds; none for one it cannot show
  const time = (name) => {
    const ms = value(name) ? new Date(value(name)).getTime() : NaN;
    return Number.isFinite(ms) ? ms / 1000 : null;
  };
  const params = new URLSearchParams();
  if (value("agent")) params.set("agent_contains", value("agent"));   // part of a name, as the id
  if (value("tenant") && view.me && view.me.is_admin) params.set("tenant", value("tenant"));
  if (time("since") !== null) params.set("since", String(time("since")));
  if (time("until") !== null) params.set("until", String(time("until")));
  if (applied.get("errors") === "1") params.set("errors", "true");
  if (value("id")) params.set("id_contains", value("id"));
  return params;
}

// One line over the list: the steps that arrived in the filter's window (agent, tenant,
// since, until), from /v1/traces/stats, and when they were asked for ("as of": under Live
// the rows are newer, `refreshFigures`). The id and "errors only" filters do not apply to
// steps: with either set, the line says it counts every session's (so "No sessions
// match." under it is no contradiction). `current()`: whether the list it was asked for
// still shows (false: nothing written).
async function loadWindowStats(current) {
  const params = filterQuery();
  const ignored = params.has("errors") || params.has("id_contains");
  params.delete("errors");
  params.delete("id_contains");   // the window's steps: every session's
  const asked = new Date();
  const stats = await api("/v1/traces/stats?" + params);
  if (!current()) return;
  const t = stats.total;
  $("window-stats").textContent = !t ? "" :
    `Steps in this window${ignored ? " (all sessions)" : ""}: ${t.steps} in ${count(t.sessions, "session")} · ` +
    `${t.prompt_tokens} prompt tokens, ` +
    `${pct(t.cached_tokens, t.prompt_tokens)} cached · TTFT p50 ${fmtMs(t.ttft_p50_s)} ms, ` +
    `p99 ${fmtMs(t.ttft_p99_s)} ms · ${count(t.errors, "error")}` +
    (t.forecasts ? ` · forecasts right ${t.forecast_hits}/${t.forecasts}` : "") +
    ` · as of ${asked.toLocaleTimeString()}`;
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

async function loadForecasters(current) {
  const params = new URLSearchParams();
  const tenant = filterQuery().get("tenant");
  if (tenant) params.set("tenant", tenant);
  params.set("limit", MAX_FORECASTER_LINES);
  const status = await api("/v1/traces/forecasters?" + params);
  if (!current()) return;
  const lines = status.data.map((t) => el("li", {}, forecasterLine(t)));
  const more = (status.num_tenants || 0) - status.data.length;
  if (more > 0) lines.push(el("li", {}, `and ${count(more, "more tenant")}: filter by tenant to see one`));
  $("forecasters").replaceChildren(...lines);
}

// A session's key in `view.sessionsShown`: its tenant and id.
const sessionKey = (s) => JSON.stringify([s.tenant, s.session]);
// A session's place in the list's order (the API's: most recently active first, then
// tenant, then id), and whether place `a` comes after place `b` in it. (JavaScript orders
// strings by UTF-16 units, SQLite by UTF-8 bytes: they differ only between characters
// past U+FFFF and U+E000-U+FFFF, and only for two sessions last active at the same instant.)
const sortKey = (s) => [s.last_s, s.tenant, s.session];
const comesAfter = (a, b) => a[0] !== b[0] ? a[0] < b[0] : a[1] !== b[1] ? a[1] > b[1] : a[2] > b[2];

// A session's row; `id`, the filter's id text (a session found by a request id, text its
// id does not hold in any case, opens on that request's step). The row keeps the
// session's key and place (`data-key`, `data-place`) for Live's merge (`mergeSessions`);
// the session is kept by its key (`view.sessionsByKey`) for the column sort (list_sort.js).
function sessionRow(s, id) {
  view.sessionsByKey.set(sessionKey(s), s);
  const requestId = id && !s.session.toLowerCase().includes(id.toLowerCase()) ? id : "";
  const pastable = pastableId(s.session);   // its escapes marked (dom.js); the id to paste in the tooltip
  const link = el("a", { href: sessionHash(s.tenant, s.session, requestId),
    ...(pastable === null ? {} : { title: "id to paste (stepahead traces show, a link): " + pastable }) }, s.session);
  return el("tr", { class: s.num_errors ? "error" : "", "data-key": sessionKey(s), "data-place": JSON.stringify(sortKey(s)) },
    el("td", { class: "text id" }, link), el("td", { class: "text id admin-only" }, s.tenant),
    el("td", { class: "text id" }, s.agent || "—"), el("td", { class: "text" }, fmtTime(s.last_s)),
    el("td", {}, fmtS(s.duration_s)), el("td", {}, s.num_steps), el("td", {}, s.num_tool_runs),
    el("td", {}, s.num_input_tokens), el("td", {}, s.num_cached_tokens),
    el("td", {}, pct(s.num_cached_tokens, s.num_input_tokens)),
    el("td", {}, s.num_output_tokens), el("td", {}, s.num_errors),
    el("td", { title: forecastsNote(s) }, s.num_forecasts ? `${s.num_forecast_hits}/${s.num_forecasts}` : "—"),
    el("td", { class: "text" }, stateOf(s)));
}

// `count`: how many to ask for (one page of the API's at most). False when the user
// went elsewhere before the page came (nothing shown). The list's order moves (most
// recently active first), so a page after the first is the rows after the last one
// listed (the API's `before` cursor, its `next_before`, kept with its place as the
// body's `data-before`), not an offset: a session that arrives or is active again
// meanwhile moves above them, and neither repeats a row nor pushes one past the list
// unseen (it shows at the next reload or Live refresh). No session is listed twice
// (`view.sessionsShown`) whatever the store does meanwhile. A page after the first is
// asked for in turn with Live (app.js `inTurn`); the lines over the list are the caller's
// (`loadListFigures`).
async function loadSessions(append, count = SESSIONS_PAGE) {
  const ticket = view.route;
  const params = filterQuery();
  if (append) params.set("before", view.sessionsBefore);
  params.set("limit", String(Math.min(count, MAX_PAGE)));
  const page = await api("/v1/traces/sessions?" + params);
  if (ticket !== view.route) return false;
  const id = params.get("id_contains") || "";
  const rows = [];
  if (!append) { view.sessionsShown = new Set(); view.sessionsByKey = new Map(); }
  for (const s of page.data) {
    if (view.sessionsShown.has(sessionKey(s))) continue;
    view.sessionsShown.add(sessionKey(s));
    rows.push(sessionRow(s, id));
  }
  const body = $("sessions").tBodies[0];
  if (append) body.append(...rows); else body.replaceChildren(...rows);   // replaced whole: no flicker
  if (!append) delete body.dataset.before;
  view.sessionsLoaded = (append ? view.sessionsLoaded : 0) + page.data.length;
  if (page.data.length) {
    view.sessionsBefore = page.next_before;
    body.dataset.before = JSON.stringify(sortKey(page.data[page.data.length - 1]));
  }
  view.sessionsRows = (append ? view.sessionsRows : 0) + Math.min(count, MAX_PAGE);
  $("more-sessions").hidden = !page.has_more;
  sortRows();   // after "load more" is shown or hidden: the sort's note says whether it adds more
  setStatus(view.sessionsLoaded ? "" : noSessions());
  if (!append) setLive();
  return true;
}

// The lines over the list (the window's figures, the forecasters), asked for again; done
// (never failed: a line that did not come is left empty) once both came, and held in
// `view.figures` until then. Lines that come after the user went elsewhere (another
// filter applied, the list reloaded) are not shown: they are the last list's.
function loadListFigures() {
  const ticket = view.route;
  const current = () => ticket === view.route;
  const figures = Promise.all([
    loadWindowStats(current).catch(() => { if (current()) $("window-stats").textContent = ""; }),
    loadForecasters(current).catch(() => { if (current()) $("forecasters").replaceChildren(); }),
  ]).finally(() => { if (view.figures === figures) view.figures = null; });
  view.figures = figures;
  return figures;
}

// Live's refresh of the lines over the list: every LIVE_FIGURES_INTERVAL_MS, not with
// the rows (app.js `setLive`), as the window's figures cost the gateway a walk over every
// step in the window (the whole store with no "since"); none while the last ones are
// still on their way (`view.figures`, whoever asked) or the tab is hidden. Loading the
// list (its URL, a filter applied) asks for them at once (`showSessions`).
function refreshFigures() {
  if (document.hidden || view.figures) return;
  loadListFigures();
}

// The list as its URL names it: its filters, and as many rows as were loaded (a page of
// the API's at a time, in turn with Live and "load more"), scrolled where it was left
// (`history.state`, saved when a session was opened from it).
async function showSessions(params, ticket) {
  showFilters(params);
  $("sessions-view").hidden = false;
  $("brand").href = location.hash || "#/";   // back to the list as it is
  const wanted = Math.min(Math.max(parseInt(params.get("rows"), 10) || SESSIONS_PAGE, SESSIONS_PAGE),
                          MAX_RESTORED_ROWS);
  loadListFigures();
  await loadSessions(false, wanted);
  while (ticket === view.route && view.sessionsRows < wanted && !$("more-sessions").hidden) {
    await inTurn(() => ticket === view.route ? loadSessions(true, wanted - view.sessionsRows) : Promise.resolve());
  }
  const scrollY = history.state && history.state.listScrollY;
  if (ticket === view.route && scrollY) window.scrollTo(0, scrollY);
  // back from a session opened here: the keyboard's focus on its link again (`listFocus`)
  const key = history.state && history.state.listFocus;
  const row = ticket === view.route && key && [...$("sessions").tBodies[0].rows].find((r) => r.dataset.key === key);
  if (row) row.querySelector("a").focus({ preventScroll: true });
}

// Live: the list again, every page loaded kept. The sessions new or active again since
// the rows were listed are the most recently active, so the API's first pages hold them:
// those are asked for down to a listed session that has not moved (its place the same),
// or past the last row listed (`data-before`, where "load more" goes on). What they cover
// is shown as they say (new and active-again sessions on top, figures and states
// updated, a deleted session gone); the rows listed below that keep their place and the
// figures they were loaded with until they are active again (or the list is reloaded: a
// session deleted down there goes then).
// A session after the last row listed is left to "load more" (shown when hidden), which
// never runs meanwhile (app.js `inTurn`). The lines over the list are Live's too, far
// less often and on their own turn (`refreshFigures`).
async function refreshList() {
  if (document.hidden) return;
  await refreshRows();
}

// The rows of `refreshList`.
async function refreshRows() {
  const body = $("sessions").tBodies[0];
  if (!body.dataset.before) { await loadSessions(false); return; }   // nothing listed yet
  const ticket = view.route;
  const params = filterQuery();
  params.set("limit", String(SESSIONS_PAGE));
  const fresh = [];
  for (;;) {
    const page = await api("/v1/traces/sessions?" + params);
    if (ticket !== view.route) return;
    fresh.push(...page.data);
    const last = page.data[page.data.length - 1];
    const end = !page.has_more || !last || comesAfter(sortKey(last), JSON.parse(body.dataset.before)) ||
      placeListed(body, last) === JSON.stringify(sortKey(last));
    if (end) { mergeSessions(fresh, page.has_more, params.get("id_contains") || ""); return; }
    params.set("before", page.next_before);
  }
}

// The place a listed session was listed at (its row's `data-place`), or undefined.
function placeListed(body, s) {
  const row = [...body.rows].find((r) => r.dataset.key === sessionKey(s));
  return row && row.dataset.place;
}

// `fresh`: the list's first rows as the API has them now, in order; `more`: whether rows
// follow them. See `refreshList`.
function mergeSessions(fresh, more, id) {
  const body = $("sessions").tBodies[0];
  const before = JSON.parse(body.dataset.before);
  const covered = fresh.length ? sortKey(fresh[fresh.length - 1]) : null;   // down to here, `fresh` is whole
  const freshKeys = new Set(fresh.map(sessionKey));
  const top = fresh.filter((s) => !comesAfter(sortKey(s), before));
  const below = !more ? [] : [...body.rows].filter((row) =>
    !freshKeys.has(row.dataset.key) && (!covered || comesAfter(JSON.parse(row.dataset.place), covered)));
  if (fresh.some((s) => comesAfter(sortKey(s), before) && !view.sessionsShown.has(sessionKey(s)))) {
    $("more-sessions").hidden = false;   // a session after the last row listed: "load more" shows it
  } else if (!more) {
    $("more-sessions").hidden = true;   // the whole list came, and nothing after the last row (QA116)
  }
  // the rows kept stay where they are (the browser keeps the part scrolled to in view)
  const kept = new Set(below);
  const focus = focusInList(body);
  for (const row of [...body.rows]) if (!kept.has(row)) row.remove();
  body.prepend(...top.map((s) => sessionRow(s, id)));
  sortRows();
  focus.restore();
  view.sessionsShown = new Set([...body.rows].map((row) => row.dataset.key));
  setStatus(body.rows.length ? "" : noSessions());
}

// The keyboard's focus in the list's rows (a session's link), to give back after Live
// rebuilt or moved its row (either blurs it: the next Tab would start at the top again):
// `restore` focuses the same element, or the link of the row with its key now, unscrolled.
function focusInList(body) {
  const focused = document.activeElement;
  const row = focused && focused !== body && body.contains(focused) ? focused.closest("tr") : null;
  const key = row && row.dataset.key;
  return {
    restore() {
      if (!key || document.activeElement === focused) return;
      const again = body.contains(focused) ? null : [...body.rows].find((r) => r.dataset.key === key);
      const target = again ? again.querySelector("a") : body.contains(focused) ? focused : null;
      if (target) target.focus({ preventScroll: true });
    },
  };
}
