// stepahead trace viewer: a session's charts (the steps' timeline and the context
// growth), drawn as SVG nodes with dom.js. Loaded before app.js.
"use strict";

// The round tick spacing (1, 2 or 5 times a power of ten) nearest above `rough` seconds.
function niceStep(rough) {
  const power = 10 ** Math.floor(Math.log10(rough));
  return [1, 2, 5, 10].map((m) => m * power).find((step) => step >= rough * (1 - 1e-9));
}

// The widest a label column grows (px); a longer label ends in "…", its whole text in a
// tooltip. The right-hand label keeps its numbers (gap, cached/prompt tokens) whole and
// shortens the tool names around them instead.
const GANTT_LABEL_MAX = 240, GANTT_NUMBERS_MAX = 460, GANTT_PAD = 12;

// The width in px of `text` written in `probe`'s font (an SVG text node on the page).
function textMeasurer(probe) {
  const style = getComputedStyle(probe);
  const context = document.createElement("canvas").getContext("2d");
  context.font = `${style.fontStyle} ${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
  return (text) => context.measureText(text).width;
}

// The longest start of `text` (whole characters) that, with "…", is at most `maxW` px.
function fitText(text, maxW, width) {
  if (width(text) <= maxW) return text;
  const chars = Array.from(text);
  let low = 0, high = chars.length;
  while (low < high) {
    const mid = Math.ceil((low + high) / 2);
    if (width(chars.slice(0, mid).join("") + "…") <= maxW) low = mid; else high = mid - 1;
  }
  return chars.slice(0, low).join("") + "…";
}

// `parts` (dom.js `visibleParts`) cut as `fitText` cuts their text, each piece keeping its
// mark (an escape stays marked in the timeline, cut or not).
function fitParts(parts, maxW, width) {
  const text = partsText(parts), shown = fitText(text, maxW, width);
  return shown === text ? parts : [...sliceParts(parts, shown.length - "…".length), { text: "…", esc: false }];
}

// An SVG text of `shown` (pieces, their escapes marked: dom.js `svgParts`), with the whole
// text `full` (escaped, as `visible` writes it; a tooltip is plain text) as its tooltip when cut.
function labelNode(attrs, full, shown) {
  const node = svgParts("text", attrs, shown);
  if (partsText(shown) !== full) node.append(svg("title", {}, full));
  return node;
}

// A step's right-hand label, `tools gap s → chat cached/prompt tok cached → asked for`,
// in at most `maxW` px: the middle part always whole, the tools and what was asked for
// cut to the room left (what was asked for first given its own width, up to half):
// `full`, its text, and `shown`, the pieces shown (`visibleParts`: escapes marked).
function numbersLabel(s, tools, maxW, width) {
  const head = visibleParts(tools);
  const middle = (tools ? ` ${fmtS(s.gap_s)} s → ` : "") + `chat ${s.num_cached_tokens}/${s.num_input_tokens} tok cached → `;
  const asked = visibleParts(askedFor(s));
  const whole = [...head, { text: middle, esc: false }, ...asked];
  const full = partsText(whole);
  if (width(full) <= maxW) return { full, shown: whole };
  const room = Math.max(0, maxW - width(middle));
  const shownHead = head.length ? fitParts(head, Math.max(room - width(partsText(asked)), room / 2), width) : [];
  const shownAsked = fitParts(asked, Math.max(0, room - width(partsText(shownHead))), width);
  return { full, shown: [...shownHead, { text: middle, esc: false }, ...shownAsked] };
}

function renderGantt(steps) {
  const box = $("gantt");
  box.replaceChildren();
  if (!steps.length) return;
  const start = Math.min(...steps.map((s) => s.prev_ended_s ?? s.arrived_s));
  const end = Math.max(...steps.map((s) => s.ended_s));
  const span = Math.max(end - start, 1e-3);
  const root = svg("svg", { id: "gantt-svg", role: "img", "aria-label": `Timeline of steps ` +
    `#${steps[0].index} to #${steps[steps.length - 1].index}: each step's LLM call and the tool run before it ` +
    "(the steps table below has the same figures)" });
  const probe = svg("text", {}, "#");
  root.append(probe);
  box.append(root);   // on the page, so its text has the page's font to measure
  const width = textMeasurer(probe);
  probe.remove();
  const lefts = steps.map((s) => visibleParts(`#${s.index} after ${s.after_label}`));
  const rights = steps.map((s) => numbersLabel(s, s.after_tools.map((c) => c.name).join(", "),
                                               GANTT_NUMBERS_MAX, width));
  const labelW = Math.min(GANTT_LABEL_MAX, Math.max(...lefts.map((l) => width(partsText(l))))) + GANTT_PAD;
  const textW = Math.max(...rights.map((r) => width(partsText(r.shown)))) + GANTT_PAD;
  const plotW = 760, rowH = 22, top = 24;
  const x = (t) => labelW + (t - start) / span * plotW;
  const height = top + steps.length * rowH + 8;
  root.setAttribute("width", labelW + plotW + textW);
  root.setAttribute("height", height);
  const step = niceStep(span / 6);   // 4 to 7 ticks
  const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  for (let offset = 0; offset <= span + 1e-9; offset += step) {
    const t = start + offset;
    root.append(svg("line", { x1: x(t), x2: x(t), y1: top - 4, y2: height, stroke: "#e3e7eb" }));
    root.append(svg("text", { x: x(t), y: 14, "text-anchor": "middle", class: "gantt-tick" },
      offset.toFixed(decimals) + " s"));
  }
  steps.forEach((s, row) => {
    const y = top + row * rowH;
    const group = svg("g", { class: "gantt-row", "data-step": s.index });
    group.append(labelNode({ x: 4, y: y + 14, class: "gantt-label" }, partsText(lefts[row]),
                           fitParts(lefts[row], labelW - GANTT_PAD, width)));
    const tools = s.after_tools.map((c) => c.name).join(", ");
    if (s.after_kind === "tools" && s.prev_ended_s !== null) {
      const bar = svg("rect", { x: x(s.prev_ended_s), y: y + 3, height: rowH - 6, fill: "#e0a030",
        width: Math.max(1, x(s.arrived_s) - x(s.prev_ended_s)), class: "tool-bar" });
      bar.append(svg("title", {}, `tool run: ${visible(tools)}\n${fmtS(s.gap_s)} s`));
      group.append(bar);
    }
    const llmW = Math.max(2, x(s.ended_s) - x(s.arrived_s));
    const llm = svg("rect", { x: x(s.arrived_s), y: y + 3, width: llmW, height: rowH - 6,
      fill: s.error ? "#c62828" : "#3b7dd8", class: "llm-bar" });
    // a tooltip's lines are its own: the data in them escaped first (a newline a name holds is `\n`)
    llm.append(svg("title", {}, `chat ${visible(s.model)} (step ${s.index})\nprompt ${s.num_input_tokens}` +
      ` tok, cached ${s.num_cached_tokens}, output ${s.num_output_tokens}\nTTFT ${fmtMs(s.ttft_s)}` +
      ` ms, worker ${visible(s.worker || "—")}${s.service_tier === "flex" ? " (flex tier)" : ""}` +
      `\nasked for: ${visible(askedFor(s))}` + (s.response_id ? `\nrequest ${visible(s.response_id)}` : "")));
    group.append(llm);
    if (s.ttft_s !== null && !s.error) {
      group.append(svg("rect", { x: x(s.arrived_s), y: y + 3, height: rowH - 6, fill: "#1f4f99",
        width: Math.min(llmW, Math.max(1, s.ttft_s / span * plotW)) }));
    }
    group.append(labelNode({ x: labelW + plotW + 6, y: y + 14, class: "gantt-numbers" },
                           rights[row].full, rights[row].shown));
    root.append(group);
  });
}

// A refused step: it failed and generated nothing (as the exports leave it out), so its
// prompt was never served; the context chart draws it apart. One refused before its
// prompt was counted has 0 prompt tokens (the store has no size for it): `uncounted`.
const isRefused = (s) => Boolean(s.error) && !s.num_output_tokens;
const isUncounted = (s) => isRefused(s) && !s.num_input_tokens;
// an uncounted prompt refused as past the context (the gateway's bound "at least N tokens"
// is in its error message): larger than any served one, so drawn capped at the top
const isPastContext = (s) => isUncounted(s) && s.error === "context_length_exceeded";
const REFUSED_FILL = "url(#refused-hatch)";
const UNCOUNTED_H = 8;   // px: an uncounted refusal of any other kind (rate, queue), size unknown
const fmtTokens = (n) => Number(n).toLocaleString("en-US");   // 100,019
const SHORT_TOKENS = new Intl.NumberFormat("en-US", { notation: "compact", maximumSignificantDigits: 3,
                                                      roundingMode: "trunc" });   // 100K, 99.9M

// A capped bar's mark, then shorter forms of it for when the whole one has no room.
const capLabels = (s) => isPastContext(s) ? ["refused (not counted)", "not counted", "?"]
  : [`refused: ${fmtTokens(s.num_input_tokens)} tokens`, `refused: ${SHORT_TOKENS.format(s.num_input_tokens)}`,
     SHORT_TOKENS.format(s.num_input_tokens)];

// A step's bar's tooltip.
function contextTitle(s) {
  if (!isRefused(s)) {
    return `step ${s.index}: prompt ${s.num_input_tokens} tok, cached ` +
      `${s.num_cached_tokens} (${pct(s.num_cached_tokens, s.num_input_tokens)})`;
  }
  const error = visible(s.error);   // escaped before the lines are joined: its newlines are `\n`
  if (!isUncounted(s)) return `step ${s.index}: refused (${error}), prompt ${s.num_input_tokens} tok never processed`;
  return `step ${s.index}: refused (${error}) before its prompt was counted` +
    (isPastContext(s) ? ", past the context (drawn at the top)" : ", size unknown") +
    (s.error_message ? `\n${visible(s.error_message)}` : "");
}

// Prompt and cached tokens per step, and the cache hit line. The scale is the served
// prompts' (a refused prompt, 100,019 tokens against 7,019 served, would squash them to a
// sliver): a refused step's bar is hatched grey, no taller than the largest served one
// (at the top, marked "refused: N tokens", when it is larger, or when no prompt was served:
// then the chart has no scale, and no top figure), and a gap in the hit line.
// A prompt refused past the context before it was counted is such a bar, marked "refused
// (not counted)"; one refused otherwise before it was counted, a short hatched mark. The
// marks of capped bars take two rows, each mark in its longest form that ends before the
// capped bar after next ("refused: 250K", "250K" when they are close: `markCap`); bars
// too close even for that (hundreds of steps) are marked where a row has room, the rest
// in their bars' tooltips.
function renderContextChart(steps) {
  const box = $("context-chart");
  box.replaceChildren();
  if (!steps.length) return;
  const served = steps.filter((s) => !isRefused(s));
  const maxTokens = Math.max(1, ...served.map((s) => s.num_input_tokens));
  const isCapped = (s) => isPastContext(s) || (isRefused(s) && s.num_input_tokens > (served.length ? maxTokens : 0));
  const capped = steps.filter(isCapped);
  const labelRows = capped.length > 1 ? 2 : capped.length;
  const left = 60, right = 50, top = 10 + 14 * labelRows, plotH = 160, bottom = 24;
  const barW = Math.max(6, Math.min(40, 900 / steps.length));
  const plotEnd = left + steps.length * barW;
  const y = (tokens) => top + plotH - Math.min(tokens, maxTokens) / maxTokens * plotH;
  const barTop = (s) => isPastContext(s) ? top : isUncounted(s) ? top + plotH - UNCOUNTED_H : y(s.num_input_tokens);
  const root = svg("svg", { height: top + plotH + bottom, id: "context-svg", role: "img",
    "aria-label": `Prompt tokens, cached tokens and cache hit % of steps #${steps[0].index} to ` +
      `#${steps[steps.length - 1].index} (the steps table below has the same figures)` });
  const probe = svg("text", {}, "#");
  root.append(probe);
  box.append(root);   // on the page, so its text has the page's font to measure
  const textW = textMeasurer(probe);
  probe.remove();
  const width = Math.max(plotEnd + right, left + Math.max(0, ...capped.map((s) => textW(capLabels(s)[0]))) + 4);
  root.setAttribute("width", width);
  const hatch = svg("pattern", { id: "refused-hatch", width: 4, height: 4, patternUnits: "userSpaceOnUse",
    patternTransform: "rotate(45)" });
  hatch.append(svg("rect", { width: 4, height: 4, fill: "#e6e8eb" }), svg("rect", { width: 2, height: 4, fill: "#b0b6bd" }));
  const defs = svg("defs");
  defs.append(hatch);
  root.append(defs);
  if (served.length) root.append(svg("text", { x: 4, y: top + 8 }, String(maxTokens)));
  root.append(svg("text", { x: 4, y: top + plotH }, "0"));
  root.append(svg("text", { x: plotEnd + 4, y: top + 8 }, "100%"));
  const labelsEnd = new Array(labelRows).fill(-Infinity);   // per row, where its last mark ends
  const capsX = steps.flatMap((s, i) => isCapped(s) ? [left + i * barW] : []);
  // capped bar `s`'s mark at `bx`, on a row with room: its longest form that ends before
  // the capped bar after next (so that bar finds a row free whatever the next one takes),
  // else its shortest anywhere free
  const markCap = (s, bx) => {
    const after = capsX[capsX.indexOf(bx) + 2] ?? Infinity;
    const forms = capLabels(s);
    const tries = [...forms.map((text) => [text, after]), [forms[forms.length - 1], Infinity]];
    for (const [text, limit] of tries) {
      const x = Math.min(bx + 1, width - textW(text) - 2);   // whole, inside the chart
      const row = labelsEnd.findIndex((end) => x >= end);
      if (row < 0 || x + textW(text) + 6 > limit) continue;
      root.append(svg("text", { x, y: top - 8 - 14 * row, class: "refused-label" }, text));
      labelsEnd[row] = x + textW(text) + 6;
      return;
    }
  };
  // the cache-hit line: a run of points per run of steps with a served prompt; a step
  // without one (refused, or 0 prompt tokens: "—" in the table) is a gap in it, not a 0%
  const runs = [[]];
  steps.forEach((s, i) => {
    const bx = left + i * barW;
    const refused = isRefused(s);
    const total = svg("rect", { x: bx + 1, y: barTop(s), width: barW - 2, height: top + plotH - barTop(s),
      fill: refused ? REFUSED_FILL : "#9fb7d6",
      class: refused ? (isUncounted(s) ? "refused-bar uncounted" : "refused-bar") : "prompt-bar" });
    total.append(svg("title", {}, contextTitle(s)));
    root.append(total);
    if (!refused) {
      root.append(svg("rect", { x: bx + 1, y: y(s.num_cached_tokens), width: barW - 2,
        height: top + plotH - y(s.num_cached_tokens), fill: "#2e7d32" }));
    }
    if (isCapped(s)) {   // cut at the top: a marker says how large
      root.append(svg("path", { d: `M${bx + 1},${top + 4} l${(barW - 2) / 2},-4 l${(barW - 2) / 2},4`,
        fill: "none", stroke: "#4a5561", "stroke-width": 1.5, class: "refused-cap" }));
      markCap(s, bx);
    }
    if (s.num_input_tokens > 0 && !refused) {
      runs[runs.length - 1].push([bx + barW / 2, top + plotH - s.num_cached_tokens / s.num_input_tokens * plotH]);
    } else if (runs[runs.length - 1].length) {
      runs.push([]);
    }
    if (steps.length <= 60 || i % Math.ceil(steps.length / 60) === 0) {
      root.append(svg("text", { x: bx + barW / 2, y: top + plotH + 14, "text-anchor": "middle" },
        String(s.index)));
    }
  });
  for (const run of runs.filter((r) => r.length)) {
    root.append(run.length === 1   // a point alone: a dot, as a line of one point draws nothing
      ? svg("circle", { cx: run[0][0], cy: run[0][1], r: 2, fill: "#7b1fa2", class: "hit-point" })
      : svg("polyline", { points: run.map((p) => p.join(",")).join(" "), fill: "none", stroke: "#7b1fa2",
        "stroke-width": 2, class: "hit-line" }));
  }
}
