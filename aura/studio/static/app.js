// Aura Studio front end: hash routes #/ (runs), #/run/NAME, #/compare?runs=a,b, #/launch, #/job/NAME, #/try.
"use strict";
const S = { lang: "es", csrf: "", root: "", timer: null, plots: {}, selected: new Set() };
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
function fmt(x, digits) {
  if (x === null || x === undefined || Number.isNaN(x)) return "";
  const opts = digits === undefined ? { maximumSignificantDigits: 5 } : { minimumFractionDigits: digits, maximumFractionDigits: digits };
  return new Intl.NumberFormat(locale(), opts).format(x);
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
function groups(columns) {
  const out = [], used = new Set();
  const add = (title, cols) => { cols = cols.filter(c => columns.includes(c) && !used.has(c)); if (cols.length) { cols.forEach(c => used.add(c)); out.push({ title, cols }); } };
  add(t("c_loss"), ["train_loss", "val_loss"]);
  add(t("c_val_src"), columns.filter(c => c.startsWith("val_loss_")));
  add(t("c_lr"), ["lr"]);
  add(t("c_speed"), ["tokens_per_s"]);
  add(t("c_grad"), ["grad_norm"]);
  add(t("c_suite"), columns.filter(c => c.startsWith("aura-es/")));
  add(t("c_rewards"), columns.filter(c => c.startsWith("rewards/")));
  columns.filter(c => !used.has(c)).forEach(c => add(c, [c]));
  return out;
}
function align(seriesList) {  // [{x:[], y:[]}, ...] -> uPlot data [xs, ys1, ys2, ...]
  const xs = [...new Set(seriesList.flatMap(s => s.x))].sort((a, b) => a - b);
  const idx = new Map(xs.map((x, i) => [x, i]));
  return [xs, ...seriesList.map(s => { const y = new Array(xs.length).fill(null); s.x.forEach((x, i) => (y[idx.get(x)] = s.y[i])); return y; })];
}
function drawChart(container, key, title, labels, seriesList) {
  const data = align(seriesList);
  let box = container.querySelector(`[data-chart="${CSS.escape(key)}"]`);
  const sig = labels.join("|");
  if (box && S.plots[key] && S.plots[key].sig === sig) { S.plots[key].plot.setData(data); return; }
  if (!box) { box = document.createElement("div"); box.className = "chart"; box.dataset.chart = key; container.appendChild(box); }
  if (S.plots[key]) S.plots[key].plot.destroy();
  box.innerHTML = `<h3>${esc(title)}</h3>`;
  const width = Math.max(320, box.clientWidth - 16);
  const opts = { width, height: 240, scales: { x: { time: false } },
    axes: [{ label: t("step"), values: (u, v) => v.map(x => fmt(x)) }, { size: 70, values: (u, v) => v.map(x => fmt(x)) }],
    series: [{ label: t("step"), value: (u, v) => fmt(v) },
      ...labels.map((l, i) => ({ label: l, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: true, value: (u, v) => fmt(v) }))] };
  S.plots[key] = { sig, plot: new uPlot(opts, data, box) };
}
function clearPlots() { Object.values(S.plots).forEach(p => p.plot.destroy()); S.plots = {}; }

// ------------------------------------------------------------------ views
async function runsView() {
  const runs = await api("/api/runs");
  const rows = runs.map(r => `<tr data-run="${esc(r.name)}">
      <td>${r.id ? `<input type="checkbox" data-pick="${esc(r.id)}" ${S.selected.has(r.id) ? "checked" : ""}>` : ""}</td>
      <td>${r.id ? `<a href="#/run/${encodeURIComponent(r.id)}">${esc(r.name)}</a>` : esc(r.path)}</td>
      <td>${esc(r.kind || "?")}</td><td>${statusBadge(r.status)}</td>
      <td class="num" data-col="step">${fmt(r.last_step)}</td><td class="num muted" data-col="plan">${r.total_steps ? "/ " + fmt(r.total_steps) : ""}</td>
      <td class="num">${fmt(r.tokens)}</td><td class="num" data-col="tps">${r.tokens_per_s == null ? "" : fmt(r.tokens_per_s, 0)}</td>
      <td class="num" data-col="eta">${dur(r.eta_s)}</td>
      <td class="num">${fmt(r.best_val_loss, 4)}</td><td data-col="layout">${layout(r.layout)}</td>
      <td>${esc(r.latest_checkpoint ? r.latest_checkpoint.split("/").pop() : "")}</td><td>${when(r.updated)}</td></tr>`).join("");
  view().innerHTML = `<h1>${esc(t("runs_title", { root: S.root }))}</h1>` + (runs.length ? `
    <table id="runs"><thead><tr><th>${t("h_compare")}</th><th>${t("h_run")}</th><th>${t("h_kind")}</th><th>${t("h_status")}</th>
    <th class="num">${t("h_step")}</th><th class="num">${t("h_plan")}</th><th class="num">${t("h_tokens")}</th>
    <th class="num">${t("h_tps")}</th><th class="num">${t("h_eta")}</th><th class="num">${t("h_best")}</th><th>${t("h_layout")}</th>
    <th>${t("h_ckpt")}</th><th>${t("h_updated")}</th></tr></thead><tbody>${rows}</tbody></table>
    <div class="actions"><button id="cmp" ${S.selected.size < 2 ? "disabled" : ""}>${t("compare_selected")}</button></div>` : `<p class="muted">${t("no_runs")}</p>`);
  view().querySelectorAll("[data-pick]").forEach(cb => cb.onchange = () => { cb.checked ? S.selected.add(cb.dataset.pick) : S.selected.delete(cb.dataset.pick); $("#cmp").disabled = S.selected.size < 2; });
  const b = $("#cmp"); if (b) b.onclick = () => (location.hash = "#/compare?runs=" + [...S.selected].map(encodeURIComponent).join(","));
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
  if (acts.dataset.state !== state) {
    acts.dataset.state = state;
    acts.innerHTML = (r.status === "running" && r.local ? `<button id="stop">${t("stop")}</button>` : "") +
      (r.resume_command ? `<button id="resume">${t("resume")}</button>` : "") +
      (r.status !== "running" ? `<button class="secondary" id="delete">${t("delete")}</button>` : "") +
      (r.final_model ? `<a class="button" id="try-final" href="#/try?model=${encodeURIComponent(name + "/final")}">${t("try_final")}</a>
        <a class="button secondary" id="export-final" href="#/launch?command=${encodeURIComponent("export gguf")}&folder=${encodeURIComponent(name + "-gguf")}&f.model=${encodeURIComponent(name + "/final")}">${t("export_gguf")}</a>` : "");
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
  groups(m.columns).forEach(g => drawChart($("#charts"), g.title, g.title, g.cols, g.cols.map(c => m.series[c])));
  const ck = r.checkpoints.length ? `<table><tr><th>${t("checkpoints")}</th><th class="num">${t("step")}</th><th>${t("h_updated")}</th></tr>` +
    r.checkpoints.map(c => `<tr><td>${esc(c.name)}</td><td class="num">${fmt(c.step)}</td><td>${when(c.saved)}</td><td><a href="#/try?model=${encodeURIComponent(name + "/" + c.name)}">${t("try")}</a></td></tr>`).join("") + "</table>" : `<p class="muted">${t("no_ckpt")}</p>`;
  const html = ck + (r.resume_command ? `<h2>${t("resume_cmd")}</h2>` + copyable("resume-cmd", r.resume_command) : "");
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
  shared.forEach(c => drawChart($("#cmp-charts"), "cmp:" + c, c, names, all.map(m => m.series[c])));
}

const COMMANDS = { pretrain: "demo", finetune: "sft", "data prepare": "datos", eval: "eval", "export gguf": "gguf" };
async function launchView(query) {
  const params = new URLSearchParams(query || "");
  view().innerHTML = `<h1>${t("launch_title")}</h1><form class="launch" id="launch-form" autocomplete="off">
    <label for="f-command">${t("command")}</label><select id="f-command">${Object.keys(COMMANDS).map(c => `<option value="${c}">aura ${c}</option>`).join("")}</select>
    <label for="f-name">${t("run_name")}</label><div><input type="text" id="f-name" value="demo"><div class="help">${t("run_name_help")}</div></div>
    <div></div><div id="fields"></div></form>
    <h2>${t("will_run")}</h2>${copyable("preview", "")}<p class="error" id="form-error"></p>
    <div class="actions"><button id="launch">${t("launch")}</button></div>`;
  wireCopy();
  if (COMMANDS[params.get("command")]) $("#f-command").value = params.get("command");
  if (params.get("folder")) $("#f-name").value = params.get("folder");  // ?folder=NAME&f.FIELD=VALUE prefill the form
  let named = !!params.get("folder");
  const load = async () => {
    if (!named) $("#f-name").value = COMMANDS[$("#f-command").value];
    const f = await api(`/api/forms/${encodeURIComponent($("#f-command").value)}`);
    $("#fields").innerHTML = `<div class="launch" style="display:grid;grid-template-columns:minmax(180px,260px) 1fr;gap:.4rem 1rem">` + f.fields.map(x => {
      const id = "f_" + x.name, dflt = Array.isArray(x.default) ? x.default.join(" ") : (x.default ?? "");
      const input = x.type === "bool" ? `<input type="checkbox" id="${id}" data-field="${x.name}" data-type="bool" ${x.default ? "checked" : ""}>`
        : x.choices ? `<select id="${id}" data-field="${x.name}">${x.optional || x.default === null ? `<option value=""></option>` : ""}${x.choices.map(c => `<option ${c === x.default ? "selected" : ""}>${esc(c)}</option>`).join("")}</select>`
        : `<input type="text" id="${id}" data-field="${x.name}" value="${esc(dflt)}" placeholder="${esc(dflt)}">`;
      return `<label for="${id}">${esc(x.flag)}</label><div>${input}<div class="help">${esc(x.help[S.lang] || x.help.es)}</div></div>`;
    }).join("") + "</div>";
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
    try { const p = await api("/api/preview", body()); $("#preview").textContent = p.command; $("#form-error").textContent = ""; $("#launch").disabled = false; }
    catch (e) { $("#preview").textContent = ""; $("#form-error").textContent = e.message; $("#launch").disabled = true; }
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
  S.csrf = s.csrf; S.root = s.root;
  S.lang = localStorage.getItem("aura-lang") || s.lang;
  $("#lang").onchange = () => { S.lang = $("#lang").value; localStorage.setItem("aura-lang", S.lang); applyTexts(); route(); };
  applyTexts();
  window.addEventListener("hashchange", route);
  hardware(); setInterval(hardware, 5000);
  await route();
})();
