// stepahead trace viewer: a session's charts (the steps' timeline and the context
// growth), drawn as SVG nodes with dom.js. Loaded before app.js.
"use strict";

// The round tick spacing (1, 2 or 5 times a power of ten) nearest above `rough` seconds.
function niceStep(rough) {
  const power = 10 ** Math.floor(Math.log10(rough));
  return [1, 2, 5, 10].map((m) => m * power).find((step) => step >= rough * (1 - 1e-9));
}

function renderGantt(steps) {
  const box = $("gantt");
  box.replaceChildren();
  if (!steps.length) return;
  const start = Math.min(...steps.map((s) => s.prev_ended_s ?? s.arrived_s));
  const end = Math.max(...steps.map((s) => s.ended_s));
  const span = Math.max(end - start, 1e-3);
  const labelW = 170, plotW = 760, textW = 420, rowH = 22, top = 24;
  const x = (t) => labelW + (t - start) / span * plotW;
  const height = top + steps.length * rowH + 8;
  const root = svg("svg", { width: labelW + plotW + textW, height, id: "gantt-svg" });
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
    group.append(svg("text", { x: 4, y: y + 14 }, `#${s.index} after ${s.after_label}`));
    const tools = s.after_tools.map((c) => c.name).join(", ");
    if (s.after_kind === "tools" && s.prev_ended_s !== null) {
      const bar = svg("rect", { x: x(s.prev_ended_s), y: y + 3, height: rowH - 6, fill: "#e0a030",
        width: Math.max(1, x(s.arrived_s) - x(s.prev_ended_s)), class: "tool-bar" });
      bar.append(svg("title", {}, `tool run: ${tools}\n${fmtS(s.gap_s)} s`));
      group.append(bar);
    }
    const llmW = Math.max(2, x(s.ended_s) - x(s.arrived_s));
    const llm = svg("rect", { x: x(s.arrived_s), y: y + 3, width: llmW, height: rowH - 6,
      fill: s.error ? "#c62828" : "#3b7dd8", class: "llm-bar" });
    llm.append(svg("title", {}, `chat ${s.model} (step ${s.index})\nprompt ${s.num_input_tokens}` +
      ` tok, cached ${s.num_cached_tokens}, output ${s.num_output_tokens}\nTTFT ${fmtMs(s.ttft_s)}` +
      ` ms, worker ${s.worker || "—"}${s.service_tier === "flex" ? " (flex tier)" : ""}\nasked for: ${askedFor(s)}` +
      (s.response_id ? `\nrequest ${s.response_id}` : "")));
    group.append(llm);
    if (s.ttft_s !== null && !s.error) {
      group.append(svg("rect", { x: x(s.arrived_s), y: y + 3, height: rowH - 6, fill: "#1f4f99",
        width: Math.min(llmW, Math.max(1, s.ttft_s / span * plotW)) }));
    }
    const label = (tools ? `${tools} ${fmtS(s.gap_s)} s → ` : "") +
      `chat ${s.num_cached_tokens}/${s.num_input_tokens} tok cached → ${askedFor(s)}`;
    group.append(svg("text", { x: labelW + plotW + 6, y: y + 14 }, label));
    root.append(group);
  });
  box.append(root);
}

function renderContextChart(steps) {
  const box = $("context-chart");
  box.replaceChildren();
  if (!steps.length) return;
  const left = 60, right = 50, top = 10, plotH = 160, bottom = 24;
  const barW = Math.max(6, Math.min(40, 900 / steps.length));
  const width = left + steps.length * barW + right;
  const maxTokens = Math.max(1, ...steps.map((s) => s.num_input_tokens));
  const y = (tokens) => top + plotH - tokens / maxTokens * plotH;
  const root = svg("svg", { width, height: top + plotH + bottom, id: "context-svg" });
  root.append(svg("text", { x: 4, y: top + 8 }, String(maxTokens)));
  root.append(svg("text", { x: 4, y: top + plotH }, "0"));
  root.append(svg("text", { x: width - right + 4, y: top + 8 }, "100%"));
  const points = [];
  steps.forEach((s, i) => {
    const bx = left + i * barW;
    const total = svg("rect", { x: bx + 1, y: y(s.num_input_tokens), width: barW - 2,
      height: top + plotH - y(s.num_input_tokens), fill: "#9fb7d6" });
    total.append(svg("title", {}, `step ${s.index}: prompt ${s.num_input_tokens} tok, cached ` +
      `${s.num_cached_tokens} (${pct(s.num_cached_tokens, s.num_input_tokens)})`));
    root.append(total);
    root.append(svg("rect", { x: bx + 1, y: y(s.num_cached_tokens), width: barW - 2,
      height: top + plotH - y(s.num_cached_tokens), fill: "#2e7d32" }));
    const hit = s.num_input_tokens > 0 ? s.num_cached_tokens / s.num_input_tokens : 0;
    points.push(`${bx + barW / 2},${top + plotH - hit * plotH}`);
    if (steps.length <= 60 || i % Math.ceil(steps.length / 60) === 0) {
      root.append(svg("text", { x: bx + barW / 2, y: top + plotH + 14, "text-anchor": "middle" },
        String(s.index)));
    }
  });
  root.append(svg("polyline", { points: points.join(" "), fill: "none", stroke: "#7b1fa2",
    "stroke-width": 2 }));
  box.append(root);
}
