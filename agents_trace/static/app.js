// stepahead trace viewer: sessions of the caller's tenant, and one session's timeline.
// Data only ever comes from /v1/traces/... with the key the user typed (kept in
// sessionStorage for this tab). Everything is written with textContent / SVG nodes,
// never innerHTML, so trace content cannot inject markup, and every text written shows
// control and bidi characters escaped (`visible`), so it cannot hide or reorder what is
// around it. Nothing is cut short: lists page with "load more", content loads whole on
// request. Where the page is lives in its URL's hash (`parseHash`): Back, reload and a
// shared link open the same list (filters, rows loaded) or session (and outlined step).
// This file holds the page's state, its API calls and routing; it is loaded last, after
// dom.js, charts.js, address.js, list.js (the sessions list) and session.js (one session).
"use strict";

const KEY_STORAGE = "stepahead.key";

const LIVE_INTERVAL_MS = 2000;
// Live on a session it found deleted (session.js `showGone`): asked for again this often only
const LIVE_GONE_INTERVAL_MS = 30000;
const SESSION_NOT_FOUND = "Session not found (or not visible to this key).";
// Live's refresh of the lines over the list (list.js `refreshFigures`): its window's
// figures walk every step in the window on the gateway, the whole store by default
const LIVE_FIGURES_INTERVAL_MS = 30000;
const FETCH_TIMEOUT_MS = 30000;  // an API call not answered by then fails (`api`)
const STEPS_PAGE = 200;
const SESSIONS_PAGE = 50;
const MAX_PAGE = 500;            // the API's largest page
const MAX_RESTORED_ROWS = 5000;  // what a list URL's `rows` may ask for
// `steps`: the session's steps at offsets [stepsStart, stepsEnd) of its index order, one
// run without holes ("load earlier" and "load more" widen it); `requestId`: the request
// id the session's URL names (the filter it was found by), whose step is outlined;
// `openContent`: the steps whose messages are shown, kept open when live steps re-render;
// `contents`: those steps' messages as fetched (session.js `contentNode`), never fetched twice;
// `sessionsRows`: the list rows asked for so far (its URL's `rows`); `sessionsLoaded`: the
// rows the API gave; `sessionsBefore`: the cursor of the last of them (the API's
// `next_before`), where "load more" goes on; `sessionsShown`: the keys (`sessionKey`) of
// the sessions listed, `sessionsByKey` those sessions by key (the column sort's values); `route`: counts routes, so a load that ends after the user went
// elsewhere shows nothing; `liveTimer`: the Live timer (`setLive`); `busy`: the Live refresh,
// list "load more" or session "load more"/"load earlier" in flight (`inTurn`), or null;
// `figuresTimer`: the list's Live timer for the lines over it (`setLive`); `figures`: those
// lines on their way (list.js `loadListFigures`), or null; `gone`: Live found the session
// shown deleted (session.js `showGone`): its view hidden, `session` kept only to ask for it again
const view = { me: null, sessionsLoaded: 0, sessionsBefore: null, sessionsRows: 0, sessionsShown: new Set(),
               sessionsByKey: new Map(),
               steps: [], stepsStart: 0, stepsEnd: 0, session: null, requestId: "", openContent: new Set(),
               contents: new Map(), liveTimer: null, busy: null, route: 0, figuresTimer: null, figures: null,
               gone: false };

function setStatus(text) { showVisible($("status"), text || ""); }

function apiKey() { return sessionStorage.getItem(KEY_STORAGE) || ""; }

// The Authorization header for the key typed. A key with a character no header can carry
// (past Latin-1, or a control character: a look-alike letter, a pasted typographic quote)
// is never sent (fetch would throw "String contains non ISO-8859-1 code point"): the error
// says it is an invalid key, in the gateway's words for a wrong one, and `badKey` makes
// `route` forget the key's tenant as it does on a 401.
function authorization() {
  const odd = /[^\t\x20-\x7e\x80-\xff]/u.exec(apiKey());
  if (!odd) return "Bearer " + apiKey();
  const error = new Error(`Invalid API key provided: it holds "${odd[0]}", which no API key has (not sent).`);
  error.badKey = true;
  throw error;
}

// An API call's answer, whole (its body read), or an error: one that has not come in
// FETCH_TIMEOUT_MS (a gateway that hangs) is aborted and fails, so nothing waits on it for
// good (a Live refresh says why and the next tick asks again).
async function api(path) {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), FETCH_TIMEOUT_MS);
  try {
    const response = await fetch(path, { headers: { Authorization: authorization() }, signal: abort.signal });
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
    return await response.json();
  } catch (error) {
    if (!abort.signal.aborted) throw error;
    throw new Error(`the gateway did not answer in ${FETCH_TIMEOUT_MS / 1000} s`);
  } finally {
    clearTimeout(timer);
  }
}

// "open", or "ended (why)" (idle, evicted, shutdown…), as `stepahead traces` writes it.
const stateOf = (session) => session.is_open ? "open" : session.end_reason ? `ended (${session.end_reason})` : "ended";

// How many of a session's forecasts were confident (the only ones the cache acted on),
// and how many of those were right.
function forecastsNote(s) {
  if (!s.num_forecasts) return "";
  if (!s.num_confident_forecasts) return "none made confident";
  return `${s.num_confident_forecast_hits}/${s.num_confident_forecasts} of those made confident`;
}

// The name a `Content-Disposition` gives (`filename*=UTF-8''…` first: the id whole,
// export_filename.py), else null.
function dispositionName(header) {
  const utf8 = /filename\*=UTF-8''([^;\s]+)/i.exec(header || ""), plain = /filename="([^"]*)"/.exec(header || "");
  try { if (utf8) return decodeURIComponent(utf8[1]); } catch (_) { /* not UTF-8: the ASCII name */ }
  return plain ? plain[1] : null;
}

// `path` saved as the gateway names it (else as `name`)
async function downloadFile(path, name) {
  const response = await fetch(path, { headers: { Authorization: authorization() } });
  if (!response.ok) { setStatus("Export failed: " + response.status); return; }
  const url = URL.createObjectURL(await response.blob());
  const link = el("a", { href: url, download: dispositionName(response.headers.get("content-disposition")) || name });
  link.click();
  URL.revokeObjectURL(url);
}

// --- views --------------------------------------------------------------------------
// Live: while a view's box is ticked and the tab visible, ask every LIVE_INTERVAL_MS.
// A session (open or ended: an ended one opens again when its agent goes on under its
// id): see session.js `refreshLive` (before its last page, its
// totals; on it, the steps after those shown). The list: its first pages merged into
// the rows loaded, every page kept (list.js `refreshList`); the lines over the list
// (its window's figures, the forecasters) every LIVE_FIGURES_INTERVAL_MS only, on a timer
// of their own that a list reload keeps (list.js `refreshFigures`: one at a time).
// One Live refresh at a time, whichever view started it, and never beside the list's
// "load more" or a session's "load more"/"load earlier" steps (`inTurn`): a tick while
// the last refresh or such a load is still in flight (`view.busy`: a slow gateway, a big
// session) is skipped, so two never start from the same steps or rows shown (and add the
// same new ones twice), and a slow gateway gets no pile of requests. A call the gateway
// never answers fails after FETCH_TIMEOUT_MS (`api`), so it holds Live up no longer.
// Ticking the box again or changing views starts a new timer, not a second refresh. A
// session Live found deleted (`view.gone`) is asked for every LIVE_GONE_INTERVAL_MS only.
function setLive() {
  if (view.liveTimer) { clearInterval(view.liveTimer); view.liveTimer = null; }
  const listLive = $("f-live").checked && !$("sessions-view").hidden;
  if ($("live").checked && view.session && (view.gone || !$("session-view").hidden)) {
    view.liveTimer = setInterval(() => liveTick(refreshLive), view.gone ? LIVE_GONE_INTERVAL_MS : LIVE_INTERVAL_MS);
  } else if (listLive) {
    view.liveTimer = setInterval(() => liveTick(refreshList), LIVE_INTERVAL_MS);
  }
  if (listLive && !view.figuresTimer) {
    view.figuresTimer = setInterval(refreshFigures, LIVE_FIGURES_INTERVAL_MS);
  } else if (!listLive && view.figuresTimer) {
    clearInterval(view.figuresTimer);
    view.figuresTimer = null;
  }
}

// One tick of the Live timer: `refresh` unless the last one (or a "load more") is still in flight.
function liveTick(refresh) {
  if (view.busy) return;
  inTurn(refresh).catch((e) => setStatus(e.message));
}

// `work()`'s result, run once no Live refresh or "load more"/"load earlier" is in flight
// (`view.busy`), and holding the turn until it ends: Live's ticks meanwhile are skipped,
// a "load more" or "load earlier" meanwhile waits for its turn.
async function inTurn(work) {
  while (view.busy) await view.busy.catch(() => {});
  const running = work();
  view.busy = running;
  try {
    return await running;
  } finally {
    if (view.busy === running) view.busy = null;
  }
}

// --- routing -------------------------------------------------------------------------
// Show what the URL's hash names (`parseHash`). A view shows only what loaded for it: on
// a failure, the status says why and neither the last session nor the last list's rows
// stay on screen under the new URL.
async function route() {
  const ticket = ++view.route;
  $("sessions-view").hidden = true;
  $("session-view").hidden = true;
  view.gone = false;
  setLive();   // off while another view shows
  if (!apiKey()) { setStatus("Enter an API key to see your agent sessions."); return; }
  try {
    if (!view.me) {
      view.me = await api("/v1/traces/me");
      showVisible($("who"), `tenant ${view.me.tenant}` + (view.me.is_admin ? " (admin: all tenants)" : ""));
      document.body.classList.toggle("admin", view.me.is_admin);
      $("f-tenant-label").hidden = !view.me.is_admin;
      $("tracing-off").hidden = view.me.tracing !== false;   // tracing off: the store gets nothing new
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
    if (error.status === 401 || error.badKey) {
      view.me = null; $("who").textContent = ""; $("tracing-off").hidden = true;
    }
    setStatus(error.status === 404 ? SESSION_NOT_FOUND
      : error.status ? `Error ${error.status}: ${error.message}`
      : error.badKey ? error.message : `Error: ${error.message}`);
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
// "load more" after a Live refresh in flight (or the last "load more": two clicks, two
// pages), on the list it was clicked on only, and only while there is more
$("more-sessions").addEventListener("click", () => {
  const ticket = view.route;
  inTurn(() => ticket === view.route && !$("more-sessions").hidden ? loadSessions(true) : Promise.resolve(false))
    .then((shown) => shown && rememberRows()).catch((e) => setStatus(e.message));
});
// the list's scroll position and the row whose link opened a session (focused again on
// Back: list.js `showSessions`), kept in its history entry as a session is opened from it;
// a column's header sorts the rows (list_sort.js)
$("sessions").addEventListener("click", (event) => {
  const link = event.target.closest("tbody a");
  if (link) history.replaceState({ listScrollY: window.scrollY, listFocus: link.closest("tr").dataset.key }, "");
  const header = event.target.closest("thead button.sort");
  if (header) sortBy(header.dataset.sort);
});
$("export-all-link").addEventListener("click", (event) => {
  event.preventDefault();
  // the filters applied (the rows listed), not text typed but not applied yet
  downloadFile("/v1/traces/export?" + filterQuery(), "sessions.jsonl").catch((e) => setStatus(e.message));
});
$("live").addEventListener("change", setLive);
$("f-live").addEventListener("change", setLive);
// "Load more steps" / "Load earlier steps" (session.js `loadSession` "more", "earlier"):
// after a Live refresh in flight (or the last such click: two clicks, two pages, each from
// where the last one ended), on the session it was clicked on only, and only while the
// button still shows (a Live reload meanwhile may have shown every step there is)
for (const [button, how] of [["more-steps", "more"], ["earlier-steps", "earlier"]]) {
  $(button).addEventListener("click", () => {
    const ticket = view.route;
    inTurn(() => ticket === view.route && view.session && !$(button).hidden
      ? loadSession(view.session.tenant, view.session.session, how) : Promise.resolve())
      .catch((e) => setStatus(e.message));
  });
}
window.addEventListener("hashchange", route);
route();
