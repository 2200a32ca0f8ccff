// fmest page: two configurations side by side, each a form built from the API's own schema
// (POST /v1/estimate's body: every `fmest estimate` flag with its CLI group), answered by
// POST /v1/estimate and drawn as hand-written SVG (no chart library, nothing from a CDN).
// Each answer shows what it assumed (the resolved job and where each value came from), its
// uncertainty (P10-P90), and, with explain on, every candidate answer and the rule that chose.
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
  cuda_context: "#bab0ac", nccl_buffers: "#9d7660", allocator_reserve: "#d4a6c8",
  kv_cache: "#76b7b2", cuda_graphs: "#edc948" };
const EXTRA = ["#499894", "#86bcb6", "#f1ce63", "#ffbe7d", "#fabfd2", "#b07aa1"];
const GROUPS_OPEN = new Set(["input", "training", "parallelism", "hardware"]);
const DATALISTS = { model: "dl-models", gpu: "dl-gpus", provider: "dl-providers",
  method: "dl-methods", stack: "dl-stacks" };

// Labels with units for the inputs; the flag and its description are the label's tooltip. A
// flag missing here is labelled from its schema description (so a new flag still reads well).
const LABELS = {
  model: "Model", dtype: "Compute dtype", precision: "Precision policy",
  seq_len: "Sequence length (tokens)", per_device_batch: "Micro-batch per GPU (samples)",
  grad_accum: "Gradient accumulation (steps)", technique: "What is trained",
  lora: "LoRA", qlora: "QLoRA", lora_rank: "LoRA rank", lora_alpha: "LoRA alpha",
  lora_dropout: "LoRA dropout (0-1)", kbit_prep: "PEFT k-bit preparation",
  lora_target_modules: "LoRA target modules", quant_bits: "QLoRA base weight bits",
  optimizer: "Optimizer", optimizer_impl: "Optimizer implementation",
  optimizer_in_backward: "Optimizer step fused into backward",
  grad_checkpoint: "Activation checkpointing", flashattn: "Flash attention",
  attn: "Attention implementation", fused_loss: "Fused cross-entropy",
  loss: "Cross-entropy implementation", activation_offload: "Offload activations to CPU",
  compile: "torch.compile", stack: "Training stack", liger: "Liger kernels",
  dp: "Data-parallel degree (GPUs)", tp: "Tensor-parallel degree (GPUs)",
  pp: "Pipeline-parallel stages", cp: "Context-parallel degree (GPUs)",
  ep: "Expert-parallel degree (GPUs)", expert_tp: "Expert tensor-parallel size (GPUs)",
  sequence_parallel: "Sequence parallelism",
  pp_schedule: "Pipeline schedule", pp_virtual_stages: "Model chunks per stage",
  zero: "DeepSpeed ZeRO stage", fsdp: "FSDP sharding",
  fsdp_backward_prefetch: "FSDP backward prefetch", sharding: "Sharding strategy",
  tp_comm_overlap: "Overlap TP communication", async_tp: "Async tensor parallelism",
  distributed_optimizer: "Distributed optimizer", hsdp_shard_size: "HSDP shard group (GPUs)",
  cpu_offload: "CPU offload", gpu: "GPU", gpus_per_node: "GPUs per node", nodes: "Nodes",
  inter_node_gbps: "Network between nodes (Gb/s per GPU)",
  dataset_tokens: "Dataset size (tokens)", num_samples: "Dataset size (samples)",
  avg_seq_len: "Average sample length (tokens)", epochs: "Epochs",
  max_steps: "Run length (optimizer steps)", dataset: "Dataset file on the server",
  provider: "Cloud provider", region: "Region", price_type: "Price type",
  price_per_gpu_hour: "Price (USD per GPU-hour)", mode: "Mode",
  batch: "Concurrent sequences", context: "Context per sequence (tokens)",
  output_tokens: "Generated tokens per sequence", kv_dtype: "KV-cache dtype",
  kv_block_size: "KV block (tokens)", quantization: "Weight format",
  group_size: "Quantization group size", runtime: "Serving runtime",
  gpu_memory_utilization: "GPU memory share of the runtime (0-1)",
  max_num_batched_tokens: "Largest prefill chunk (tokens)", image_size: "Image side (pixels)",
  images_per_sample: "Images per sample", train_vision_tower: "Train the vision tower",
  source_len: "Encoder length (tokens)", target_len: "Decoder length (tokens)",
  hidden_size: "Hidden size", num_layers: "Layers", num_heads: "Attention heads",
  num_kv_heads: "Key/value heads", intermediate_size: "MLP width",
  vocab_size: "Vocabulary size", params: "Parameters (count)",
  activation_factor: "Activation multiplier", fragmentation_gib: "Fragmentation (GiB)",
  misc_overhead_gib: "Other memory (GiB)", safety_margin: "Safety margin (share of the GPU)",
  method: "Answer policy", mfu: "MFU override (0-1)", explain: "Explain the answer",
  learned_model: "Learned-model bundle",
  // fmest plan's flags
  gpus: "GPU types to try", max_gpus: "At most (GPUs)", budget_usd: "Budget (USD)",
  deadline_hours: "Deadline (hours)", objective: "Objective", top: "Plans shown",
};

// The job field each flag sets (fmest.flags.Flag.path; the OpenAPI schema does not carry it):
// the section named by the flag's group and the flag's JSON name, but for these.
const SECTION_OF_GROUP = { training: "training", parallelism: "parallelism", hardware: "hardware",
  workload: "workload", pricing: "pricing", answer: "options", inference: "inference",
  vision: "training", calibration: "calibration" };
const PATHS = { model: "model", mode: "mode", dtype: "training.dtype",
  per_device_batch: "training.micro_batch_size", grad_accum: "training.grad_accum_steps",
  quant_bits: "training.quantization_bits", attn: "training.attention",
  flashattn: "training.attention", fused_loss: "training.loss", lora: "training.technique",
  qlora: "training.technique", grad_checkpoint: "training.activation_checkpointing",
  zero: "parallelism.zero_stage", dataset: "workload.dataset_path" };
// flags that set another flag's field (--lora is --technique lora)
const ALIASES = new Set(["flashattn", "fused_loss", "lora", "qlora"]);

const state = { fields: {}, groups: [], paths: {}, slots: {},
  plan: { fields: {}, values: {}, slot: null, seq: 0, result: null, error: null, body: null } };
for (const s of SLOTS) state.slots[s] = { values: {}, modelConfig: null, seq: 0, result: null,
  error: null, body: null, errorBody: null, pending: null, controller: null, started: 0,
  notice: null };

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
const percent = (p) => `${(100 * p).toFixed(0)} %`;
const isNum = (x) => typeof x === "number" && Number.isFinite(x);

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
function groupKey(group) {
  return group.split(/[\s(]/)[0].replace(/-.*/, "");
}

function readSchema(openapi) {
  const body = openapi.paths["/v1/estimate"].post.requestBody.content["application/json"].schema;
  const groups = new Map();
  for (const [name, prop] of Object.entries(body.properties)) {
    if (!prop["x-group"]) continue; // job sections and `input` are not knobs
    state.fields[name] = prop;
    const section = SECTION_OF_GROUP[groupKey(prop["x-group"])];
    const path = PATHS[name] || (section ? `${section}.${name}` : null);
    if (path) state.paths[name] = path;
    if (!groups.has(prop["x-group"])) groups.set(prop["x-group"], []);
    groups.get(prop["x-group"]).push(name);
  }
  state.groups = [...groups.entries()];
}

// "tokens per sample (default 2048)" -> the label's fallback and the default's placeholder
function labelOf(name, prop) {
  if (LABELS[name]) return LABELS[name];
  const text = (prop.description || "").split(/[;(:]/)[0].trim();
  return text ? text[0].toUpperCase() + text.slice(1) : prop["x-flag"] || name;
}

function describedDefault(prop) {
  const match = /default:?\s+([^);,]+)/.exec(prop.description || "");
  return match ? match[1].trim() : "";
}

// the input of a job path or a flag's JSON name (an error's `field`)
function fieldOfPath(field) {
  if (!field) return null;
  if (state.fields[field]) return field;
  const exact = Object.entries(state.paths).find(([name, path]) => path === field && !ALIASES.has(name));
  if (exact) return exact[0];
  const last = field.split(".").pop();
  return state.fields[last] ? last : null;
}

function fieldLabel(name) {
  const prop = state.fields[name];
  return prop ? `${labelOf(name, prop)} (${prop["x-flag"]})` : name;
}

function makeInput(prop, name, value, onChange) {
  const item = prop.type === "array" ? prop.items : prop;
  const fallback = describedDefault(prop);
  let input;
  if (item.enum || item.type === "boolean") {
    input = el("select", { "data-field": name, "aria-label": labelOf(name, prop) });
    input.append(el("option", { value: "", text: fallback ? `(default: ${fallback})` : "(default)" }));
    for (const v of item.enum || [true, false]) input.append(el("option", { value: String(v), text: String(v) }));
  } else {
    input = el("input", { type: "text", "data-field": name, list: DATALISTS[name] || null,
      inputmode: ["integer", "number"].includes(item.type) ? "decimal" : null,
      placeholder: fallback || (prop.type === "array" ? "space-separated" : "default") });
  }
  input.value = value ?? "";
  input.classList.toggle("set", input.value !== "");
  input.addEventListener("change", () => onChange(input.value.trim()));
  return el("label", { title: `${prop["x-flag"]}: ${prop.description || ""}`, "data-label": name },
    el("span", { class: "name", text: labelOf(name, prop) }), input);
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

function jobValue(job, path) {
  return path.split(".").reduce((o, k) => (o && typeof o === "object" ? o[k] : undefined), job);
}

function syncForm(slot) {
  const s = state.slots[slot];
  const job = s.result && s.result.job;
  for (const input of document.querySelectorAll(`#slot-${slot} form.knobs [data-field]`)) {
    const name = input.dataset.field;
    input.value = s.values[name] ?? "";
    input.classList.toggle("set", input.value !== "");
    // the placeholder is the value the last answer assumed, else the described default
    const alias = ALIASES.has(name); // --lora sets technique: its own default is false
    const assumed = job && state.paths[name] && !alias ? jobValue(job, state.paths[name]) : undefined;
    const shown = assumed === undefined || assumed === null || typeof assumed === "object"
      ? describedDefault(state.fields[name]) : String(assumed);
    if (input.tagName === "SELECT") input.options[0].textContent = shown ? `(default: ${shown})` : "(default)";
    else if (shown) input.placeholder = shown;
  }
  const preset = document.querySelector(`#slot-${slot} select.preset`);
  const model = s.values.model || "";
  preset.value = [...preset.options].some((o) => o.value === model) ? model : "";
  const note = document.querySelector(`#slot-${slot} .upload-note`);
  note.hidden = !s.modelConfig;
  note.textContent = s.modelConfig
    ? "uploaded config.json in use (kept in this tab only, not in the link)" : "";
  // inference mode: its knobs open, the training-only run length closed
  const inference = isInference(slot);
  const node = document.getElementById(`slot-${slot}`);
  if (node.dataset.mode !== (inference ? "inference" : "training")) {
    node.dataset.mode = inference ? "inference" : "training";
    for (const d of node.querySelectorAll("form.knobs details")) {
      const key = groupKey(d.dataset.group);
      if (key === "inference") d.open = inference;
      if (key === "workload") d.open = false;
    }
  }
}

function isInference(slot) {
  const s = state.slots[slot];
  if (s.values.mode) return s.values.mode === "inference";
  return Boolean(s.result && s.result.job && s.result.job.mode === "inference");
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

function commandLine(slot, values) {
  const quote = (v) => (/^[\w.\/:+=@-]+$/.test(v) ? v : `'${v.replace(/'/g, "'\\''")}'`);
  const parts = ["fmest", "estimate"];
  for (const [name, text] of Object.entries(values || state.slots[slot].values)) {
    if (name === "model_config") continue;
    const value = typeof text === "string" ? typed(state.fields[name], text) : text;
    parts.push(state.fields[name]["x-flag"], ...(Array.isArray(value) ? value : [String(value)]).map(quote));
  }
  return parts.join(" ");
}

const timers = {};
function schedule(slot) {
  clearTimeout(timers[slot]);
  timers[slot] = setTimeout(() => estimate(slot), 150);
}

// One request per slot at a time: a newer one aborts the older; "cancel" aborts it and keeps
// the last answer. The old answer stays on screen, greyed, while the new one is computed.
async function estimate(slot) {
  const s = state.slots[slot];
  const seq = ++s.seq;
  if (s.controller) s.controller.abort();
  s.controller = null; s.pending = null; s.notice = null;
  if (!s.values.model) {
    s.result = null; s.error = null; s.body = null;
    renderAll();
    return;
  }
  const body = requestBody(slot);
  const controller = new AbortController();
  s.controller = controller; s.pending = body; s.started = performance.now();
  renderAll();
  let response = null, payload = null;
  try {
    response = await fetch("/v1/estimate", { method: "POST", signal: controller.signal,
      headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    payload = await response.json().catch(() => null);
  } catch (err) {
    if (seq !== s.seq) return; // a newer request for this slot replaced this one
    s.controller = null; s.pending = null;
    if (err.name === "AbortError") {
      s.notice = "Cancelled. The answer shown is the last one that finished.";
    } else {
      s.error = { field: null, message: `could not reach the server: ${err.message}`, accepted: [] };
      s.errorBody = body;
    }
    renderAll();
    return;
  }
  if (seq !== s.seq) return; // a newer request for this slot is on its way
  s.controller = null; s.pending = null;
  if (response.ok && payload) {
    // a multi-job EstimateInput answers {"jobs": [...]}: the page shows the first
    s.result = payload.jobs ? payload.jobs[0] : payload;
    s.body = body; s.error = null; s.errorBody = null;
  } else {
    s.error = Object.assign({ field: null, message: `HTTP ${response.status}`, accepted: [] },
      payload && payload.error, { status: response.status });
    s.errorBody = body;
  }
  syncForm(slot);
  renderAll();
  if (state.plan.slot === slot && s.result && !s.error) schedulePlan();
}

function cancel(slot) {
  const s = state.slots[slot];
  if (s.controller) s.controller.abort();
}

// the elapsed seconds of every running request, ten times a second
setInterval(() => {
  for (const slot of SLOTS) {
    const s = state.slots[slot];
    if (!s.pending) continue;
    const node = document.querySelector(`#slot-${slot} .loading .elapsed`);
    if (node) node.textContent = `${((performance.now() - s.started) / 1000).toFixed(1)} s`;
  }
}, 100);

// ---- drawing ------------------------------------------------------------------------------------
function interval(section) {
  const i = section && section.provenance && section.provenance.interval;
  return Array.isArray(i) && i.length === 2 && isNum(i[0]) && isNum(i[1]) ? i : null;
}

function scaleMax() {
  let top = 0;
  for (const s of SLOTS) {
    const m = state.slots[s].result && state.slots[s].result.memory;
    if (!m) continue;
    const band = interval(m);
    top = Math.max(top, m.total_bytes, m.gpu_memory_bytes, band ? band[1] : 0,
      ...Object.values(m.phase_peaks_bytes || {}));
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
  // the P10-P90 interval of the peak: a whisker across the bar
  const band = interval(memory);
  if (band) {
    const [lo, hi] = band, my = 14 + barH / 2;
    const tip = `peak P10-P90\n${gib(lo)} - ${gib(hi)}`;
    parts.push(`<g class="interval" data-p10="${lo}" data-p90="${hi}" data-tip="${esc(tip)}">` +
      `<title>${esc(tip)}</title>` +
      `<line x1="${x(lo).toFixed(2)}" x2="${x(hi).toFixed(2)}" y1="${my}" y2="${my}" stroke="#1d2330" stroke-width="2"/>` +
      `<line x1="${x(lo).toFixed(2)}" x2="${x(lo).toFixed(2)}" y1="${my - 8}" y2="${my + 8}" stroke="#1d2330" stroke-width="2"/>` +
      `<line x1="${x(hi).toFixed(2)}" x2="${x(hi).toFixed(2)}" y1="${my - 8}" y2="${my + 8}" stroke="#1d2330" stroke-width="2"/>` +
      `<rect x="${x(lo).toFixed(2)}" y="${my - 8}" width="${Math.max(1, x(hi) - x(lo)).toFixed(2)}" height="16" fill="transparent"/></g>`);
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

function verdictHTML(result) {
  const m = result.memory, inf = result.inference;
  const fits = m.fits === true;
  const word = m.verdict && m.verdict !== "-" ? m.verdict : fits ? "FITS" : m.fits === false ? "DOES NOT FIT" : "fit unknown";
  const good = /^(LIKELY )?FITS$/.test(word);
  const bad = /OOM|DOES NOT FIT/.test(word);
  const chance = isNum(m.fits_probability) ? ` (${percent(m.fits_probability)} chance it fits)` : "";
  let head = `${esc(word)}${chance}: headroom ${(m.headroom_bytes / GIB).toFixed(2)} GiB`;
  if (isNum(m.headroom_p90_bytes)) head += ` (at the P90 peak ${(m.headroom_p90_bytes / GIB).toFixed(2)} GiB)`;
  const tail = inf
    ? `largest batch that fits at ${number(inf.context)} tokens: <span class="mmb">${inf.max_batch ?? "-"}</span>`
    : `largest micro-batch that fits: <span class="mmb">${m.max_micro_batch ?? "-"}</span>`;
  return `<div class="verdict ${good ? "fits" : bad ? "nofit" : "unsure"}" data-fits="${m.fits}" ` +
    `data-verdict="${esc(word)}" data-fits-probability="${m.fits_probability ?? ""}" ` +
    `data-max-micro-batch="${m.max_micro_batch ?? ""}" data-headroom-bytes="${m.headroom_bytes}">` +
    `${head}; ${tail}</div>`;
}

function metricsHTML(result) {
  const rows = [];
  const add = (key, label, value, raw) => rows.push(`<dt>${label}</dt><dd data-metric="${key}" ` +
    `data-value="${raw ?? ""}">${value}</dd>`);
  const m = result.memory, t = result.time, k = result.tokens, c = result.cost, inf = result.inference;
  if (m) {
    const band = interval(m);
    add("total_bytes", "peak memory", `${gib(m.total_bytes)} of ${gib(m.gpu_memory_bytes)} (${esc(m.gpu)}), ` +
      `peak in ${esc(m.phase || "?")}${band ? `<span class="range" data-p10="${band[0]}" data-p90="${band[1]}">` +
      `P10-P90 ${(band[0] / GIB).toFixed(1)}-${(band[1] / GIB).toFixed(1)} GiB</span>` : ""}`, m.total_bytes);
  }
  if (inf) {
    if (m) add("kv_cache_bytes", "KV cache", `${gib(inf.kv_cache_bytes)} for ${inf.batch} × ${number(inf.context)} tokens`, inf.kv_cache_bytes);
    if (isNum(inf.max_context)) add("max_context", "longest context at batch 1", `${number(inf.max_context)} tokens`, inf.max_context);
    add("time_to_first_token_seconds", "time to first token", seconds(inf.time_to_first_token_seconds), inf.time_to_first_token_seconds);
    add("decode_step_seconds", "decode step", `${seconds(inf.decode_step_seconds)} (${number(inf.decode_tokens_per_second)} tokens/s while decoding)`, inf.decode_step_seconds);
    if (t) add("step_seconds", "one batch (prefill + decode)", seconds(t.step_seconds), t.step_seconds);
    if (k) add("tokens_per_second", "generated tokens/s", `${number(k.tokens_per_second, 1)} (prefill included; ${number(k.tokens_per_second_per_gpu, 1)} per GPU)`, k.tokens_per_second);
    if (c) {
      const per = isNum(inf.usd_per_million_tokens) ? `${usd(inf.usd_per_million_tokens)} per million generated tokens` : "-";
      add("usd", "cost", `${per} at ${usd(c.usd_per_hour)}/h, ${c.instances} × ${esc(c.instance)} (${esc(c.provider)}${c.stale ? ", STALE price" : ""})`, inf.usd_per_million_tokens ?? "");
    }
  } else {
    if (t) {
      const band = interval(t);
      add("step_seconds", "step time", `${seconds(t.step_seconds)}${band ? `<span class="range" data-p10="${band[0]}" ` +
        `data-p90="${band[1]}">P10-P90 ${seconds(band[0])} - ${seconds(band[1])}</span>` : ""}`, t.step_seconds);
    }
    if (k) add("tokens_per_second", "tokens/s", `${number(k.tokens_per_second)} (${number(k.tokens_per_second_per_gpu)} per GPU)`, k.tokens_per_second);
    if (t && isNum(t.mfu)) add("mfu", "MFU", `${(100 * t.mfu).toFixed(1)} %`, t.mfu);
    if (t && isNum(t.total_seconds)) add("total_seconds", "whole run", `${seconds(t.total_seconds)} (${number(t.total_steps)} steps)`, t.total_seconds);
    if (c) {
      const total = isNum(c.usd) ? `${usd(c.usd)} for the whole run` : "- (give a dataset size or max steps)";
      add("usd", "cost", `${total} at ${usd(c.usd_per_hour)}/h, ${c.instances} × ${esc(c.instance)} (${esc(c.provider)}${c.stale ? ", STALE price" : ""})`, c.usd ?? "");
    }
    if (m && "min_gpus" in m) {
      const reason = m.min_gpus_reason ? `<span class="why">${esc(m.min_gpus_reason)}</span>` : "";
      add("min_gpus", "fewest GPUs that fit", `${m.min_gpus !== null ? `${m.min_gpus} × ${esc(m.gpu)}` : "none found"}${reason}`, m.min_gpus ?? "");
    }
  }
  if (m && isNum(m.host_bytes)) add("host_bytes", "host RAM", `${gib(m.host_bytes)} per node`, m.host_bytes);
  const lay = result.layout || {};
  add("layout", "layout", `${lay.world_size ?? "?"} GPU${lay.world_size === 1 ? "" : "s"}: dp ${lay.dp} tp ${lay.tp} pp ${lay.pp} cp ${lay.cp} ep ${lay.ep}`, lay.world_size);
  const p = result.provenance && result.provenance.memory;
  if (p) add("basis", "memory from", `${esc(p.plugin)} (${esc(p.basis)})`, p.basis);
  return `<dl class="metrics">${rows.join("")}</dl>`;
}

// ---- what the answer assumed ---------------------------------------------------------------------
function originOf(result, path) {
  const origins = (result.input && result.input.origins) || {};
  if (origins[path] !== undefined) return String(origins[path]);
  // a layout follows from the parallelism and hardware fields that were set
  return "default";
}

function noteValue(notes, prefix) {
  const line = (notes || []).find((n) => typeof n === "string" && n.startsWith(prefix));
  return line ? line.slice(prefix.length) : null;
}

function show(value) {
  if (value === null || value === undefined) return "-";
  if (Array.isArray(value)) return value.length ? value.join(", ") : "-";
  if (typeof value === "number") return Number.isInteger(value) ? number(value) : String(+value.toPrecision(6));
  return String(value);
}

function assumedRows(result) {
  const job = result.job || {}, tr = job.training || {}, par = job.parallelism || {}, inf = job.inference || {};
  const notes = (result.memory && result.memory.notes) || [];
  const rows = [];
  const row = (label, path, value, text) => rows.push({ label, path, value, text: text ?? show(value) });
  const modelText = `${result.model ? result.model.name : job.model}` +
    (result.model && isNum(result.model.total_params) ? ` (${(result.model.total_params / 1e9).toFixed(2)} B parameters)` : "");
  row("Model", "model", job.model, modelText);
  row("Mode", "mode", job.mode || "training");
  if (job.mode === "inference") {
    row("Concurrent sequences", "inference.batch", inf.batch);
    row("Context per sequence", "inference.context", inf.context, `${show(inf.context)} tokens`);
    row("Generated tokens", "inference.output_tokens", inf.output_tokens, `${show(inf.output_tokens)} per sequence`);
    row("Compute dtype", "training.dtype", tr.dtype);
    row("Weight format", "inference.quantization", inf.quantization);
    row("KV-cache dtype", "inference.kv_dtype", inf.kv_dtype);
    row("Runtime", "inference.runtime", inf.runtime, `${show(inf.runtime)}, ${show(inf.gpu_memory_utilization)} of GPU memory`);
  } else {
    row("Sequence length", "training.seq_len", tr.seq_len, `${show(tr.seq_len)} tokens`);
    row("Micro-batch", "training.micro_batch_size", tr.micro_batch_size, `${show(tr.micro_batch_size)} per GPU`);
    row("Gradient accumulation", "training.grad_accum_steps", tr.grad_accum_steps, `${show(tr.grad_accum_steps)} step${tr.grad_accum_steps === 1 ? "" : "s"}`);
    row("Compute dtype", "training.dtype", tr.dtype);
    const resolved = noteValue(notes, "precision=");
    row("Precision", "training.precision", tr.precision,
      resolved && resolved !== tr.precision ? `${show(tr.precision)} → ${resolved}` : show(tr.precision));
    row("What is trained", "training.technique", tr.technique,
      tr.technique === "full" ? "full" : `${tr.technique}, rank ${show(tr.lora_rank)}`);
    row("Optimizer", "training.optimizer", tr.optimizer);
    row("Activation checkpointing", "training.activation_checkpointing", tr.activation_checkpointing);
    row("Attention", "training.attention", tr.attention);
    const stack = noteValue(notes, "stack ");
    row("Stack", "training.stack", tr.stack,
      tr.stack ? show(tr.stack) : stack ? stack.split(":")[0].replace(/\s*\(default: /, " (") + (stack.includes("(default") ? ")" : "") : "none stated");
    const sharding = par.sharding || (par.fsdp && par.fsdp !== "none" ? `fsdp ${par.fsdp}` : `ZeRO ${show(par.zero_stage)}`);
    row("Sharding", par.sharding ? "parallelism.sharding" : par.fsdp && par.fsdp !== "none" ? "parallelism.fsdp" : "parallelism.zero_stage", sharding);
  }
  const lay = result.layout || {};
  const layPaths = ["parallelism.dp", "parallelism.tp", "parallelism.pp", "parallelism.cp", "parallelism.ep",
    "hardware.gpus_per_node", "hardware.nodes"];
  const origins = (result.input && result.input.origins) || {};
  const set = layPaths.filter((p) => origins[p] !== undefined).map((p) => origins[p]);
  rows.push({ label: "Layout", path: "layout", value: lay.world_size,
    text: `${show(lay.world_size)} GPU${lay.world_size === 1 ? "" : "s"} (${show(lay.nodes)} node${lay.nodes === 1 ? "" : "s"} × ${show(lay.gpus_per_node)}): dp ${lay.dp} tp ${lay.tp} pp ${lay.pp} cp ${lay.cp} ep ${lay.ep}`,
    origin: set.length ? [...new Set(set)].join(" ") : "default" });
  const gpu = result.gpu || {};
  row("GPU", "hardware.gpu", (job.hardware || {}).gpu,
    `${show(gpu.name)}${isNum(gpu.memory_bytes) ? `, ${(gpu.memory_bytes / GIB).toFixed(0)} GiB` : ""}`);
  return rows;
}

function flatten(obj, prefix = "", out = []) {
  for (const [k, v] of Object.entries(obj || {})) {
    const path = prefix ? `${prefix}.${k}` : k;
    if (v && typeof v === "object" && !Array.isArray(v)) flatten(v, path, out);
    else out.push([path, v]);
  }
  return out;
}

function assumedHTML(result) {
  const rows = assumedRows(result).map((r) => {
    const origin = r.origin ?? originOf(result, r.path);
    return `<tr data-path="${esc(r.path)}" data-value="${esc(show(r.value))}" data-origin="${esc(origin)}">` +
      `<th scope="row">${esc(r.label)}</th><td>${esc(r.text)}</td>` +
      `<td class="origin ${origin === "default" ? "" : "given"}">${esc(origin === "default" ? "default" : origin)}</td></tr>`;
  });
  const all = flatten(result.job).filter(([path]) => !(result.job.mode !== "inference" && path.startsWith("inference.")));
  const allRows = all.map(([path, v]) => {
    const origin = originOf(result, path);
    return `<tr data-path="${esc(path)}" data-origin="${esc(origin)}"><th scope="row">${esc(path)}</th>` +
      `<td>${esc(show(v))}</td><td class="origin ${origin === "default" ? "" : "given"}">${esc(origin)}</td></tr>`;
  });
  const sources = result.input && result.input.sources ? ` (read from: ${result.input.sources.map(esc).join(", ")})` : "";
  return `<details class="assumed" open><summary>Assumed: the settings this answer used</summary>` +
    `<table class="kv"><thead><tr><th>setting</th><th>value</th><th>from</th></tr></thead><tbody>${rows.join("")}</tbody></table>` +
    `<details class="all-settings"><summary>all ${all.length} settings of the job${sources}</summary>` +
    `<table class="kv"><tbody>${allRows.join("")}</tbody></table></details></details>`;
}

// ---- explain: every candidate answer and the rule that chose -----------------------------------
const QUANTITY_FORMAT = { memory: gib, time: seconds, tokens: (x) => `${number(x)} tokens/s`,
  cost: (x) => usd(x) };

function explainHTML(result) {
  const parts = [];
  for (const [quantity, d] of Object.entries(result.decisions || {})) {
    const chosen = result.provenance && result.provenance[quantity] ? result.provenance[quantity].plugin : null;
    const fmt = QUANTITY_FORMAT[quantity] || show;
    const cands = (d.candidates || []).map((c) => `<tr class="${c.plugin === chosen ? "chosen" : ""}">` +
      `<td>${esc(c.plugin)}${c.plugin === chosen ? " ✓" : ""}</td><td>${esc(c.basis)}</td>` +
      `<td>${isNum(c.value) ? esc(fmt(c.value)) : "-"}</td><td class="detail">${esc(c.detail || "")}</td></tr>`);
    const fails = (d.failures || []).map((f) => `<li>${esc(typeof f === "string" ? f : JSON.stringify(f))}</li>`);
    const section = result[quantity];
    const notes = section && Array.isArray(section.notes) ? section.notes : [];
    // the chosen answer's provenance adds to its candidate's detail (e.g. where P10-P90 is from)
    const picked = (d.candidates || []).find((c) => c.plugin === chosen);
    let detail = section && section.provenance && section.provenance.detail;
    if (detail && picked && picked.detail && detail.startsWith(picked.detail)) {
      detail = detail.slice(picked.detail.length).replace(/^[;,\s]+/, "");
    }
    parts.push(`<section data-quantity="${esc(quantity)}"><h4>${esc(quantity)}</h4>` +
      `<p class="rule">policy <b>${esc(d.policy || "-")}</b>: ${esc(d.rule || "")}</p>` +
      (cands.length ? `<div class="scroll"><table class="cands"><thead><tr><th>plugin</th><th>basis</th><th>value</th>` +
        `<th>how</th></tr></thead><tbody>${cands.join("")}</tbody></table></div>` : "") +
      (fails.length ? `<p>failed:</p><ul>${fails.join("")}</ul>` : "") +
      (detail ? `<p class="detail">${esc(detail)}</p>` : "") +
      (notes.length ? `<ul class="notes">${notes.map((n) => `<li>${esc(n)}</li>`).join("")}</ul>` : "") +
      `</section>`);
  }
  return `<details class="explain" open data-explain><summary>Explain: every candidate answer and the rule that chose</summary>` +
    `${parts.join("")}</details>`;
}

// ---- errors: beside their field, the accepted values once ----------------------------------------
function errorParts(error) {
  const accepted = Array.isArray(error.accepted) ? error.accepted : [];
  // the message repeats the accepted values ("...; accepted: 1, 2, 4"): show them once
  const message = accepted.length ? String(error.message).replace(/;?\s*accepted:[\s\S]*$/, "") : String(error.message);
  const list = accepted.length ? `accepted: ${accepted.slice(0, 40).join(", ")}` +
    `${accepted.length > 40 ? `, … (${accepted.length - 40} more)` : ""}` : "";
  return { message, list };
}

function markFieldError(slot) {
  const node = document.getElementById(`slot-${slot}`);
  for (const label of node.querySelectorAll("form.knobs label.invalid")) label.classList.remove("invalid");
  for (const old of node.querySelectorAll("form.knobs .field-error")) old.remove();
  for (const input of node.querySelectorAll("form.knobs [aria-invalid]")) input.removeAttribute("aria-invalid");
  const error = state.slots[slot].error;
  const name = error && error.status !== 504 ? fieldOfPath(error.field) : null;
  if (!name) return null;
  const input = node.querySelector(`form.knobs [data-field="${name}"]`);
  if (!input) return null;
  const label = input.closest("label");
  const { message, list } = errorParts(error);
  label.classList.add("invalid");
  input.setAttribute("aria-invalid", "true");
  label.append(el("span", { class: "field-error", role: "alert", "data-error-field": error.field,
    text: `${message}${list ? `\n${list}` : ""}` }));
  const details = label.closest("details");
  if (details) details.open = true;
  return name;
}

function errorHTML(slot, marked) {
  const s = state.slots[slot], error = s.error;
  const { message, list } = errorParts(error);
  const kept = s.result ? " The answer below is the last one that worked." : "";
  if (error.status === 504) {
    return `<div class="error" role="alert" data-status="504" data-field="${esc(error.field ?? "")}">` +
      `The server stopped the work: this estimate ran past the server's time limit ` +
      `(${esc(message)}). Try a smaller job or a shorter search.${kept}</div>`;
  }
  const where = marked ? fieldLabel(marked) : error.field;
  return `<div class="error" role="alert" data-field="${esc(error.field ?? "")}" data-input="${esc(marked ?? "")}">` +
    `${where ? `<b>${esc(where)}</b>: ` : ""}${esc(message)}` +
    `${marked ? ` <a href="#" class="goto" data-goto="${esc(marked)}">(see the field)</a>` : list ? `<br>${esc(list)}` : ""}` +
    `${kept}</div>`;
}

// ---- one configuration's answer -------------------------------------------------------------------
function renderSlot(slot, top) {
  const s = state.slots[slot];
  const box = document.querySelector(`#slot-${slot} .results`);
  box.dataset.state = s.pending ? "loading" : s.error ? "error" : s.result ? "ok" : "empty";
  box.dataset.request = s.error && !s.pending ? JSON.stringify(s.errorBody) : s.body ? JSON.stringify(s.body) : "";
  box.dataset.answered = s.body ? JSON.stringify(s.body) : "";
  const marked = markFieldError(slot);
  const head = [];
  if (s.pending) {
    const elapsed = ((performance.now() - s.started) / 1000).toFixed(1);
    head.push(`<div class="loading" role="status"><span class="spinner" aria-hidden="true"></span>` +
      `estimating… <span class="elapsed">${elapsed} s</span> <button type="button" class="cancel">cancel</button>` +
      `${s.result ? `<span class="muted">the answer below is the previous one</span>` : ""}</div>`);
  }
  if (s.notice && !s.pending) head.push(`<p class="notice">${esc(s.notice)}</p>`);
  if (s.error && !s.pending) head.push(errorHTML(slot, marked));
  if (!s.result) {
    const empty = s.pending || s.error ? "" : `<p class="status">Pick a model preset or upload a config.json.</p>`;
    box.innerHTML = head.join("") + empty;
    return;
  }
  const r = s.result, m = r.memory;
  const parts = [];
  if (m) {
    parts.push(verdictHTML(r));
    parts.push(`<div class="chart" data-total-bytes="${m.total_bytes}" data-gpu-memory-bytes="${m.gpu_memory_bytes}">${chartSVG(m, top)}</div>`);
    parts.push(`<div class="legend">${Object.entries(m.components).filter(([, b]) => b > 0)
      .map(([n, b]) => `<span><span class="sw" style="background:${colour(n)}"></span>${esc(n)} ${gib(b)}</span>`).join("")}` +
      `${interval(m) ? `<span><span class="whisker"></span>P10-P90 of the peak</span>` : ""}</div>`);
  }
  parts.push(metricsHTML(r));
  if (r.warnings && r.warnings.length) parts.push(`<ul class="warnings">${r.warnings.map((w) => `<li>${esc(w)}</li>`).join("")}</ul>`);
  if (r.job) parts.push(assumedHTML(r));
  if (r.job && r.job.options && r.job.options.explain) parts.push(explainHTML(r));
  parts.push(`<div class="command" title="the same estimate on the command line">${esc(commandLine(slot, s.body))}` +
    `${s.body && s.body.model_config ? " (with the uploaded config.json: save it and pass --model PATH)" : ""}</div>`);
  const stale = s.pending || s.error;
  box.innerHTML = head.join("") + `<div class="answer${stale ? " stale" : ""}" data-mode="${esc((r.job && r.job.mode) || "training")}">${parts.join("")}</div>`;
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
    const { message, list } = errorParts(plan.error);
    const name = fieldOfPath(plan.error.field) || (plan.fields[plan.error.field] ? plan.error.field : null);
    const where = name ? `${labelOf(name, state.fields[name] || plan.fields[name])} ` +
      `(${(state.fields[name] || plan.fields[name])["x-flag"]})` : plan.error.field;
    box.innerHTML = `<p class="error" data-field="${esc(plan.error.field ?? "")}">` +
      `${where ? `<b>${esc(where)}</b>: ` : ""}${esc(message)}${list ? `\n${esc(list)}` : ""}</p>`;
    return;
  }
  const r = plan.result;
  if (!r) { box.dataset.state = "empty"; box.innerHTML = ""; return; }
  box.dataset.state = "ok";
  const head = `<p class="status">configuration ${plan.slot.toUpperCase()}: ${number(r.evaluated)} configurations ` +
    `evaluated, ${r.plans.length} shown (objective ${esc(r.objective)}).</p>`;
  const warn = r.warnings && r.warnings.length ? `<ul class="warnings">${r.warnings.map((w) => `<li>${esc(w)}</li>`).join("")}</ul>` : "";
  box.innerHTML = r.plans.length ? head + planSVG(r.plans) + `<div class="scroll">${planTable(r.plans)}</div>` + warn
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
      renderAll(); return;
    }
    state.slots[slot].values.model = config._name_or_path || file.name.replace(/\.json$/, "");
    state.slots[slot].modelConfig = config;
    syncForm(slot); writeURL(); schedule(slot);
  });
  // the answer's own buttons: cancel the running request, go to the field an error names
  node.querySelector(".results").addEventListener("click", (event) => {
    if (event.target.closest(".cancel")) { cancel(slot); return; }
    const go = event.target.closest("[data-goto]");
    if (!go) return;
    event.preventDefault();
    const input = node.querySelector(`form.knobs [data-field="${go.dataset.goto}"]`);
    if (input) { input.scrollIntoView({ block: "center" }); input.focus(); }
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
