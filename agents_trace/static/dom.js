// stepahead trace viewer: the page's text and nodes. Every text written shows control and
// bidi characters escaped (`visible`), so it cannot hide or reorder what is around it, and
// in the page's text each escape is marked (`visibleNodes`; in SVG text `svgParts`), so it
// never reads as text the client sent (a tooltip is plain text: escaped, not marked); nodes
// are made with textContent and attributes, never innerHTML. Loaded before app.js.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);
// Characters that would hide or reorder the text around them if shown as they are (a
// tool output `invoice_\u202etxt.exe` reads backwards), or hide themselves (`dup\u200b-id`
// beside `dup-id`): those Python's `isprintable` refuses, as `stepahead traces` escapes
// them (text_table.printable; QA205 F1): controls, format characters (bidi controls,
// zero-width and invisible ones, U+FEFF), separators but the space, surrogates, private-use
// and unassigned code points. `visible` writes each as `stepahead traces` prints it (`\n`,
// `\x1b`, `\u202e`, `\U000e0001`); in content, JSON.stringify has escaped the C0 controls
// already and `jsonVisible` writes the rest as JSON escapes (`\u202e`, a surrogate pair past
// U+FFFF), so it stays valid JSON.
const HIDDEN_CHARS = /(?! )[\p{C}\p{Z}]/gu;
const HIDDEN_IN_JSON = /(?! )(?![\u0000-\u001f])[\p{C}\p{Z}]/gu;
const NAMED_ESCAPES = { "\t": "\\t", "\n": "\\n", "\r": "\\r" };
const hex = (code, digits) => code.toString(16).padStart(digits, "0");
function escaped(ch) {
  const code = ch.codePointAt(0);
  return NAMED_ESCAPES[ch] || (code < 0x100 ? "\\x" + hex(code, 2) : code < 0x10000 ? "\\u" + hex(code, 4)
                                                                                    : "\\U" + hex(code, 8));
}
const visible = (text) => String(text).replace(HIDDEN_CHARS, escaped);
const jsonVisible = (json) => json.replace(HIDDEN_IN_JSON,
  (ch) => Array.from({ length: ch.length }, (_, i) => "\\u" + hex(ch.charCodeAt(i), 4)).join(""));
// `text` as `visible` writes it, each escape it wrote marked (`span.esc`, app.css), so an
// escaped tab (`tab\there`, marked) never looks like a backslash and a `t` the text holds
// (`tab\there` as typed, unmarked) (QA194 F3).
function visibleNodes(text) {
  const nodes = visibleParts(text).map((part) => {
    if (!part.esc) return document.createTextNode(part.text);
    const esc = document.createElement("span");
    esc.className = "esc";
    esc.textContent = part.text;
    return esc;
  });
  return nodes.length ? nodes : [document.createTextNode("")];
}
// `text` as `visible` writes it, in pieces `{text, esc}`: each escape it wrote a piece of its
// own (`esc` true), the text between them another; joined, the pieces are `visible(text)`.
function visibleParts(text) {
  const raw = String(text), parts = [];
  let last = 0;
  for (const m of raw.matchAll(HIDDEN_CHARS)) {
    if (m.index > last) parts.push({ text: raw.slice(last, m.index), esc: false });
    parts.push({ text: visible(m[0]), esc: true });
    last = m.index + m[0].length;
  }
  if (last < raw.length) parts.push({ text: raw.slice(last), esc: false });
  return parts;
}
const partsText = (parts) => parts.map((part) => part.text).join("");
// The pieces' first `length` UTF-16 units (of `partsText`), each piece keeping its mark: an
// escape cut short ("\u20…") stays marked.
function sliceParts(parts, length) {
  const out = [];
  for (const part of parts) {
    if (length <= 0) break;
    out.push(part.text.length <= length ? part : { text: part.text.slice(0, length), esc: part.esc });
    length -= part.text.length;
  }
  return out;
}
const showVisible = (node, text) => node.replaceChildren(...visibleNodes(text));
// An id as `stepahead traces show`, the API and /ui's filter take it when pasted: the id
// itself where it shows as it is, else as a reply's `x-session-id` carries it (header_ids:
// printable ASCII but `%` as it is, the rest percent-encoded UTF-8: `tab%09here`), which
// names that id alone; null where it shows as it is.
function pastableId(id) {
  const text = String(id);
  if (!text.match(HIDDEN_CHARS)) return null;
  const encoded = (ch) => { try { return encodeURIComponent(ch); } catch (_) { return "\\u" + hex(ch.charCodeAt(0), 4); } };   // a lone surrogate
  return Array.from(text, (ch) => (ch >= " " && ch <= "~" && ch !== "%") ? ch : encoded(ch)).join("");
}
// Tool names longer than this are cut in the steps table ("…"), whole in the cell's
// tooltip: a valid name is at most 64 characters, but one in a request's history is not
// checked (QA194 F2: a 300-character name made a column 2,100 px wide).
const NAME_CHARS = 48;
// A cell's text of names ("tool:a,tool:b", "a, b"): a line may break after each comma, and
// a word over NAME_CHARS characters is cut; `cut` says whether any was.
function nameParts(text) {
  let cut = false;
  const parts = String(text).split(/(?<=,)/).map((part) => part.replace(/\S+/g, (word) => {
    const chars = Array.from(word);
    if (chars.length <= NAME_CHARS) return word;
    cut = true;
    return chars.slice(0, NAME_CHARS - 1).join("") + "…";
  }));
  const nodes = parts.flatMap((part, i) => i ? [document.createElement("wbr"), ...visibleNodes(part)] : visibleNodes(part));
  return { nodes, cut };
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, k === "title" ? visible(v) : v);
  }
  for (const child of children) {
    if (child instanceof Node) node.append(child); else node.append(...visibleNodes(child));
  }
  return node;
}

// A table cell of names (`nameParts`); when a name was cut, the whole text is its tooltip.
// (`mark`: the page's own text after the names, not escaped: a no-break space and a ✓)
function namesCell(attrs, text, mark = "") {
  const { nodes, cut } = nameParts(text);
  const title = cut ? text + (attrs.title ? " — " + attrs.title : "") : attrs.title || "";
  if (mark) nodes.push(document.createTextNode(mark));
  return el("td", { ...attrs, class: "text names" + (attrs.class ? " " + attrs.class : ""), title }, ...nodes);
}

// `text` line by line: a tooltip's lines are its own newlines (a `<title>` is plain text,
// so its escapes cannot be marked: a newline its data holds is escaped by its caller)
function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = String(text).split("\n").map(visible).join("\n");
  return node;
}

// An SVG text of `parts` (`visibleParts`, `sliceParts`), each escape a `tspan.esc` (app.css),
// so the timeline tells an escaped tab (`tab\there`, marked) from a backslash and a `t` the
// text holds, as the steps table does (QA218 F2); the text between escapes is one text node.
function svgParts(tag, attrs, parts) {
  const node = svg(tag, attrs);
  let plain = "";
  const flush = () => { if (plain) node.append(document.createTextNode(visible(plain))); plain = ""; };
  for (const part of parts) {
    if (!part.esc) { plain += part.text; continue; }
    flush();
    node.append(svg("tspan", { class: "esc" }, part.text));
  }
  flush();
  return node;
}

const fmtTime = (s) => new Date(s * 1000).toLocaleString();
const fmtS = (s) => (s === null || s === undefined) ? "—" : s.toFixed(s < 10 ? 3 : 1);
const fmtMs = (s) => (s === null || s === undefined) ? "—" : (s * 1000).toFixed(1);
const count = (n, noun) => `${n} ${noun}${n === 1 ? "" : "s"}`;
// Whole percents, halves rounded up (16 of 128 is 13%), in the same float steps as
// traces_view's `_share` and `_percent`, so /ui and `stepahead traces` print the same
// number: `100 * part / whole` is exact where the answer is a half.
const roundHalfUp = (value) => Math.floor(value + 0.5);
const percent = (fraction) => roundHalfUp(100 * fraction) + "%";
const pct = (a, b) => b > 0 ? roundHalfUp(100 * a / b) + "%" : "—";
