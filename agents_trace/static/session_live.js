// stepahead trace viewer: Live on a session's page, its refresh every LIVE_INTERVAL_MS
// (app.js `setLive`) and what it does when the session is gone. Loaded after session.js,
// whose `loadSession` and renderers it calls, and before app.js.
"use strict";

// Live, every LIVE_INTERVAL_MS while its box is ticked, the session open or ended: an
// ended session opens again when its agent goes on under its id (after an idle end, a
// restart), so Live stays available and on (QA205 F6). On its last page, the steps
// after those shown are added. Before its last page (later steps wait behind "Load more
// steps"), the summary and "Showing steps … of N" keep up, and new steps wait there too:
// they come after those, in index order, so none is shown out of order or twice. A step
// that arrived out of order (a session's concurrent calls: a long call stored after a
// shorter one that began after it) among or before those shown, or a session deleted and
// begun again under its id, moves or replaces the last step shown: each refresh asks from
// that step on (`sameStep`), and anything else there reloads the session (its first page,
// or the one holding the outlined step), as does its end (or opening again) on its last
// page; an ended session with nothing new costs one small request a tick. A refresh that
// succeeds clears the status line: an error a refresh showed (the gateway restarting) is
// over. A 404 (the session deleted) shows what a session that cannot be opened shows
// (`showGone`); any other error (the network, a 5xx) leaves the page as it is.
async function refreshLive() {
  if (document.hidden) return;
  const s = view.session, ticket = view.route;
  try {
    if (view.gone) await loadSession(s.tenant, s.session, "reload");   // back under its id?
    else if ($("more-steps").hidden === false) await refreshBeforeLastPage();
    else await refreshLastPage();
  } catch (error) {
    if (error.status !== 404) throw error;
    if (ticket !== view.route) return;   // the user is elsewhere now
    if (view.gone) setStatus(SESSION_NOT_FOUND); else showGone();
  }
}

// Live found its session gone (QA218 F3): the page shows only "Session not found", as for a
// session that cannot be opened (app.js `route`), none of the deleted session's data, and
// Live asks for it again only every LIVE_GONE_INTERVAL_MS (app.js `setLive`), so an agent
// that goes on under its id shows again (its first page), without a 404 every tick.
function showGone() {
  view.gone = true;
  view.steps = []; view.stepsStart = 0; view.stepsEnd = 0;
  view.openContent = new Set(); view.contents = new Map();   // a session begun again has new steps
  $("session-view").hidden = true;
  for (const id of ["session-title", "session-summary", "session-pastable", "gantt", "context-chart", "steps-shown"]) {
    $(id).replaceChildren();
  }
  $("steps").tBodies[0].replaceChildren();
  $("more-steps").hidden = true; $("earlier-steps").hidden = true; $("session-paste").hidden = true;
  setStatus(SESSION_NOT_FOUND);
  setLive();
}

// Live on the session's last page: the steps after those shown (`refreshLive`).
async function refreshLastPage() {
  const s = view.session, ticket = view.route, last = view.steps[view.steps.length - 1];
  const from = last ? view.stepsEnd - 1 : view.stepsEnd;
  const detail = sessionReply(await api(sessionPath(s.session) + "?" + stepsQuery(s.tenant, from, STEPS_PAGE)));
  if (ticket !== view.route) return;
  setStatus("");
  const page = detail.steps.data;
  const added = last ? page.slice(1) : page;
  const inPlace = !last || (page.length > 0 && sameStep(page[0], last));
  const sameState = detail.session.is_open === s.is_open && detail.session.end_reason === s.end_reason;
  if (inPlace && detail.session.num_steps === view.stepsEnd + added.length && sameState) {
    if (!added.length) return;
    view.session = detail.session;
    view.steps = view.steps.concat(added);
    view.stepsEnd += added.length;
    renderSession(added);
    renderStepsShown();
    return;
  }
  await loadSession(s.tenant, s.session, "reload");
}

// Live before the session's last page: the session again, with the last step shown (still
// at its offset when no step arrived among or before those shown).
async function refreshBeforeLastPage() {
  const s = view.session, ticket = view.route, last = view.steps[view.steps.length - 1];
  const detail = sessionReply(await api(sessionPath(s.session) + "?" +
    stepsQuery(s.tenant, Math.max(0, view.stepsEnd - 1), 1)));
  if (ticket !== view.route) return;
  setStatus("");
  const again = detail.steps.data[0];
  if (!last || !again || !sameStep(again, last)) { await loadSession(s.tenant, s.session, "reload"); return; }
  if (JSON.stringify(detail.session) === JSON.stringify(s)) return;   // nothing new
  view.session = detail.session;
  $("more-steps").hidden = !detail.steps.has_more;
  renderSummary();   // its end too: Live goes on (it may open again)
  renderStepsShown();
}
