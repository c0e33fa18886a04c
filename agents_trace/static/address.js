// stepahead trace viewer: addresses. A session's API path, and where the page is, kept in
// its URL's hash (`parseHash`): Back, reload and a shared link open the same list
// (filters, rows loaded) or session (and outlined step). Loaded before app.js.
"use strict";

// A session's API path: its id as one encoded segment (`/` as %2F), whatever it holds
// (`/`, `%`, `?`, `#`, spaces, unicode); the server splits only at literal slashes.
function sessionPath(session, resource) {
  return "/v1/traces/sessions/" + encodeURIComponent(session) + (resource ? "/" + resource : "");
}

// An id that is only "." or ".." cannot be sent from a browser (it drops such a path
// segment, even encoded: "." asks for the sessions list, ".." for nothing), so its
// session is not asked for; `stepahead traces show` reads it.
const canOpen = (session) => session !== "." && session !== "..";
const cannotOpen = (tenant, session) =>
  `Session "${session}" cannot be opened in a browser: a browser drops a path segment that is only "." or ` +
  `"..", even encoded. Read it with: stepahead traces show ${session} --tenant ${tenant}`;

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
  const sort = parseHash(location.hash).params.get("sort");   // Apply keeps the list's sort (list_sort.js)
  if (sort) params.set("sort", sort);
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
