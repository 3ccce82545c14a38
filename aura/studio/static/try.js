// Aura Studio, "Probar" / "Try": chat with a run's model (final/, a checkpoint or a GGUF), tokens streamed
// as Server-Sent Events of a POST (read with fetch), the same prompt to two models side by side.
"use strict";

async function streamChat(body, onEvent) {
  const r = await fetch("/api/chat", { method: "POST", credentials: "same-origin", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json", "X-Aura-CSRF": S.csrf } });
  if (!r.ok) { const d = await r.json().catch(() => ({})); throw new Error(d.error || r.statusText); }
  const reader = r.body.getReader(), dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const chunk = buf.slice(0, i); buf = buf.slice(i + 2);
      let ev = "message", data = "";
      chunk.split("\n").forEach(l => { if (l.startsWith("event: ")) ev = l.slice(7); else if (l.startsWith("data: ")) data += l.slice(6); });
      if (data) onEvent(ev, JSON.parse(data));
    }
  }
}

const TRY = { panes: [{ model: "", history: [] }, { model: "", history: [] }], busy: false };

function modelLabel(m) {
  const what = m.kind === "final" ? t("m_final") : m.kind === "checkpoint" ? t("m_ckpt", { step: fmt(m.step) }) : "GGUF";
  return `${m.id} · ${what}`;
}

function paneHtml(i, models) {
  const p = TRY.panes[i];
  return `<div class="pane" data-pane="${i}"><select id="try-model-${i}" aria-label="${t("model")}">${models.map(m =>
    `<option value="${esc(m.id)}" ${m.id === p.model ? "selected" : ""}>${esc(modelLabel(m))}</option>`).join("")}</select>
    <div class="conv" id="conv-${i}">${p.history.map(msg => `<div class="msg ${msg.role}">${esc(msg.content)}</div>`).join("")}</div>
    <div class="muted stats" id="stats-${i}"></div></div>`;
}

async function tryView(query) {
  const params = new URLSearchParams(query || "");
  const { models } = await api("/api/models");
  view().innerHTML = `<h1>${t("try_title")}</h1>`;
  if (!models.length) { view().insertAdjacentHTML("beforeend", `<p class="muted">${t("no_models")}</p>`); return; }
  const ids = models.map(m => m.id);
  if (params.get("model") && ids.includes(params.get("model"))) TRY.panes[0].model = params.get("model");
  TRY.panes.forEach((p, i) => { if (!ids.includes(p.model)) p.model = ids[Math.min(i, ids.length - 1)]; });
  const two = params.get("compare") === "1" || TRY.two;
  view().insertAdjacentHTML("beforeend", `
    <div class="try-grid ${two ? "two" : ""}" id="panes">${paneHtml(0, models)}${paneHtml(1, models)}</div>
    <form class="try-form" id="try-form" autocomplete="off">
      <textarea id="try-prompt" rows="3" placeholder="${esc(t("try_placeholder"))}"></textarea>
      <div class="try-opts">
        <label><input type="checkbox" id="try-two" ${two ? "checked" : ""}> ${t("try_two")}</label>
        <label>${t("temperature")} <input type="text" id="try-temp" value="0.7" size="4"></label>
        <label>${t("max_tokens")} <input type="text" id="try-max" value="128" size="5"></label>
        <label>${t("system")} <input type="text" id="try-system" size="28"></label>
      </div>
      <div class="actions"><button id="try-send" type="submit">${t("send")}</button>
        <button id="try-reset" type="button" class="secondary">${t("reset")}</button></div>
      <p class="error" id="try-error"></p>
    </form>`);
  const sync = () => TRY.panes.forEach((p, i) => { const sel = $(`#try-model-${i}`); if (sel.value !== p.model) { p.model = sel.value; p.history = []; $(`#conv-${i}`).innerHTML = ""; } });
  TRY.panes.forEach((p, i) => ($(`#try-model-${i}`).onchange = sync));
  $("#try-two").onchange = () => { TRY.two = $("#try-two").checked; $("#panes").classList.toggle("two", TRY.two); };
  $("#try-reset").onclick = () => TRY.panes.forEach((p, i) => { p.history = []; $(`#conv-${i}`).innerHTML = ""; $(`#stats-${i}`).textContent = ""; });
  $("#try-prompt").onkeydown = e => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("#try-send").click(); } };
  $("#try-form").onsubmit = async e => {
    e.preventDefault();
    const text = $("#try-prompt").value.trim();
    if (!text || TRY.busy) return;
    sync();
    TRY.busy = true; $("#try-send").disabled = true; $("#try-error").textContent = ""; $("#try-prompt").value = "";
    const active = $("#try-two").checked ? [0, 1] : [0];
    const ask = async i => {
      const p = TRY.panes[i], conv = $(`#conv-${i}`);
      p.history.push({ role: "user", content: text });
      conv.insertAdjacentHTML("beforeend", `<div class="msg user">${esc(text)}</div><div class="msg assistant streaming" data-answer></div>`);
      const box = conv.lastElementChild;
      box.textContent = t("loading_model");
      let got = "";
      const notes = [];  // context cuts the server reported for this answer (the messages aura chat prints)
      const body = { model: p.model, messages: p.history, system: $("#try-system").value,
        temperature: Number($("#try-temp").value.replace(",", ".")), max_new_tokens: parseInt($("#try-max").value, 10) };
      try {
        await streamChat(body, (ev, d) => {
          if (ev === "start") box.textContent = "";
          else if (ev === "notice") { box.insertAdjacentHTML("beforebegin", `<div class="msg notice" data-notice>${esc(d.text)}</div>`); notes.push(box.previousElementSibling); }
          else if (ev === "piece") { got += d.text; box.textContent = got; box.dataset.pieces = (+(box.dataset.pieces || 0) + 1); conv.scrollTop = conv.scrollHeight; }
          else if (ev === "done") { got = d.text; box.textContent = got; $(`#stats-${i}`).textContent = t("try_stats", { tokens: fmt(d.tokens), tps: fmt(d.tokens_per_s, 1) }); }
          else if (ev === "error") throw new Error(d.error);
        });
        p.history.push({ role: "assistant", content: got.trim() });
        box.classList.remove("streaming"); box.dataset.done = "1";
      } catch (err) {
        notes.forEach(n => n.remove()); p.history.pop(); box.remove(); conv.lastElementChild?.remove();
        $("#try-error").textContent = err.message;
      }
    };
    await Promise.all(active.map(ask));
    TRY.busy = false; $("#try-send").disabled = false;
  };
}
