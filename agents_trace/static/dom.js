// stepahead trace viewer: the page's text and nodes. Every text written shows control and
// bidi characters escaped (`visible`), so it cannot hide or reorder what is around it;
// nodes are made with textContent and attributes, never innerHTML. Loaded before app.js.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);
// Characters that would hide or reorder the text around them if shown as they are (a
// tool output `invoice_\u202etxt.exe` reads backwards): C0 and C1 controls, the bidi
// controls (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069) and the line and
// paragraph separators. `visible` writes each as `stepahead traces` prints it (`\n`,
// `\x1b`, `\u202e`); in content, JSON.stringify has escaped the C0 controls already and
// `jsonVisible` writes the rest as JSON escapes (`\u202e`), so it stays valid JSON.
const HIDDEN_CHARS = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
const HIDDEN_IN_JSON = /[\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
const NAMED_ESCAPES = { "\t": "\\t", "\n": "\\n", "\r": "\\r" };
const hex = (ch, digits) => ch.charCodeAt(0).toString(16).padStart(digits, "0");
const visible = (text) => String(text).replace(HIDDEN_CHARS,
  (ch) => NAMED_ESCAPES[ch] || (ch.charCodeAt(0) < 0x100 ? "\\x" + hex(ch, 2) : "\\u" + hex(ch, 4)));
const jsonVisible = (json) => json.replace(HIDDEN_IN_JSON, (ch) => "\\u" + hex(ch, 4));

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, k === "title" ? visible(v) : v);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(visible(child)));
  }
  return node;
}

// `text` line by line: a tooltip's lines are its own newlines
function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = String(text).split("\n").map(visible).join("\n");
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
