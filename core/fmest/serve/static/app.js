// fmest page: two configurations side by side, each a form built from the API's own schema
// (POST /v1/estimate's body: every `fmest estimate` flag with its CLI group), answered by
// POST /v1/estimate and drawn as hand-written SVG (no chart library, nothing from a CDN).
"use strict";

const GIB = 1024 ** 3;
const SLOTS = ["a", "b"];
const DEFAULT_MODEL = "meta-llama/Llama-2-7b-hf";
// One colour per memory component (names of fmest.estimates.MEMORY_COMPONENTS; the traced
// plugin's names share the colour of their analytic counterpart), so a component looks the same
// in both configurations. Other names get a colour from EXTRA by a hash of the name.
const COLOURS = { weights: "#4e79a7", params: "#4e79a7", master_weights: "#a0cbe8",
  lora_adapters: "#8cd17d", gradients: "#f28e2b", grads: "#f28e2b", optimizer_states: "#59a14f",
  optimizer_state: "#59a14f", optimizer_temporaries: "#b6992d", temporaries: "#d37295",
  activations: "#e15759", logits_and_loss: "#ff9d9a", framework_buffers: "#79706e",
  cuda_context: "#bab0ac", nccl_buffers: "#9d7660", allocator_reserve: "#d4a6c8" };
const EXTRA = ["#499894", "#86bcb6", "#f1ce63", "#ffbe7d", "#fabfd2", "#b07aa1"];
const GROUPS_OPEN = new Set(["input", "training", "parallelism", "hardware"]);
const DATALISTS = { model: "dl-models", gpu: "dl-gpus", provider: "dl-providers",
  method: "dl-methods", stack: "dl-stacks" };

const state = { fields: {}, groups: [], slots: {},
  plan: { fields: {}, values: {}, slot: null, seq: 0, result: null, error: null, body: null } };
for (const s of SLOTS) state.slots[s] = { values: {}, modelConfig: null, seq: 0, result: null,
  error: null, body: null };

function colour(name) {
  if (COLOURS[name]) return COLOURS[name];
  return EXTRA[[...name].reduce((h, c) => (h * 31 + c.charCodeAt(0)) >>> 0, 7) % EXTRA.length];
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "text") node.textContent = v; else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) node.append(c);
  return node;
}

function esc(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;",
    '"': "&quot;", "'": "&#39;" }[c]));
}

async function getJSON(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.json();
}

// ---- formatting ---------------------------------------------------------------------------
const gib = (bytes) => `${(bytes / GIB).toFixed(2)} GiB`;
// A duration: the rule of fmest.output.units.duration, step for step (ms below 1 s, s with two
// decimals below 120 s, min below 2 h, h below 3 days, then days; one decimal elsewhere), so
// the page and the CLI tables read alike; tests/test_render_widths.py runs both on a few values.
function seconds(s) {
  if (s === null || s === undefined || !Number.isFinite(s)) return "-";
  if (s < 1) return `${(s * 1e3).toFixed(1)} ms`;
  if (s < 120) return `${s.toFixed(2)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  if (s < 3 * 86400) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} days`;
}
const number = (x, digits = 0) => x.toLocaleString("en-US", { maximumFractionDigits: digits,
  minimumFractionDigits: digits });
const usd = (x) => `$${number(x, 2)}`;

// ---- the URL holds the state: ?a.model=...&a.per_device_batch=4&b.gpu=... -----------------
function readURL() {
  const params = new URLSearchParams(location.search);
  for (const [key, value] of params) {
    if (key === "plan") { if (state.slots[value]) state.plan.slot = value; continue; }
    const [slot, field] = key.split(/\.(.*)/s);
    if (state.slots[slot] && state.fields[field]) state.slots[slot].values[field] = value;
    if (slot === "p" && state.plan.fields[field]) state.plan.values[field] = value;
  }
}

function writeURL() {
  const params = new URLSearchParams();
  for (const s of SLOTS) {
    for (const [field, value] of Object.entries(state.slots[s].values)) {
      if (value !== "") params.append(`${s}.${field}`, value);
    }
  }
  for (const [field, value] of Object.entries(state.plan.values)) params.append(`p.${field}`, value);
  if (state.plan.slot) params.append("plan", state.plan.slot);
  const query = params.toString();
  history.replaceState(null, "", query ? `?${query}` : location.pathname);
}

// ---- the form -------------------------------------------------------------------------------
function readSchema(openapi) {
  const body = openapi.paths["/v1/estimate"].post.requestBody.content["application/json"].schema;
  const groups = new Map();
  for (const [name, prop] of Object.entries(body.properties)) {
    if (!prop["x-group"]) continue; // job sections and `input` are not knobs
    state.fields[name] = prop;
    if (!groups.has(prop["x-group"])) groups.set(prop["x-group"], []);
    groups.get(prop["x-group"]).push(name);
  }
  state.groups = [...groups.entries()];
}

function makeInput(prop, name, value, onChange) {
  const item = prop.type === "array" ? prop.items : prop;
  let input;
  if (item.enum || item.type === "boolean") {
    input = el("select", { "data-field": name });
    input.append(el("option", { value: "", text: "(default)" }));
    for (const v of item.enum || [true, false]) input.append(el("option", { value: String(v), text: String(v) }));
  } else {
    input = el("input", { type: "text", "data-field": name, list: DATALISTS[name] || null,
      inputmode: ["integer", "number"].includes(item.type) ? "decimal" : null,
      placeholder: prop.type === "array" ? "space-separated" : "" });
  }
  input.value = value ?? "";
  input.classList.toggle("set", input.value !== "");
  input.addEventListener("change", () => onChange(input.value.trim()));
  return el("label", { title: `${prop["x-flag"]}: ${prop.description || ""}` }, prop["x-flag"], input);
}

function control(slot, name) {
  return makeInput(state.fields[name], name, state.slots[slot].values[name],
    (value) => setValue(slot, name, value));
}

function buildForm(slot) {
  const form = document.querySelector(`#slot-${slot} form.knobs`);
  form.replaceChildren();
  for (const [group, names] of state.groups) {
    const grid = el("div", { class: "grid" });
    for (const name of names) grid.append(control(slot, name));
    form.append(el("details", { open: GROUPS_OPEN.has(group), "data-group": group },
      el("summary", { text: group }), grid));
  }
  form.addEventListener("submit", (event) => event.preventDefault());
}

function syncForm(slot) {
  for (const input of document.querySelectorAll(`#slot-${slot} [data-field]`)) {
    input.value = state.slots[slot].values[input.dataset.field] ?? "";
    input.classList.toggle("set", input.value !== "");
  }
  const preset = document.querySelector(`#slot-${slot} select.preset`);
  const model = state.slots[slot].values.model || "";
  preset.value = [...preset.options].some((o) => o.value === model) ? model : "";
  const note = document.querySelector(`#slot-${slot} .upload-note`);
  note.hidden = !state.slots[slot].modelConfig;
  note.textContent = state.slots[slot].modelConfig
    ? "uploaded config.json in use (kept in this tab only, not in the link)" : "";
}

function setValue(slot, name, value) {
  if (value === "") delete state.slots[slot].values[name];
  else state.slots[slot].values[name] = value;
  if (name === "model") state.slots[slot].modelConfig = null;
  syncForm(slot);
  writeURL();
  schedule(slot);
}

// ---- request ----------------------------------------------------------------------------------
function typed(prop, text) {
  const item = prop.type === "array" ? prop.items : prop;
  if (prop.type === "array") return text.split(/[\s,]+/).filter(Boolean);
  if (item.type === "boolean") return text === "true";
  if (item.type === "integer" || item.type === "number") {
    // counts such as 2e10 or 300M go to the server as text, which parses them as the CLI does
    const n = Number(text);
    return Number.isFinite(n) && text.trim() !== "" ? n : text;
  }
  return text;
}

function requestBody(slot) {
  const s = state.slots[slot];
  const body = {};
  for (const [name, text] of Object.entries(s.values)) body[name] = typed(state.fields[name], text);
  if (s.modelConfig) body.model_config = s.modelConfig;
  return body;
}

function commandLine(slot) {
  const quote = (v) => (/^[\w.\/:+=@-]+$/.test(v) ? v : `'${v.replace(/'/g, "'\\''")}'`);
  const parts = ["fmest", "estimate"];
  for (const [name, text] of Object.entries(state.slots[slot].values)) {
    const value = typed(state.fields[name], text);
    parts.push(state.fields[name]["x-flag"], ...(Array.isArray(value) ? value : [String(value)]).map(quote));
  }
  return parts.join(" ");
}

const timers = {};
function schedule(slot) {
  clearTimeout(timers[slot]);
  timers[slot] = setTimeout(() => estimate(slot), 150);
}

async function estimate(slot) {
  const s = state.slots[slot];
  const seq = ++s.seq;
  if (!s.values.model) {
    s.result = null; s.error = null; s.body = null;
    renderAll();
    return;
  }
  s.body = requestBody(slot);
  setStatus(slot, "estimating...");
  let response, payload;
  try {
    response = await fetch("/v1/estimate", { method: "POST",
      headers: { "Content-Type": "application/json" }, body: JSON.stringify(s.body) });
    payload = await response.json();
  } catch (err) {
    payload = { error: { field: null, message: String(err), accepted: [] } };
  }
  if (seq !== s.seq) return; // a newer request for this slot is on its way
  s.result = response && response.ok ? payload : null;
  s.error = response && response.ok ? null : payload.error;
  renderAll();
  if (state.plan.slot === slot && s.result) schedulePlan();
}

function setStatus(slot, text) {
  const box = document.querySelector(`#slot-${slot} .results`);
  box.dataset.state = "loading";
  const status = box.querySelector(".status");
  if (status) status.textContent = text;
}

// ---- drawing ------------------------------------------------------------------------------------
function scaleMax() {
  let top = 0;
  for (const s of SLOTS) {
    const m = state.slots[s].result && state.slots[s].result.memory;
    if (!m) continue;
    top = Math.max(top, m.total_bytes, m.gpu_memory_bytes, ...Object.values(m.phase_peaks_bytes || {}));
  }
  return top * 1.04 || 1;
}

function niceStep(max) {
  const raw = max / GIB / 5;
  const pow = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 2.5, 5, 10].map((m) => m * pow).find((step) => step >= raw) * GIB;
}

function chartSVG(memory, top) {
  const W = 640, left = 92, right = 16, barH = 34, rowH = 18, gap = 6;
  const width = W - left - right;
  const x = (bytes) => left + (bytes / top) * width;
  const phases = Object.entries(memory.phase_peaks_bytes || {});
  const height = 14 + barH + gap * 2 + phases.length * (rowH + gap) + 26;
  const parts = [];
  parts.push(`<text x="${left - 8}" y="${14 + barH / 2 + 4}" text-anchor="end" class="lbl">peak</text>`);
  let at = 0;
  for (const [name, bytes] of Object.entries(memory.components)) {
    if (bytes <= 0) continue;
    const share = (100 * bytes) / memory.gpu_memory_bytes;
    const tip = `${name}\n${gib(bytes)} (${share.toFixed(1)}% of the GPU)`;
    parts.push(`<rect class="seg" data-component="${esc(name)}" data-bytes="${bytes}" ` +
      `data-tip="${esc(tip)}" x="${x(at).toFixed(2)}" y="14" width="${Math.max(0.5, x(at + bytes) - x(at)).toFixed(2)}" ` +
      `height="${barH}" fill="${colour(name)}"><title>${esc(tip)}</title></rect>`);
    at += bytes;
  }
  let y = 14 + barH + gap * 2;
  for (const [phase, bytes] of phases) {
    const peak = phase === memory.phase;
    const tip = `${phase} peak\n${gib(bytes)}${peak ? " (the step's peak)" : ""}`;
    parts.push(`<text x="${left - 8}" y="${y + rowH - 5}" text-anchor="end" class="lbl">${esc(phase)}</text>`);
    parts.push(`<rect class="phase" data-phase="${esc(phase)}" data-bytes="${bytes}" data-tip="${esc(tip)}" ` +
      `x="${left}" y="${y}" width="${Math.max(0.5, x(bytes) - left).toFixed(2)}" height="${rowH}" ` +
      `fill="${peak ? "#5b6475" : "#aeb5c2"}"><title>${esc(tip)}</title></rect>`);
    // the value right of the bar, or inside its end when the bar reaches the right edge
    const inside = x(bytes) + 70 > W - right;
    parts.push(`<text x="${inside ? x(bytes) - 4 : x(bytes) + 4}" y="${y + rowH - 5}" ` +
      `text-anchor="${inside ? "end" : "start"}" class="${inside ? "val-in" : "val"}">${gib(bytes)}</text>`);
    y += rowH + gap;
  }
  const axisY = y + 2;
  const step = niceStep(top);
  for (let t = 0; t <= top; t += step) {
    parts.push(`<line x1="${x(t)}" x2="${x(t)}" y1="${axisY}" y2="${axisY + 4}" stroke="#5b6475"/>`);
    parts.push(`<text x="${x(t)}" y="${axisY + 15}" text-anchor="middle" class="tick">${number(t / GIB)}</text>`);
  }
  parts.push(`<text x="${W - right}" y="${axisY + 15}" text-anchor="end" class="tick">GiB</text>`);
  const cx = x(memory.gpu_memory_bytes);
  parts.push(`<line class="capacity" data-bytes="${memory.gpu_memory_bytes}" x1="${cx}" x2="${cx}" y1="4" ` +
    `y2="${axisY}" stroke="var(--cap)" stroke-width="2" stroke-dasharray="5 3"/>`);
  parts.push(`<text x="${Math.min(cx, W - right) - 3}" y="10" text-anchor="end" class="cap">` +
    `${esc(memory.gpu)} ${gib(memory.gpu_memory_bytes)}</text>`);
  return `<svg viewBox="0 0 ${W} ${height}" role="img" aria-label="per-GPU memory against capacity">` +
    `<style>.lbl,.val,.tick{font:11px system-ui,sans-serif;fill:#5b6475}.val-in{font:11px system-ui,sans-serif;fill:#fff}.cap{font:11px system-ui,sans-serif;fill:#b3261e}</style>` +
    `${parts.join("")}</svg>`;
}

function metricsHTML(result) {
  const rows = [];
  const add = (key, label, value, raw) => rows.push(`<dt>${label}</dt><dd data-metric="${key}" ` +
    `data-value="${raw ?? ""}">${value}</dd>`);
  const m = result.memory, t = result.time, k = result.tokens, c = result.cost;
  if (m) add("total_bytes", "peak memory", `${gib(m.total_bytes)} of ${gib(m.gpu_memory_bytes)} (${esc(m.gpu)}), peak in ${esc(m.phase || "?")}`, m.total_bytes);
  if (t) add("step_seconds", "step time", seconds(t.step_seconds), t.step_seconds);
  if (k) add("tokens_per_second", "tokens/s", `${number(k.tokens_per_second)} (${number(k.tokens_per_second_per_gpu)} per GPU)`, k.tokens_per_second);
  if (t && t.mfu !== null) add("mfu", "MFU", `${(100 * t.mfu).toFixed(1)} %`, t.mfu);
  if (t && t.total_seconds !== null) add("total_seconds", "whole run", `${seconds(t.total_seconds)} (${number(t.total_steps)} steps)`, t.total_seconds);
  if (c) {
    const total = c.usd !== null ? usd(c.usd) : "- (give a dataset size or max steps)";
    add("usd", "cost", `${total} at ${usd(c.usd_per_hour)}/h, ${c.instances} × ${esc(c.instance)} (${esc(c.provider)}${c.stale ? ", STALE price" : ""})`, c.usd ?? "");
  }
  const lay = result.layout || {};
  add("layout", "layout", `${lay.world_size ?? "?"} GPU${lay.world_size === 1 ? "" : "s"}: dp ${lay.dp} tp ${lay.tp} pp ${lay.pp} cp ${lay.cp} ep ${lay.ep}`, lay.world_size);
  const p = result.provenance.memory;
  if (p) add("basis", "memory from", `${esc(p.plugin)} (${esc(p.basis)})`, p.basis);
  return `<dl class="metrics">${rows.join("")}</dl>`;
}

function renderSlot(slot, top) {
  const s = state.slots[slot];
  const box = document.querySelector(`#slot-${slot} .results`);
  box.dataset.state = s.error ? "error" : s.result ? "ok" : "empty";
  box.dataset.request = s.body ? JSON.stringify(s.body) : "";
  if (s.error) {
    const accepted = s.error.accepted && s.error.accepted.length
      ? `\naccepted: ${s.error.accepted.slice(0, 30).join(", ")}` : "";
    box.innerHTML = `<p class="error" data-field="${esc(s.error.field ?? "")}">` +
      `${esc(s.error.field ? `${s.error.field}: ` : "")}${esc(s.error.message)}${esc(accepted)}</p>`;
    return;
  }
  if (!s.result) {
    box.innerHTML = `<p class="status">Pick a model preset or upload a config.json.</p>`;
    return;
  }
  const r = s.result, m = r.memory;
  const parts = [];
  if (m) {
    const fits = m.fits === true;
    parts.push(`<div class="verdict ${fits ? "fits" : "nofit"}" data-fits="${m.fits}" ` +
      `data-max-micro-batch="${m.max_micro_batch ?? ""}" data-headroom-bytes="${m.headroom_bytes}">` +
      `${fits ? "FITS" : "DOES NOT FIT"}: headroom ${(m.headroom_bytes / GIB).toFixed(2)} GiB; ` +
      `largest micro-batch that fits: <span class="mmb">${m.max_micro_batch ?? "-"}</span></div>`);
    parts.push(`<div class="chart" data-total-bytes="${m.total_bytes}" data-gpu-memory-bytes="${m.gpu_memory_bytes}">${chartSVG(m, top)}</div>`);
    parts.push(`<div class="legend">${Object.entries(m.components).filter(([, b]) => b > 0)
      .map(([n, b]) => `<span><span class="sw" style="background:${colour(n)}"></span>${esc(n)} ${gib(b)}</span>`).join("")}</div>`);
  }
  parts.push(metricsHTML(r));
  if (r.warnings.length) parts.push(`<ul class="warnings">${r.warnings.map((w) => `<li>${esc(w)}</li>`).join("")}</ul>`);
  parts.push(`<div class="command" title="the same estimate on the command line">${esc(commandLine(slot))}` +
    `${s.modelConfig ? " (with the uploaded config.json: save it and pass --model PATH)" : ""}</div>`);
  box.innerHTML = parts.join("");
}

function renderAll() {
  const top = scaleMax();
  for (const s of SLOTS) renderSlot(s, top);
}

// ---- the plan view: fmest plan for one configuration's job, cost against run time ------------
const GPU_COLOURS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
  "#ff9da7", "#9c755f", "#bab0ac"];

function buildPlanForm(openapi) {
  const op = openapi.paths["/v1/plan"];
  const body = op && op.post.requestBody.content["application/json"].schema;
  if (!body || !body.properties) return false;
  for (const [name, prop] of Object.entries(body.properties)) {
    if (prop["x-group"] !== "plan") continue;
    state.plan.fields[name] = prop;
  }
  return Object.keys(state.plan.fields).length > 0;
}

function renderPlanForm() {
  const grid = el("div", { class: "grid" });
  for (const [name, prop] of Object.entries(state.plan.fields)) {
    grid.append(makeInput(prop, name, state.plan.values[name], (value) => {
      if (value === "") delete state.plan.values[name]; else state.plan.values[name] = value;
      writeURL();
      if (state.plan.slot) schedulePlan();
    }));
  }
  document.querySelector("#plan form.plan-knobs").replaceChildren(grid);
}

let planTimer = null;
function schedulePlan() {
  clearTimeout(planTimer);
  planTimer = setTimeout(runPlan, 300);
}

async function runPlan() {
  const plan = state.plan;
  const slot = plan.slot;
  if (!slot || !state.slots[slot].values.model) return;
  const seq = ++plan.seq;
  const body = requestBody(slot);
  for (const [name, text] of Object.entries(plan.values)) body[name] = typed(plan.fields[name], text);
  plan.body = body;
  const box = document.querySelector("#plan .plan-results");
  box.dataset.state = "loading";
  box.innerHTML = `<p class="status">planning configuration ${slot.toUpperCase()}...</p>`;
  let response, payload;
  try {
    response = await fetch("/v1/plan", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body) });
    payload = await response.json();
  } catch (err) {
    payload = { error: { field: null, message: String(err), accepted: [] } };
  }
  if (seq !== plan.seq) return;
  plan.result = response && response.ok ? payload : null;
  plan.error = response && response.ok ? null : payload.error;
  renderPlan();
}

function axis(values) {
  // log scale when the values span more than 20x, else linear with round ticks
  const lo = Math.min(...values), hi = Math.max(...values);
  const log = lo > 0 && hi / lo > 20;
  if (log) {
    const a = Math.log10(lo / 1.3), b = Math.log10(hi * 1.3);
    return { log, scale: (v) => (Math.log10(v) - a) / (b - a),
      ticks: Array.from({ length: Math.floor(b) - Math.ceil(a) + 1 }, (_, i) => 10 ** (Math.ceil(a) + i)) };
  }
  const span = (hi - lo) || Math.abs(hi) || 1;
  const raw = span / 5, pow = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * pow).find((x) => x >= raw);
  const a = Math.floor((lo - span * 0.05) / step) * step, b = Math.ceil((hi + span * 0.05) / step) * step;
  const ticks = [];
  for (let t = Math.max(a, lo >= 0 && a < 0 ? 0 : a); t <= b + step / 2; t += step) ticks.push(+t.toPrecision(12));
  return { log, scale: (v) => (v - a) / (b - a || 1), ticks };
}

function planSVG(plans) {
  const withRun = plans.every((p) => p.usd !== null && p.total_seconds !== null);
  const pts = plans.map((p) => ({ p, x: withRun ? p.total_seconds / 3600 : p.step_seconds,
    y: withRun ? p.usd : p.usd_per_hour }));
  const W = 900, H = 340, left = 70, right = 20, top = 14, bottom = 44;
  const ax = axis(pts.map((q) => q.x)), ay = axis(pts.map((q) => q.y));
  const X = (v) => left + ax.scale(v) * (W - left - right);
  const Y = (v) => H - bottom - ay.scale(v) * (H - top - bottom);
  const gpus = [...new Set(plans.map((p) => p.gpu))];
  const parts = [];
  const fmtTick = (v) => (v >= 100 || Number.isInteger(v) ? number(v) : v >= 1 ? number(v, 1)
    : String(+v.toPrecision(2)));
  for (const t of ax.ticks) parts.push(`<line x1="${X(t)}" x2="${X(t)}" y1="${top}" y2="${H - bottom}" stroke="#eceff3"/>` +
    `<text x="${X(t)}" y="${H - bottom + 14}" text-anchor="middle" class="tick">${fmtTick(t)}</text>`);
  for (const t of ay.ticks) parts.push(`<line x1="${left}" x2="${W - right}" y1="${Y(t)}" y2="${Y(t)}" stroke="#eceff3"/>` +
    `<text x="${left - 6}" y="${Y(t) + 4}" text-anchor="end" class="tick">${fmtTick(t)}</text>`);
  parts.push(`<text x="${(W + left) / 2}" y="${H - 8}" text-anchor="middle" class="lbl">` +
    `${withRun ? "run time, hours" : "step time, seconds"}${ax.log ? " (log)" : ""}</text>`);
  parts.push(`<text x="14" y="${(H - bottom) / 2}" transform="rotate(-90 14 ${(H - bottom) / 2})" text-anchor="middle" class="lbl">` +
    `${withRun ? "run cost, USD" : "USD per hour"}${ay.log ? " (log)" : ""}</text>`);
  const front = pts.filter((q) => q.p.pareto).sort((a, b) => a.x - b.x);
  if (front.length > 1) parts.push(`<polyline class="front" fill="none" stroke="#1d2330" stroke-width="1.5" ` +
    `stroke-dasharray="4 3" points="${front.map((q) => `${X(q.x).toFixed(1)},${Y(q.y).toFixed(1)}`).join(" ")}"/>`);
  for (const q of pts) {
    const p = q.p;
    const tip = `#${p.rank} ${p.gpus} × ${p.gpu} (${p.nodes} node${p.nodes === 1 ? "" : "s"}), ${p.layout}, ${p.strategy}\n` +
      `micro-batch ${p.micro_batch_size} × accum ${p.grad_accum_steps}, checkpointing ${p.checkpointing}\n` +
      `${withRun ? `${usd(p.usd)}, ${seconds(p.total_seconds)}` : `${usd(p.usd_per_hour)}/h, step ${seconds(p.step_seconds)}`}` +
      `${p.pareto ? "\non the Pareto front" : ""}`;
    parts.push(`<circle class="plan-point" data-rank="${p.rank}" data-pareto="${p.pareto}" data-usd="${p.usd ?? ""}" ` +
      `data-total-seconds="${p.total_seconds ?? ""}" data-tip="${esc(tip)}" cx="${X(q.x).toFixed(1)}" cy="${Y(q.y).toFixed(1)}" ` +
      `r="${p.pareto ? 7 : 5}" fill="${GPU_COLOURS[gpus.indexOf(p.gpu) % GPU_COLOURS.length]}" ` +
      `stroke="${p.pareto ? "#1d2330" : "#fff"}" stroke-width="1.5"><title>${esc(tip)}</title></circle>`);
  }
  const legend = gpus.map((g, i) => `<span><span class="sw" style="background:${GPU_COLOURS[i % GPU_COLOURS.length]}"></span>${esc(g)}</span>`).join("") +
    `<span>dashed: the Pareto front (nothing both cheaper and faster)</span>`;
  return `<div class="scatter"><svg viewBox="0 0 ${W} ${H}" role="img" aria-label="plans: cost against time">` +
    `<style>.lbl,.tick{font:11px system-ui,sans-serif;fill:#5b6475}</style>${parts.join("")}</svg></div>` +
    `<div class="legend">${legend}</div>`;
}

function planTable(plans) {
  const rows = plans.map((p) => `<tr class="${p.pareto ? "pareto" : ""}" data-rank="${p.rank}">` +
    `<td>${p.rank}</td><td>${p.gpus} × ${esc(p.gpu)}</td><td>${esc(p.layout)}</td><td>${esc(p.strategy)}</td>` +
    `<td>${p.micro_batch_size} × ${p.grad_accum_steps}</td><td>${esc(p.checkpointing)}</td>` +
    `<td>${(p.memory_bytes / GIB).toFixed(1)} / ${(p.gpu_memory_bytes / GIB).toFixed(0)}</td>` +
    `<td>${seconds(p.step_seconds)}</td><td>${p.total_seconds !== null ? seconds(p.total_seconds) : "-"}</td>` +
    `<td>${p.usd !== null ? usd(p.usd) : "-"}</td><td>${esc(p.provider || "")}</td><td>${p.pareto ? "✓" : ""}</td></tr>`);
  return `<table class="plans"><thead><tr><th>#</th><th>GPUs</th><th>layout</th><th>sharding</th>` +
    `<th>micro-batch × accum</th><th>checkpointing</th><th>GiB / GPU</th><th>step</th><th>run</th>` +
    `<th>cost</th><th>provider</th><th>Pareto</th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
}

function renderPlan() {
  const plan = state.plan;
  const box = document.querySelector("#plan .plan-results");
  box.dataset.request = plan.body ? JSON.stringify(plan.body) : "";
  if (plan.error) {
    box.dataset.state = "error";
    box.innerHTML = `<p class="error" data-field="${esc(plan.error.field ?? "")}">` +
      `${esc(plan.error.field ? `${plan.error.field}: ` : "")}${esc(plan.error.message)}</p>`;
    return;
  }
  const r = plan.result;
  if (!r) { box.dataset.state = "empty"; box.innerHTML = ""; return; }
  box.dataset.state = "ok";
  const head = `<p class="status">configuration ${plan.slot.toUpperCase()}: ${number(r.evaluated)} configurations ` +
    `evaluated, ${r.plans.length} shown (objective ${esc(r.objective)}).</p>`;
  const warn = r.warnings && r.warnings.length ? `<ul class="warnings">${r.warnings.map((w) => `<li>${esc(w)}</li>`).join("")}</ul>` : "";
  box.innerHTML = r.plans.length ? head + planSVG(r.plans) + planTable(r.plans) + warn
    : `${head}<p class="error">no configuration fits the constraints</p>${warn}`;
}

// ---- tooltips: values on hover ------------------------------------------------------------------
function tooltips() {
  const tip = document.getElementById("tooltip");
  document.addEventListener("mousemove", (event) => {
    const target = event.target.closest && event.target.closest("[data-tip]");
    if (!target) { tip.hidden = true; return; }
    tip.textContent = target.getAttribute("data-tip");
    tip.style.left = `${event.clientX + 12}px`;
    tip.style.top = `${event.clientY + 12}px`;
    tip.hidden = false;
  });
}

// ---- start --------------------------------------------------------------------------------------
function buildSlot(slot, models) {
  const node = document.getElementById("slot-template").content.firstElementChild.cloneNode(true);
  node.id = `slot-${slot}`;
  node.dataset.slot = slot;
  node.querySelector("h2").textContent = `Configuration ${slot.toUpperCase()}`;
  const other = SLOTS.find((s) => s !== slot);
  const copy = node.querySelector(".copy-other");
  copy.textContent = `copy to ${other.toUpperCase()}`;
  copy.addEventListener("click", () => {
    state.slots[other].values = { ...state.slots[slot].values };
    state.slots[other].modelConfig = state.slots[slot].modelConfig;
    syncForm(other); writeURL(); schedule(other);
  });
  const preset = node.querySelector("select.preset");
  for (const m of models) preset.append(el("option", { value: m.name, text: m.name }));
  preset.addEventListener("change", () => { if (preset.value) setValue(slot, "model", preset.value); });
  node.querySelector(".config-file").addEventListener("change", async (event) => {
    const file = event.target.files[0];
    if (!file) return;
    let config;
    try { config = JSON.parse(await file.text()); } catch (err) {
      state.slots[slot].error = { field: "config.json", message: `not JSON: ${err.message}`, accepted: [] };
      state.slots[slot].result = null; renderAll(); return;
    }
    state.slots[slot].values.model = config._name_or_path || file.name.replace(/\.json$/, "");
    state.slots[slot].modelConfig = config;
    syncForm(slot); writeURL(); schedule(slot);
  });
  document.getElementById("slots").append(node);
  buildForm(slot);
}

function datalist(id, values) {
  const list = el("datalist", { id });
  for (const v of values) list.append(el("option", { value: v }));
  document.body.append(list);
}

async function boot() {
  const [openapi, models, gpus, prices, stacks] = await Promise.all([getJSON("/openapi.json"),
    getJSON("/v1/models"), getJSON("/v1/gpus"), getJSON("/v1/prices"), getJSON("/v1/stacks")]);
  readSchema(openapi);
  const planning = buildPlanForm(openapi);
  datalist("dl-models", models.map((m) => m.name));
  datalist("dl-gpus", gpus.map((g) => g.name));
  datalist("dl-providers", ["cheapest", ...new Set(prices.map((p) => p.provider))]);
  datalist("dl-methods", ["theory", "traced", "learned", "hybrid"]);
  datalist("dl-stacks", stacks.map((st) => st.name));
  readURL();
  if (!SLOTS.some((s) => Object.keys(state.slots[s].values).length)) {
    const first = models.find((m) => m.name === DEFAULT_MODEL) || models[0];
    if (first) state.slots.a.values.model = first.name;
  }
  for (const s of SLOTS) { buildSlot(s, models); syncForm(s); }
  if (planning) {
    document.getElementById("plan").hidden = false;
    renderPlanForm();
    for (const button of document.querySelectorAll("#plan [data-plan]")) {
      button.addEventListener("click", () => { state.plan.slot = button.dataset.plan; writeURL(); runPlan(); });
    }
  }
  document.getElementById("share").addEventListener("click", (event) => {
    event.preventDefault();
    navigator.clipboard && navigator.clipboard.writeText(location.href);
  });
  tooltips();
  writeURL();
  for (const s of SLOTS) estimate(s);
}

boot().catch((err) => {
  document.getElementById("slots").textContent = `could not start: ${err.message}`;
});
