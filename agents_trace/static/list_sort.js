// stepahead trace viewer: the sessions list's column sort. The API pages the list most
// recently active first by a cursor (the order "load more" and Live rely on never to
// repeat or skip a row), so a column's header sorts the rows loaded, here: a sort over
// every session would need a cursor per column and a sort of every session per page.
// The sort is kept in the list's URL, `sort=steps` (smallest or A first) or `sort=-steps`
// (the reverse); none, the API's order (last active first). Rows that come later ("load
// more", Live) are sorted in. Loaded before list.js.
"use strict";

// Each sortable column (its header's `data-sort`): a session's value there (null: none,
// listed last either way), the order its first click asks for (numbers: most first), and
// whether only an admin sees it (the Tenant column).
const SORT_COLUMNS = {
  session: { value: (s) => s.session, first: "asc" },
  tenant: { value: (s) => s.tenant, first: "asc", adminOnly: true },
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
// text as people read it ("run-2" before "run-10"); one collator, not one per comparison
const TEXT_ORDER = new Intl.Collator(undefined, { numeric: true });

// Whether `column` is one the list sorts by for this viewer: one of SORT_COLUMNS' own
// (never an inherited name, "constructor" or "__proto__"), and shown (Tenant: an admin's).
const sortable = (column) => Object.hasOwn(SORT_COLUMNS, column) &&
  (!SORT_COLUMNS[column].adminOnly || Boolean(view.me && view.me.is_admin));

// The sort a list URL's params name (`sort`), the default for none or one it does not know.
function listSort(params) {
  const raw = params.get("sort") || "";
  const column = raw.replace(/^-/, "");
  return sortable(column) ? { column, descending: raw.startsWith("-") } : DEFAULT_SORT;
}

const sameSort = (a, b) => a.column === b.column && a.descending === b.descending;

// A column's header clicked: sorted by it in its first order, or the other way when it is
// already; the URL says so (no new history entry: Back still leaves the list), the rows move.
function sortBy(column) {
  const { session, params } = parseHash(location.hash);
  if (session !== undefined || !sortable(column)) return;
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
// read it.
function compareValues(a, b) {
  return typeof a === "number" ? a - b : TEXT_ORDER.compare(String(a), String(b));
}

// The rows listed in the URL's sort (ties, and the default, in the API's order: each
// row's `data-place`), and the headers marked (`aria-sort`; app.css draws the arrow in an
// aria-hidden span, so a header's name stays its words). Rows already in order are not
// touched, and of the others only the fewest move (`moveInto`): a moved element loses the
// keyboard's focus, and Live sorts every 2 s. Each row's value and place are read once.
function sortRows() {
  const sort = listSort(parseHash(location.hash).params);
  for (const button of document.querySelectorAll("#sessions thead button.sort")) {
    const th = button.closest("th");
    if (button.dataset.sort === sort.column) th.setAttribute("aria-sort", sort.descending ? "descending" : "ascending");
    else th.removeAttribute("aria-sort");
  }
  const body = $("sessions").tBodies[0];
  const isDefault = sameSort(sort, DEFAULT_SORT);
  const value = (row) => {
    const s = view.sessionsByKey.get(row.dataset.key);
    const v = s && !isDefault ? SORT_COLUMNS[sort.column].value(s) : null;
    return v === undefined ? null : v;
  };
  const listed = [...body.rows].map((row) => ({ row, value: value(row), place: JSON.parse(row.dataset.place) }));
  const order = (a, b) => {
    const nulls = (a.value === null) - (b.value === null);   // none: last either way
    const by = nulls || (a.value === null ? 0
      : sort.descending ? compareValues(b.value, a.value) : compareValues(a.value, b.value));
    return by || (comesAfter(a.place, b.place) ? 1 : comesAfter(b.place, a.place) ? -1 : 0);
  };
  if (listed.some((item, i) => i > 0 && order(listed[i - 1], item) > 0)) {
    moveInto(body, [...listed].sort(order).map((item) => item.row));
  }
  const label = document.querySelector(`#sessions thead button[data-sort="${sort.column}"]`).textContent.trim();
  $("sort-note").textContent = isDefault || !listed.length ? "" :
    `Sorted by ${label} (${sort.descending ? "descending" : "ascending"}) among the ` +
    `${count(listed.length, "session")} listed` +
    ($("more-sessions").hidden ? "." : ` ("Load more sessions" adds more, sorted in).`);
}

// `body`'s rows put in the order `rows` (the same rows) by the fewest moves: the longest
// run of rows already in that order among them stays, every other row is put before the
// row that follows it in `rows` (from the last, so that one is already in place).
function moveInto(body, rows) {
  const at = new Map(rows.map((row, i) => [row, i]));
  const stay = longestIncreasing([...body.rows], (row) => at.get(row));
  for (let i = rows.length - 1; i >= 0; i--) {
    if (!stay.has(rows[i])) body.insertBefore(rows[i], rows[i + 1] || null);
  }
}

// The items of the longest subsequence of `items` whose `rank`s increase (patience sort,
// O(n log n)), as a Set.
function longestIncreasing(items, rank) {
  const tails = [];                 // tails[k]: index of the smallest last item of a run k + 1 long
  const previous = new Array(items.length);
  items.forEach((item, i) => {
    let low = 0, high = tails.length;
    while (low < high) {
      const mid = (low + high) >> 1;
      if (rank(items[tails[mid]]) < rank(item)) low = mid + 1; else high = mid;
    }
    previous[i] = low ? tails[low - 1] : -1;
    tails[low] = i;
  });
  const kept = new Set();
  for (let i = tails.length ? tails[tails.length - 1] : -1; i >= 0; i = previous[i]) kept.add(items[i]);
  return kept;
}
