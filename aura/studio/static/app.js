// Aura Studio front end: hash routes #/ (runs), #/run/NAME, #/compare?runs=a,b, #/launch, #/job/NAME, #/try.
"use strict";
const S = { lang: "es", csrf: "", root: "", timer: null, plots: {}, selected: new Set(), labels: {}, commands: [] };
const $ = (sel, el = document) => el.querySelector(sel);
const view = () => $("#view");
const POLL_MS = 2000;

function t(key, vars = {}) {
  const txt = (AURA_TEXTS[S.lang] || AURA_TEXTS.es)[key] || key;
  return txt.replace(/\{(\w+)\}/g, (_, k) => (k in vars ? vars[k] : `{${k}}`));
}
function locale() {
  const nav = navigator.languages || [navigator.language || ""];
  return nav.find(l => l.toLowerCase().startsWith(S.lang)) || (S.lang === "es" ? "es-ES" : "en-US");
}
// Numbers as the CLI writes them (aura.core.i18n.num): integers exact; Spanish: decimal comma and digits
// grouped with a narrow no-break space from five digits on; English: 12,345.5. Other values: 5 significant
// digits, below 0.001 as 5,00e-06 (Python's ".2e").
function fmt(x, digits) {
  if (x === null || x === undefined || Number.isNaN(x)) return "";
  if (!Number.isFinite(x)) return String(x);
  const es = S.lang === "es", a = Math.abs(x);
  let s;
  if (digits !== undefined) s = x.toFixed(digits);
  else if (Number.isInteger(x)) s = a >= 1e21 ? x.toExponential(2) : x.toFixed(0);
  else if (a < 1e-3) s = x.toExponential(2);
  else s = String(Number(x.toPrecision(5)));
  const m = s.match(/^(-?)(\d+)(\.\d+)?(e[+-]\d+)?$/);
  if (!m) return s;
  let [, sign, int, frac, exp] = m;
  if (exp) exp = exp[0] + exp[1] + exp.slice(2).padStart(2, "0");
  if (!(es && a < 10000)) int = int.replace(/\B(?=(\d{3})+(?!\d))/g, es ? "\u202f" : ",");
  return sign + int + (frac ? (es ? "," : ".") + frac.slice(1) : "") + (exp || "");
}
// Tick labels of one axis in one style: all in exponent form when one of them needs it (5,0e-04 beside
// 1,5e-03, not beside 0,0015), each with the digits it needs.
function ticks(values) {
  const small = values.some(x => x && Math.abs(x) < 1e-3);
  return values.map(x => {
    if (!small || !x) return fmt(x);
    const [m, e] = Number(x.toPrecision(6)).toExponential().split("e");  // 1.5000000000000002e-6: 1.5e-6
    return (S.lang === "es" ? m.replace(".", ",") : m) + "e" + e[0] + e.slice(1).padStart(2, "0");
  });
}
// A log column as a person reads it: the catalogue of aura.watch.runlog (COLUMN_LABELS), served with the
// session; `aura plot` writes its legends from the same one.
function label(col, epochAvg) {
  const L = S.labels[S.lang] || S.labels.es || {};
  let text = col;
  if (L[col] && !col.startsWith("_")) text = L[col];
  else if (col.startsWith("val_loss_") && L._source) text = L._source.replace("{source}", col.slice(9));
  else if (col.startsWith("aura-es/") && L._suite) text = L._suite.replace("{task}", col.slice(8));
  return epochAvg && L._epoch_avg ? L._epoch_avg.replace("{label}", text) : text;
}
function esc(s) { return String(s ?? "").replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c])); }
function when(v) { if (!v) return ""; const d = new Date(typeof v === "number" ? v * 1000 : v); return isNaN(d) ? esc(v) : d.toLocaleString(locale()); }
function dur(s) {
  if (s === null || s === undefined) return "";
  s = Math.round(s); const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  return h ? `${h} h ${String(m).padStart(2, "0")} min` : m ? `${m} min ${String(sec).padStart(2, "0")} s` : `${sec} s`;
}
function layout(l) { return l ? `<span title="${esc(t("layout_title", { world: l.world_size, launcher: l.launcher || "" }))}">${fmt(l.nnodes)} × ${fmt(l.nproc_per_node)}</span>` : ""; }
function statusBadge(s) { return `<span class="status ${esc(s)}" data-status="${esc(s)}">${esc(t("st_" + s))}</span>`; }
function toast(msg, ms = 6000) { const el = $("#toast"); el.textContent = msg; el.style.display = "block"; clearTimeout(toast.t); toast.t = setTimeout(() => (el.style.display = "none"), ms); }

async function api(path, body) {
  const opts = body === undefined ? {} : { method: "POST", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json", "X-Aura-CSRF": S.csrf } };
  const r = await fetch(path, { credentials: "same-origin", ...opts });
  const data = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(data.error || r.statusText);
  return data;
}

function applyTexts() {
  document.documentElement.lang = S.lang;
  document.querySelectorAll("[data-i18n]").forEach(el => (el.textContent = t(el.dataset.i18n)));
  $("#lang").value = S.lang;
}

// ------------------------------------------------------------------ charts
const COLORS = ["#2e6bd6", "#d6452e", "#2e9d5b", "#9b4dca", "#d69a2e", "#2eaad6", "#6b6b6b", "#c62e8f"];
function groups(columns) {  // panels of the run page: title and columns
  const out = [], used = new Set();
  const add = (title, cols) => { cols = cols.filter(c => columns.includes(c) && !used.has(c)); if (cols.length) { cols.forEach(c => used.add(c)); out.push({ title, cols }); } };
  add(t("c_loss"), ["train_loss", "val_loss"]);
  add(t("c_val_src"), columns.filter(c => c.startsWith("val_loss_")));
  add(t("c_lr"), ["lr"]);
  add(t("c_speed"), ["tokens_per_s"]);
  add(t("c_grad"), ["grad_norm"]);
  add(t("c_suite"), columns.filter(c => c.startsWith("aura-es/")));
  add(t("c_rewards"), columns.filter(c => c.startsWith("rewards/")));
  columns.filter(c => !used.has(c)).forEach(c => add(label(c), [c]));  // a column of its own: its readable name
  return out;
}
function align(seriesList) {  // [{x:[], y:[]}, ...] -> uPlot data [xs, ys1, ys2, ...]
  const xs = [...new Set(seriesList.flatMap(s => s.x))].sort((a, b) => a - b);
  const idx = new Map(xs.map((x, i) => [x, i]));
  return [xs, ...seriesList.map(s => { const y = new Array(xs.length).fill(null); s.x.forEach((x, i) => (y[idx.get(x)] = s.y[i])); return y; })];
}
// steps are integers: the x axis never ticks between two of them
const STEP_INCRS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1e3, 2e3, 2500, 5e3, 1e4, 2e4, 25e3, 5e4, 1e5, 2e5,
  25e4, 5e5, 1e6, 2e6, 25e5, 5e6, 1e7, 2e7, 5e7, 1e8];
let measureCtx = null;
function widest(u, values, font) {  // the width in CSS pixels of the longest tick label
  measureCtx = measureCtx || document.createElement("canvas").getContext("2d");
  measureCtx.font = font;
  return Math.max(0, ...(values || []).map(v => measureCtx.measureText(v).width));
}
// seriesList: [{label, data: {x, y}, points: true for markers only}]
function drawChart(container, key, title, seriesList) {
  const data = align(seriesList.map(s => s.data || { x: [], y: [] }));
  let box = container.querySelector(`[data-chart="${CSS.escape(key)}"]`);
  const sig = seriesList.map(s => s.label + (s.points ? "*" : "")).join("|");
  if (box && S.plots[key] && S.plots[key].sig === sig) { S.plots[key].plot.setData(data); return; }
  if (!box) { box = document.createElement("div"); box.className = "chart"; box.dataset.chart = key; container.appendChild(box); }
  if (S.plots[key]) S.plots[key].plot.destroy();
  box.innerHTML = `<h3>${esc(title)}</h3>`;
  const width = Math.max(320, box.clientWidth - 16);
  const font = "12px system-ui, -apple-system, sans-serif";
  const opts = { width, height: 240, scales: { x: { time: false } },
    axes: [{ label: t("step"), font, incrs: STEP_INCRS, values: (u, v) => v.map(x => fmt(x)) },
      // as wide as its longest label (a learning rate's 5e-06 is not cut)
      { font, values: (u, v) => ticks(v), size: (u, values) => Math.ceil(widest(u, values, font)) + 22 }],
    series: [{ label: t("step"), value: (u, v) => fmt(v) },
      ...seriesList.map((s, i) => ({ label: s.label, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: true,
        value: (u, v) => fmt(v), ...(s.points ? { paths: () => null, points: { show: true, size: 8, fill: COLORS[i % COLORS.length] } } : {}) }))] };
  S.plots[key] = { sig, plot: new uPlot(opts, data, box) };
}
function clearPlots() { Object.values(S.plots).forEach(p => p.plot.destroy()); S.plots = {}; }

// ------------------------------------------------------------------ views
async function runsView() {
  const [runs, pipes] = await Promise.all([api("/api/runs"), api("/api/pipelines")]);
  const rows = runs.map(r => `<tr data-run="${esc(r.id || r.name)}">
      <td>${r.id ? `<input type="checkbox" data-pick="${esc(r.id)}" ${S.selected.has(r.id) ? "checked" : ""}>` : ""}</td>
      <td>${r.id ? `<a href="#/run/${encodeURIComponent(r.id)}">${esc(r.id)}</a>` : esc(r.path)}</td>
      <td>${esc(r.kind || "?")}</td><td>${statusBadge(r.status)}</td>
      <td class="num" data-col="step">${fmt(r.last_step)}</td><td class="num muted" data-col="plan">${r.total_steps ? "/ " + fmt(r.total_steps) : ""}</td>
      <td class="num" data-col="tokens">${fmt(r.tokens)}</td><td class="num" data-col="tps">${r.tokens_per_s == null ? "" : fmt(r.tokens_per_s, 0)}</td>
      <td class="num" data-col="eta">${dur(r.eta_s)}</td>
      <td class="num">${fmt(r.best_val_loss, 4)}</td><td data-col="layout">${layout(r.layout)}</td>
      <td>${esc(r.latest_checkpoint ? r.latest_checkpoint.split("/").pop() : "")}</td><td>${when(r.updated)}</td></tr>`).join("");
  view().innerHTML = `<h1>${esc(t("runs_title", { root: S.root }))}</h1>` + (runs.length ? `
    <table id="runs"><thead><tr><th>${t("h_compare")}</th><th>${t("h_run")}</th><th>${t("h_kind")}</th><th>${t("h_status")}</th>
    <th class="num">${t("h_step")}</th><th class="num">${t("h_plan")}</th><th class="num">${t("h_tokens")}</th>
    <th class="num">${t("h_tps")}</th><th class="num">${t("h_eta")}</th><th class="num">${t("h_best")}</th><th>${t("h_layout")}</th>
    <th>${t("h_ckpt")}</th><th>${t("h_updated")}</th></tr></thead><tbody>${rows}</tbody></table>
    <div class="actions"><button id="cmp" ${S.selected.size < 2 ? "disabled" : ""}>${t("compare_selected")}</button></div>` : `<p class="muted">${t("no_runs")}</p>`)
    + (pipes.length ? `<h2>${t("pipelines")}</h2><table id="pipelines"><thead><tr><th>${t("h_pipeline")}</th><th>${t("h_stages")}</th>
    <th>${t("h_report")}</th><th>${t("h_updated")}</th></tr></thead><tbody>${pipes.map(pipelineRow).join("")}</tbody></table>` : "");
  view().querySelectorAll("[data-pick]").forEach(cb => cb.onchange = () => { cb.checked ? S.selected.add(cb.dataset.pick) : S.selected.delete(cb.dataset.pick); $("#cmp").disabled = S.selected.size < 2; });
  const b = $("#cmp"); if (b) b.onclick = () => (location.hash = "#/compare?runs=" + [...S.selected].map(encodeURIComponent).join(","));
}

// a pipeline folder (aura pipeline run): each stage with its status, linked to its run page when it is a run
function pipelineRow(p) {
  const stages = p.stages.map(s => `<span class="stage" data-stage="${esc(s.name)}">${s.run
    ? `<a href="#/run/${encodeURIComponent(s.run)}">${esc(s.name)}</a>` : esc(s.name)} ${statusBadge(s.status)}</span>`).join(" → ");
  const report = p.report ? `<a data-report href="/pipelines/${encodeURIComponent(p.id)}/report.html" target="_blank" rel="noopener">${t("open_report")}</a>` : `<span class="muted">${t("no_report")}</span>`;
  return `<tr data-pipeline="${esc(p.id)}"><td>${esc(p.id)}${p.pipeline && p.pipeline !== p.id ? ` <span class="muted">(${esc(p.pipeline)})</span>` : ""}
    ${p.running ? statusBadge("running") : ""}${p.warning ? `<div class="error">${esc(p.warning)}</div>` : ""}</td>
    <td class="stages">${stages}</td><td>${report}</td><td>${when(p.updated)}</td></tr>`;
}

function copyable(id, text) {
  return `<div class="cmd"><pre id="${id}">${esc(text)}</pre><button class="secondary" data-copy="${id}">${t("copy")}</button></div>`;
}
function wireCopy() {
  view().querySelectorAll("[data-copy]").forEach(b => b.onclick = async () => { await navigator.clipboard?.writeText($("#" + b.dataset.copy).textContent); toast(t("copied"), 1500); });
}

async function runView(name, first) {
  const [r, m] = await Promise.all([api(`/api/runs/${encodeURIComponent(name)}`), api(`/api/runs/${encodeURIComponent(name)}/metrics?max_points=1500`)]);
  if (first) {
    view().innerHTML = `<h1 id="run-title"></h1><div class="actions" id="run-actions"></div>
      <h2>${t("curves")} <span class="muted" id="points"></span></h2><div class="charts" id="charts"></div>
      <h2>${t("checkpoints")}</h2><div id="ckpts"></div><h2>${t("history")}</h2><div id="history"></div>
      <h2>${t("config")}</h2><pre id="config"></pre><h2>${t("log")}</h2><pre id="log"></pre>`;
  }
  $("#run-title").innerHTML = `${esc(r.name)} ${statusBadge(r.status)} <span class="muted">${esc(r.kind || "")} · ${t("step")} ${fmt(r.last_step)}</span>`;
  const acts = $("#run-actions"), state = r.status + "|" + !!r.resume_command + "|" + !!r.final_model;
  const own = !r.pipeline;  // a pipeline's stage is resumed by its pipeline, not deleted alone
  if (acts.dataset.state !== state) {
    acts.dataset.state = state;
    acts.innerHTML = (r.status === "running" && r.local ? `<button id="stop">${t("stop")}</button>` : "") +
      (r.resume_command && own ? `<button id="resume">${t("resume")}</button>` : "") +
      (r.status !== "running" && own ? `<button class="secondary" id="delete">${t("delete")}</button>` : "") +
      (r.final_model ? `<a class="button" id="try-final" href="#/try?model=${encodeURIComponent(name + "/final")}">${t("try_final")}</a>` : "") +
      // a LoRA run's final/ is an adapter, which `aura export gguf` refuses: no export offered for it
      (r.final_model && !r.final_adapter && own ? `<a class="button secondary" id="export-final" href="#/launch?command=${encodeURIComponent("export gguf")}&folder=${encodeURIComponent(name + "-gguf")}&f.model=${encodeURIComponent(name + "/final")}">${t("export_gguf")}</a>` : "") +
      (r.pipeline ? `<span class="muted" id="stage-of">${esc(t("stage_of", { stage: r.name, pipeline: r.pipeline }))}</span>` : "");
    if ($("#stop")) $("#stop").onclick = async () => { try { const o = await api(`/api/runs/${encodeURIComponent(name)}/stop`, {}); toast(t("stop_sent", o)); } catch (e) { toast(e.message); } };
    if ($("#delete")) $("#delete").onclick = async () => {
      const typed = prompt(t("delete_confirm", {name}));
      if (typed === null) return;
      try { const o = await api(`/api/runs/${encodeURIComponent(name)}/delete`, {confirm: typed}); toast(t("deleted", o)); location.hash = "#/"; } catch (e) { toast(e.message); }
    };
    if ($("#resume")) $("#resume").onclick = async () => { try { const o = await api(`/api/runs/${encodeURIComponent(name)}/resume`, {}); toast(t("started", o)); } catch (e) { toast(e.message); } };
  }
  $("#points").dataset.rows = m.rows; $("#points").textContent = `(${fmt(m.rows)} ${t("points")})`;
  if (!m.columns.length) $("#charts").innerHTML = `<p class="muted">${t("no_points")}</p>`;
  else { const p = $("#charts > p"); if (p) p.remove(); }
  const epoch = m.epoch_series || {};
  groups(m.columns).forEach(g => drawChart($("#charts"), g.title, g.title, [
    ...g.cols.filter(c => m.series[c]).map(c => ({ label: label(c), data: m.series[c] })),
    // the per-epoch averages: their own series of markers, not joined to the per-interval values
    ...g.cols.filter(c => epoch[c]).map(c => ({ label: label(c, true), data: epoch[c], points: true }))]));
  const ck = r.checkpoints.length ? `<table><tr><th>${t("checkpoints")}</th><th class="num">${t("step")}</th><th>${t("h_updated")}</th></tr>` +
    r.checkpoints.map(c => `<tr><td>${esc(c.name)}</td><td class="num">${fmt(c.step)}</td><td>${when(c.saved)}</td><td><a href="#/try?model=${encodeURIComponent(name + "/" + c.name)}">${t("try")}</a></td></tr>`).join("") + "</table>" : `<p class="muted">${t("no_ckpt")}</p>`;
  const html = ck + (r.resume_command && !r.pipeline ? `<h2>${t("resume_cmd")}</h2>` + copyable("resume-cmd", r.resume_command) : "");
  if ($("#ckpts").dataset.html !== html) { $("#ckpts").dataset.html = html; $("#ckpts").innerHTML = html; wireCopy(); }
  $("#history").innerHTML = (r.history || []).length ? `<table>${r.history.map(h => `<tr><td>${when(h.time)}</td><td>${esc(h.launcher || "")}</td><td class="num">${t("step")} ${fmt(h.step)}</td><td><code>${esc((h.argv || []).join(" "))}</code></td><td>${esc(h.resumed_from || "")}</td></tr>`).join("")}</table>` : "";
  $("#config").textContent = JSON.stringify(Object.keys(r.config).length ? r.config : r.run_json, null, 2);
  $("#log").textContent = r.studio_log || "";
}

async function compareView(names) {
  if (names.length < 1) { view().innerHTML = `<h1>${t("compare_title")}</h1><p class="muted">${t("compare_pick")}</p>`; return; }
  const all = await Promise.all(names.map(n => api(`/api/runs/${encodeURIComponent(n)}/metrics?max_points=1000`)));
  const shared = all.reduce((acc, m) => acc.filter(c => m.columns.includes(c)), all[0].columns);
  if (!$("#cmp-charts")) view().innerHTML = `<h1>${t("compare_title")}: ${names.map(esc).join(", ")}</h1><div class="charts" id="cmp-charts"></div>`;
  if (!shared.length) { $("#cmp-charts").innerHTML = `<p class="muted">${t("compare_none")}</p>`; return; }
  shared.forEach(c => drawChart($("#cmp-charts"), "cmp:" + c, label(c),
    names.map((n, i) => ({ label: n, data: all[i].series[c] || (all[i].epoch_series || {})[c] }))));
}

async function launchView(query) {
  const params = new URLSearchParams(query || "");
  view().innerHTML = `<h1>${t("launch_title")}</h1><form class="launch" id="launch-form" autocomplete="off">
    <label for="f-command">${t("command")}</label><select id="f-command">${S.commands.map(c => `<option value="${esc(c)}">aura ${esc(c)}</option>`).join("")}</select>
    <label for="f-name">${t("run_name")}</label><div><input type="text" id="f-name" value=""><div class="help">${t("run_name_help")}</div>
      <div class="error" id="name-clash"></div></div>
    <div class="fields" id="fields"></div></form>
    <h2>${t("will_run")}</h2>${copyable("preview", "")}<p class="error" id="form-error"></p>
    <div class="actions"><button id="launch">${t("launch")}</button></div>`;
  wireCopy();
  if (S.commands.includes(params.get("command"))) $("#f-command").value = params.get("command");
  if (params.get("folder")) $("#f-name").value = params.get("folder");  // ?folder=NAME&f.FIELD=VALUE prefill the form
  let named = !!params.get("folder");
  // one field: the Spanish (or English) help is the label, the flag its detail
  const fieldHtml = x => {
    const id = "f_" + x.name, dflt = Array.isArray(x.default) ? x.default.join(" ") : (x.default ?? "");
    const input = x.type === "bool" ? `<input type="checkbox" id="${id}" data-field="${x.name}" data-type="bool" ${x.default ? "checked" : ""}>`
      : x.choices ? `<select id="${id}" data-field="${x.name}">${x.optional || x.default === null ? `<option value=""></option>` : ""}${x.choices.map(c => `<option ${c === x.default ? "selected" : ""}>${esc(c)}</option>`).join("")}</select>`
      : `<input type="text" id="${id}" data-field="${x.name}" value="${esc(dflt)}" placeholder="${esc(dflt)}">`;
    return `<div class="field" data-row="${x.name}"><label for="${id}">${esc(x.help[S.lang] || x.help.es)}</label>${input}<code class="flag">${esc(x.flag)}</code></div>`;
  };
  const load = async () => {
    const f = await api(`/api/forms/${encodeURIComponent($("#f-command").value)}`);
    if (!named) $("#f-name").value = f.name;  // a name no folder has yet
    const essential = f.fields.filter(x => x.essential), advanced = f.fields.filter(x => !x.essential);
    $("#fields").innerHTML = essential.map(fieldHtml).join("") +
      (advanced.length ? `<details id="advanced"><summary>${t("advanced", { n: advanced.length })}</summary>${advanced.map(fieldHtml).join("")}</details>` : "");
    S.form = f.fields;
    f.fields.forEach(x => { const el = $("#f_" + x.name), v = params.get("f." + x.name); if (el && v !== null && el.dataset.type !== "bool") el.value = v; });
    preview();
    $("#fields").querySelectorAll("[data-field]").forEach(el => (el.oninput = el.onchange = preview));
  };
  const values = () => {
    const v = {};
    $("#fields").querySelectorAll("[data-field]").forEach(el => {
      const f = S.form.find(x => x.name === el.dataset.field), dflt = Array.isArray(f.default) ? f.default.join(" ") : (f.default ?? "");
      if (el.dataset.type === "bool") { if (el.checked !== !!f.default) v[f.name] = el.checked; }
      else if (el.value !== String(dflt)) v[f.name] = el.value;
    });
    return v;
  };
  const body = () => ({ command: $("#f-command").value, name: $("#f-name").value.trim(), values: values() });
  async function preview() {
    const seq = S.previewSeq = (S.previewSeq || 0) + 1;  // an older answer arriving late is dropped
    try {
      const p = await api("/api/preview", body());
      if (seq !== S.previewSeq) return;
      $("#preview").textContent = p.command; $("#form-error").textContent = "";
      $("#name-clash").textContent = p.clash || "";  // live: the folder exists, before Launch refuses it
      $("#f-name").classList.toggle("bad", !!p.clash); $("#launch").disabled = !!p.clash;
    }
    catch (e) { if (seq !== S.previewSeq) return; $("#preview").textContent = ""; $("#name-clash").textContent = ""; $("#form-error").textContent = e.message; $("#launch").disabled = true; }
  }
  $("#f-command").onchange = () => { [...params.keys()].forEach(k => params.delete(k)); load(); };
  $("#f-name").oninput = () => { named = true; preview(); };
  $("#launch").onclick = async () => { try { const o = await api("/api/launch", body()); toast(t("started", o)); location.hash = (o.run ? "#/run/" : "#/job/") + encodeURIComponent(o.name); } catch (e) { $("#form-error").textContent = e.message; } };
  await load();
}

async function jobView(name) {
  const j = await api(`/api/jobs/${encodeURIComponent(name)}`);
  const state = j.running ? "running" : j.returncode === 0 ? "finished" : j.returncode === null ? "unknown" : "failed";
  if (!$("#job-log")) view().innerHTML = `<h1 id="job-title"></h1><div class="actions" id="job-actions"></div><h2>${t("log")}</h2><pre id="job-log"></pre>`;
  $("#job-title").innerHTML = `${esc(name)} ${statusBadge(state)}` + (j.returncode ? ` <span class="muted">${t("exit_code", { code: j.returncode })}</span>` : "");
  const acts = state === "finished" ? (j.run ? `<a class="button" href="#/run/${encodeURIComponent(name)}">${t("open_run")}</a>` : `<a class="button" href="#/try">${t("nav_try")}</a>`) : "";
  if ($("#job-actions").dataset.html !== acts) { $("#job-actions").dataset.html = acts; $("#job-actions").innerHTML = acts; }
  const log = $("#job-log"), end = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
  log.textContent = j.log; if (end) log.scrollTop = log.scrollHeight;
}

async function hardware() {
  try {
    const h = await api("/api/hardware");
    const parts = [t("hw", { cpu: fmt(h.cpu_percent, 0), ram: fmt(h.ram_used_gib, 1), total: fmt(h.ram_total_gib, 1) })];
    (h.gpus || []).forEach((g, i) => parts.push(t("gpu", { i: g.index ?? i, util: fmt(g.utilization_percent, 0), mem: fmt(g.memory_used_gib, 1), temp: fmt(g.temperature_c, 0), power: fmt(g.power_w, 0) })));
    $("#hw").textContent = parts.join(" · ");
  } catch (e) { /* the hardware strip is informative only */ }
}

// ------------------------------------------------------------------ routing
async function route() {
  clearInterval(S.timer); clearPlots(); view().innerHTML = "";
  const [path, query] = location.hash.replace(/^#/, "").split("?");
  const parts = (path || "/").split("/").filter(Boolean);
  let tick;
  if (parts[0] === "run" && parts[1]) { const n = decodeURIComponent(parts[1]); tick = () => runView(n, !$("#run-title")); }  // a run just launched has no run.json for a few seconds
  else if (parts[0] === "compare") { const n = (new URLSearchParams(query).get("runs") || "").split(",").filter(Boolean); tick = () => compareView(n); }
  else if (parts[0] === "launch") { await launchView(query).catch(showError); return; }
  else if (parts[0] === "try") { await tryView(query).catch(showError); return; }
  else if (parts[0] === "job" && parts[1]) { const n = decodeURIComponent(parts[1]); tick = () => jobView(n); }
  else tick = runsView;
  const run = () => tick().then(() => { const el = $("#view-error"); if (el) el.remove(); }).catch(showError);
  await run(); S.timer = setInterval(run, POLL_MS);
}
function showError(e) {
  let el = $("#view-error");
  if (!el) { view().insertAdjacentHTML("afterbegin", `<p class="error" id="view-error"></p>`); el = $("#view-error"); }
  el.textContent = e.message;
}

(async function start() {
  const s = await api("/api/session");
  S.csrf = s.csrf; S.root = s.root; S.labels = s.labels || {};
  S.commands = s.commands || [];  // the commands the page may launch, from aura.core.commands (launchable ones)
  S.lang = localStorage.getItem("aura-lang") || s.lang;
  $("#lang").onchange = () => { S.lang = $("#lang").value; localStorage.setItem("aura-lang", S.lang); applyTexts(); route(); };
  applyTexts();
  window.addEventListener("hashchange", route);
  hardware(); setInterval(hardware, 5000);
  await route();
})();
