// stepahead trace viewer: one session (its summary, charts and steps, a page at a time,
// each step's messages on request; Live: session_live.js). Loaded before app.js.
"use strict";

// A tool named as a control step (USER, ASSISTANT_TEXT, END) or with a reserved prefix
// (`tool:`, `<`) is spelled `tool:NAME`, as the forecasts' Predicted/Actual spell it
// (cache.forecast.tool_step), so "END" always means the session's end, never a tool.
const CONTROL_STEPS = new Set(["USER", "ASSISTANT_TEXT", "END"]);
const toolStep = (name) => CONTROL_STEPS.has(name) || name.startsWith("tool:") || name.startsWith("<")
  ? `tool:${name}` : name;
const choiceAsked = (choice) =>
  choice.tool_calls.length ? choice.tool_calls.map((c) => toolStep(c.name)).join(", ") : "text answer";
// With several choices (n > 1) each is listed with its number: "#0 get_weather · #1 text answer".
const askedFor = (step) => {
  if (step.error) return "error";
  const choices = [step, ...(step.other_choices || [])];
  return choices.length === 1 ? choiceAsked(step) : choices.map((c, i) => `#${i} ${choiceAsked(c)}`).join(" · ");
};

// A step's cache hit: "—" for a refused step (charts.js `isRefused`: its prompt was never
// served, so no cache was tried), as the summary leaves its tokens out; `traces show` alike.
const stepHit = (s) => isRefused(s) ? "—" : pct(s.num_cached_tokens, s.num_input_tokens);

// A step's messages, fetched once while they are shown (`view.contents`, index -> {node,
// loading}): a step's content never changes, so a re-render (a Live step arriving) shows the
// same node again, neither fetched again nor back to "loading…". Hiding a step forgets it.
function contentNode(step) {
  const kept = view.contents.get(step.index);
  if (kept) return kept;
  const entry = { node: null, loading: null };
  const query = "?tenant=" + encodeURIComponent(view.session.tenant);
  entry.loading = api(sessionPath(view.session.session, `steps/${step.index}/content`) + query)
    .then((c) => {
      const pre = el("pre", { class: "content" });
      pre.textContent = jsonVisible(JSON.stringify(c, null, 2));   // its own lines: not through `visible`
      entry.node = pre;
      return pre;
    })
    .catch((e) => {
      if (view.contents.get(step.index) === entry) view.contents.delete(step.index);   // the next render asks again
      return document.createTextNode(visible("Could not load content: " + e.message));
    });
  view.contents.set(step.index, entry);
  return entry;
}

function contentRow(step, columns) {
  const entry = contentNode(step);
  const cell = el("td", { colspan: String(columns), class: "text" }, entry.node || "loading…");
  const row = el("tr", { class: "content-row", id: `step-content-${step.index}` }, cell);
  if (!entry.node) entry.loading.then((node) => { if (cell.isConnected) cell.replaceChildren(node); });
  return row;
}

const notConfident = "This forecast was not confident (the tenant's model cold or recently inaccurate, and " +
  "too few of its waits seen yet): the cache treated the session as plain LRU.";

// Tokens the previous step's prompt shared with this one that were not cached (0: none
// lost); the server counts them (`evicted_prefix_tokens`, one rule for every view).
const lostPrefix = (s) => s.evicted_prefix_tokens || 0;

// The control that had the keyboard's focus in the steps table (its step and which one,
// `data-control`), so the rebuilt table gives focus back to its equivalent.
function focusedControl(body) {
  const focused = document.activeElement;
  if (!focused || !body.contains(focused) || !focused.dataset.control) return null;
  const row = focused.closest("tr.step-row");
  return row ? { step: row.dataset.step, control: focused.dataset.control } : null;
}

function refocus(body, where) {
  if (!where) return;
  const again = body.querySelector(`tr.step-row[data-step="${CSS.escape(where.step)}"] ` +
    `[data-control="${CSS.escape(where.control)}"]`);
  if (again) again.focus({ preventScroll: true });
}

// The # cell: focusable, so a keyboard reads the step's request id (shown on focus, app.css).
function indexCell(s) {
  if (!s.response_id) return el("td", {}, s.index);
  return el("td", { class: "step-id", tabindex: "0", "data-control": "request", title: "request " + s.response_id,
    "data-request": visible(s.response_id), "aria-label": visible(`step ${s.index}, request ${s.response_id}`) },
    s.index);
}

// A step's "show"/"hide" button and its messages' row (kept open across re-renders:
// `view.openContent`).
function contentToggle(s, row) {
  const button = el("button", { class: "show-content", "data-control": "show", "aria-expanded": "false",
    "aria-controls": `step-content-${s.index}` }, "show");
  let shown = null;
  const label = () => {
    button.textContent = shown ? "hide" : "show";
    button.setAttribute("aria-expanded", shown ? "true" : "false");
    button.setAttribute("aria-label", `${shown ? "hide" : "show"} messages of step ${s.index}`);
  };
  const open = () => { shown = contentRow(s, row.children.length); row.after(shown); label(); };
  button.addEventListener("click", () => {
    if (!shown) { open(); view.openContent.add(s.index); return; }
    shown.remove(); shown = null; label();
    view.openContent.delete(s.index);
    view.contents.delete(s.index);
  });
  label();
  return { button, reopen: () => { if (view.openContent.has(s.index)) open(); } };
}

// The steps' rows, all made again; `appendSteps`: rows for steps after those shown only
// ("Load more steps", Live), so paging through a long session makes each row once (QA194 F5).
function renderSteps(steps) {
  const body = $("steps").tBodies[0], focus = focusedControl(body);
  body.replaceChildren();
  appendSteps(steps);
  refocus(body, focus);
}

function appendSteps(added) {
  const body = $("steps").tBodies[0];
  for (const s of added) {
    const f = s.forecast;
    // the step the filter named by its request id (a reply's x-request-id) is marked
    const found = s.response_id && s.response_id === view.requestId;
    const row = el("tr", { class: (s.error ? "error step-row" : "step-row") + (found ? " found" : ""),
      "data-step": s.index },
      indexCell(s),
      namesCell({}, s.after_label), el("td", {}, fmtS(s.gap_s)),
      el("td", {}, s.num_input_tokens), el("td", {}, s.prefix_from_previous_tokens ?? "—"),
      el("td", lostPrefix(s) ? { class: "miss", title: `${lostPrefix(s)} tokens the previous step left were ` +
        "no longer cached (evicted while the session was away)" } : {}, s.num_cached_tokens),
      el("td", {}, stepHit(s)), el("td", {}, fmtMs(s.ttft_s)),
      el("td", {}, s.num_output_tokens), el("td", { class: "text id" }, s.model),
      el("td", { class: "text id", title: s.service_tier === "flex" ? "served in the flex tier, after other requests" : "" },
        (s.worker || "—") + (s.service_tier === "flex" ? " · flex" : "")),
      namesCell({}, askedFor(s)),
      namesCell({ title: f && !f.is_confident ? notConfident : "" },
        f ? `${f.predicted} (${percent(f.p_predicted)})` + (f.is_confident ? "" : " · not confident") : "—"),
      namesCell({ class: f ? (f.is_hit ? "hit" : "miss") : "" },   // a name and its mark on one line
        f ? f.actual : "—", f ? `\u00a0${f.is_hit ? "✓" : "✗"}` : ""),
      el("td", {}, f && f.eta_p50_s !== null ? `${fmtS(f.eta_p50_s)} (was ${fmtS(s.gap_s)})` : "—"),
      el("td", { class: "tools" }, s.error ? (s.error_message ? `${s.error}: ${s.error_message}` : s.error) : ""),
      el("td", { class: "text" }));
    const toggle = s.has_content ? contentToggle(s, row) : null;
    row.lastChild.append(toggle ? toggle.button : el("span", { title: "messages are kept only with capture_content " +
      "on: stepahead serve --capture-content, or [tracing] capture_content = true" }, "not captured"));
    body.append(row);
    if (toggle) toggle.reopen();
  }
}

// The session's title and summary line (its totals and state).
function renderSummary() {
  const s = view.session;
  showVisible($("session-title"), `Session ${s.session}` + (view.me.is_admin ? ` (tenant ${s.tenant})` : ""));
  const pastable = pastableId(s.session);   // its escapes marked: the id to paste, where it differs
  $("session-paste").hidden = pastable === null; $("session-pastable").textContent = pastable || "";
  showVisible($("session-summary"), `agent ${s.agent || "—"} · ${count(s.num_steps, "step")} · ` +
    `${count(s.num_tool_runs, "tool run")} · ${s.num_input_tokens} prompt tokens (${s.num_cached_tokens} cached, ` +
    `${pct(s.num_cached_tokens, s.num_input_tokens)}) · ${s.num_output_tokens} output tokens · ` +
    `${count(s.num_errors, "error")} · started ${fmtTime(s.started_s)} · ${stateOf(s)}` +
    (s.num_forecasts ? ` · forecasts right ${s.num_forecast_hits}/${s.num_forecasts} (${forecastsNote(s)})` : ""));
  $("export-link").onclick = (event) => { event.preventDefault(); downloadExport(); };
}

function renderSession(added = null) {   // `added`: steps after the rows shown, the only rows made
  renderSummary();
  renderGantt(view.steps);
  renderContextChart(view.steps);
  if (added) appendSteps(added); else renderSteps(view.steps);
}

function downloadExport() {
  const path = sessionPath(view.session.session, "export") + "?tenant=" + encodeURIComponent(view.session.tenant);
  return downloadFile(path, "session.jsonl");   // the gateway's name for it (export_filename.py) first
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

// A step as stored is never rewritten: the same index, request and arrival is the same
// step (a session deleted and begun again under its id has new ones at the same indexes).
const sameStep = (a, b) => a.index === b.index && a.request_id === b.request_id && a.arrived_s === b.arrived_s;

// `detail`, the API's answer for one session; anything else (a page of the sessions list,
// a proxy's page) throws an error that says so, never a TypeError half-way through a render.
function sessionReply(detail) {
  if (!detail || !detail.session || !detail.steps || !Array.isArray(detail.steps.data)) {
    throw new Error("The gateway's answer is not a session (its id may be one a browser cannot send).");
  }
  return detail;
}

function stepsQuery(tenant, offset, limit) {
  // the tenant the address names, whoever asks: another tenant's session is a 404 to a
  // tenant key ("Session not found"), never the caller's own session of the same id
  return new URLSearchParams({ offset: String(offset), limit: String(limit), tenant });
}

// `how`: "open" (the first page, or the page holding the step of `requestId`, wherever
// it lies: the API finds it, so a step 9,000 steps in costs one page, and the page
// scrolls to it), "reload" (the same, for the request id it opened with, without
// scrolling), "more" (the page after those shown) or "earlier" (the page before them;
// both asked for in turn with Live and each other, app.js `inTurn`, so each starts from
// the steps the last one left: none twice, none skipped).
// The session view shows only once its session has loaded, and nothing is shown when the
// user went elsewhere meanwhile; a load that succeeds clears the status line (a Live
// refresh's error included).
async function loadSession(tenant, session, how, requestId = "") {
  const ticket = view.route;
  if (!canOpen(session)) throw new Error(cannotOpen(tenant, session));
  if (how === "open") {
    const same = view.session && view.session.tenant === tenant && view.session.session === session;
    if (!same) { view.openContent = new Set(); view.contents = new Map(); }
    view.requestId = requestId;
  }
  const start = how === "earlier" ? Math.max(0, view.stepsStart - STEPS_PAGE) : how === "more" ? view.stepsEnd : 0;
  const query = stepsQuery(tenant, start, how === "earlier" ? view.stepsStart - start : STEPS_PAGE);
  const fresh = how === "open" || how === "reload";
  if (fresh && view.requestId) query.set("request_id", view.requestId);   // its page, not the first
  const detail = sessionReply(await api(sessionPath(session) + "?" + query));
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
  view.gone = false;   // found again (Live, after `showGone`): Live at its usual pace (`setLive`)
  renderSession(how === "more" ? page : null);
  renderStepsShown();
  const found = how === "open" && detail.request_step && $("steps").querySelector("tr.step-row.found");
  if (found) found.scrollIntoView({ block: "center" });
  // opened (from the list, a link, Back): the keyboard's focus on the view's heading, so
  // the next Tab goes on from there, not from the top of the page
  if (how === "open") $("session-title").focus({ preventScroll: Boolean(found) });
  setStatus("");
  setLive();
}
