// stepahead trace viewer: the sessions list's column sort. The API pages the list most
// recently active first by a cursor (the order "load more" and Live rely on never to
// repeat or skip a row), so a column's header sorts the rows loaded, here: a sort over
// every session would need a cursor per column and a sort of every session per page.
// The sort is kept in the list's URL, `sort=steps` (smallest or A first) or `sort=-steps`
// (the reverse); none, the API's order (last active first). Rows that come later ("load
// more", Live) are sorted in. Loaded before list.js.
"use strict";

// Each sortable column (its header's `data-sort`): a session's value there (null: none,
// listed last either way) and the order its first click asks for (numbers: most first).
const SORT_COLUMNS = {
  session: { value: (s) => s.session, first: "asc" },
  tenant: { value: (s) => s.tenant, first: "asc" },
  agent: { value: (s) => s.agent || null, first: "asc" },
  last: { value: (s) => s.last_s, first: "desc" },
  duration: { value: (s) => s.duration_s, first: "desc" },
  steps: { value: (s) => s.num_steps, first: "desc" },
  tools: { value: (s) => s.num_tool_runs, first: "desc" },
  input: { value: (s) => s.num_input_tokens, first: "desc" },
  cached: { value: (s) => s.num_cached_tokens, first: "desc" },
  hit: { value: (s) => s.num_input_tokens > 0 ? s.num_cached_tokens / s.num_input_tokens : null, first: "desc" },
  output: { value: (s) => s.num_output_tokens, first: "desc" },
  errors: { value: (s) => s.num_errors, first: "desc" },
  forecasts: { value: (s) => s.num_forecasts ? s.num_forecast_hits / s.num_forecasts : null, first: "desc" },
  state: { value: (s) => stateOf(s), first: "asc" },
};
const DEFAULT_SORT = { column: "last", descending: true };   // the API's order

// The sort a list URL's params name (`sort`), the default for none or one it does not know.
function listSort(params) {
  const raw = params.get("sort") || "";
  const column = raw.replace(/^-/, "");
  return SORT_COLUMNS[column] ? { column, descending: raw.startsWith("-") } : DEFAULT_SORT;
}

const sameSort = (a, b) => a.column === b.column && a.descending === b.descending;

// A column's header clicked: sorted by it in its first order, or the other way when it is
// already; the URL says so (no new history entry: Back still leaves the list), the rows move.
function sortBy(column) {
  const { session, params } = parseHash(location.hash);
  if (session !== undefined) return;
  const now = listSort(params);
  const next = now.column === column ? { column, descending: !now.descending }
    : { column, descending: SORT_COLUMNS[column].first === "desc" };
  if (sameSort(next, DEFAULT_SORT)) params.delete("sort");
  else params.set("sort", (next.descending ? "-" : "") + column);
  history.replaceState(history.state, "", listHash(params));
  $("brand").href = location.hash;
  sortRows();
}

// `a` before `b` (values of one column, neither null): numbers by size, text as people
// read it ("run-2" before "run-10").
function compareValues(a, b) {
  return typeof a === "number" ? a - b : String(a).localeCompare(String(b), undefined, { numeric: true });
}

// The rows listed in the URL's sort (ties, and the default, in the API's order: each
// row's `data-place`), and the headers marked (`aria-sort`, drawn as an arrow by app.css).
function sortRows() {
  const sort = listSort(parseHash(location.hash).params);
  for (const button of document.querySelectorAll("#sessions thead button.sort")) {
    const th = button.closest("th");
    if (button.dataset.sort === sort.column) th.setAttribute("aria-sort", sort.descending ? "descending" : "ascending");
    else th.removeAttribute("aria-sort");
  }
  const body = $("sessions").tBodies[0];
  const place = (row) => JSON.parse(row.dataset.place);
  const apiOrder = (a, b) => comesAfter(place(a), place(b)) ? 1 : comesAfter(place(b), place(a)) ? -1 : 0;
  const value = (row) => {
    const s = view.sessionsByKey.get(row.dataset.key);
    const v = s ? SORT_COLUMNS[sort.column].value(s) : null;
    return v === undefined ? null : v;
  };
  const isDefault = sameSort(sort, DEFAULT_SORT);
  const rows = [...body.rows].sort((a, b) => {
    if (isDefault) return apiOrder(a, b);
    const va = value(a), vb = value(b);
    const nulls = (va === null) - (vb === null);   // none: last either way
    const by = nulls || (sort.descending ? compareValues(vb, va) : compareValues(va, vb));
    return by || apiOrder(a, b);
  });
  body.append(...rows);   // moved, not rebuilt
  const label = document.querySelector(`#sessions thead button[data-sort="${sort.column}"]`).textContent;
  $("sort-note").textContent = isDefault || !rows.length ? "" :
    `Sorted by ${label} (${sort.descending ? "descending" : "ascending"}) among the ` +
    `${count(rows.length, "session")} listed ("Load more sessions" adds more, sorted in).`;
}
