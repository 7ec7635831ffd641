"use strict";
// The ART report: curves and the step table from window.ART_INDEX; a step's trajectories are
// loaded from data/<key>.js (a <script> tag, which works from file://) when the step is opened.
(function () {
  const INDEX = window.ART_INDEX;
  const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"];
  const PAGE = 40; // cards rendered at a time
  const $ = (id) => document.getElementById(id);
  const state = { key: null, group: 0, sort: "group", minReward: null, search: "", tokens: true, shown: PAGE, traj: null };
  const loaded = {};
  const waiting = {};

  function esc(s) {
    return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }
  function fmt(v, digits) {
    if (v === null || v === undefined) return "";
    if (typeof v !== "number") return esc(v);
    if (Number.isInteger(v)) return String(v);
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(2);
    return v.toFixed(digits === undefined ? 3 : digits);
  }
  function showError(msg) {
    const el = $("errors");
    el.hidden = false;
    el.textContent += msg + "\n";
  }
  window.addEventListener("error", (e) => showError("error: " + e.message));

  // -- charts ---------------------------------------------------------------------------------
  function chart(svg, legend, series, onPoint) {
    const W = svg.clientWidth || 600, H = svg.clientHeight || 220, L = 62, R = 10, T = 10, B = 26;
    const pts = series.flatMap((s) => s.points);
    if (!pts.length) {
      svg.innerHTML = `<text x="${W / 2}" y="${H / 2}" text-anchor="middle">no data yet</text>`;
      legend.innerHTML = "";
      return;
    }
    let [x0, x1] = [Math.min(...pts.map((p) => p.x)), Math.max(...pts.map((p) => p.x))];
    let [y0, y1] = [Math.min(...pts.map((p) => p.y)), Math.max(...pts.map((p) => p.y))];
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
    const pad = (y1 - y0) * 0.08; y0 -= pad; y1 += pad;
    const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
    const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
    let out = "";
    for (let i = 0; i <= 4; i++) {
      const y = y0 + ((y1 - y0) * i) / 4;
      out += `<line class="grid" x1="${L}" x2="${W - R}" y1="${sy(y)}" y2="${sy(y)}"/><text x="${L - 4}" y="${sy(y) + 4}" text-anchor="end">${fmt(y, 2)}</text>`;
    }
    const xt = Math.max(1, Math.ceil((x1 - x0) / 8));
    for (let x = Math.ceil(x0); x <= x1; x += xt) out += `<text x="${sx(x)}" y="${H - 8}" text-anchor="middle">${x}</text>`;
    out += `<line class="axis" x1="${L}" x2="${W - R}" y1="${H - B}" y2="${H - B}"/><line class="axis" x1="${L}" x2="${L}" y1="${T}" y2="${H - B}"/>`;
    series.forEach((s, i) => {
      const c = COLORS[i % COLORS.length];
      const d = s.points.map((p, j) => `${j ? "L" : "M"}${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`).join("");
      out += `<path class="series" data-series="${esc(s.name)}" stroke="${c}" d="${d}"/>`;
      if (s.points.length <= 400) {
        s.points.forEach((p) => {
          out += `<circle cx="${sx(p.x)}" cy="${sy(p.y)}" r="3.5" fill="${c}" data-split="${esc(s.name)}" data-step="${p.x}"><title>${esc(s.name)} step ${p.x}: ${fmt(p.y)}</title></circle>`;
        });
      }
    });
    svg.innerHTML = out;
    legend.innerHTML = series.map((s, i) => `<span><i style="background:${COLORS[i % COLORS.length]}"></i>${esc(s.name)}</span>`).join("");
    if (onPoint) svg.querySelectorAll("circle").forEach((c) => c.addEventListener("click", () => onPoint(c.dataset.split, +c.dataset.step)));
  }

  function seriesOf(metric) {
    const by = {};
    for (const row of INDEX.history) {
      const v = row[metric];
      if (typeof v !== "number" || typeof row.step !== "number") continue;
      const name = row.split || (row.kind === "sft" ? "sft" : "train");
      (by[name] = by[name] || []).push({ x: row.step, y: v });
    }
    return Object.keys(by).sort((a, b) => (a === "train" ? -1 : b === "train" ? 1 : a.localeCompare(b)))
      .map((name) => ({ name, points: by[name].sort((a, b) => a.x - b.x) }));
  }

  function openFromChart(split, step) {
    const s = INDEX.steps.find((x) => x.split === split && x.step === step);
    if (s) open(s.key);
  }

  function drawCharts() {
    chart($("reward-chart"), $("reward-legend"), seriesOf("reward_mean"), openFromChart);
    chart($("metric-chart"), $("metric-legend"), seriesOf($("metric-select").value), openFromChart);
  }

  // -- the step table -------------------------------------------------------------------------
  const COLUMNS = ["reward_mean", "reward_std", "loss", "kl", "entropy", "grad_norm", "clip_fraction", "trained_tokens", "time/step_s"];

  function stepTable() {
    const rows = INDEX.history.filter((r) => typeof r.step === "number");
    const cols = COLUMNS.filter((c) => rows.some((r) => r[c] !== undefined));
    const ck = new Set(INDEX.checkpoints);
    let html = `<thead><tr><th>step</th><th>split</th>${cols.map((c) => `<th>${esc(c)}</th>`).join("")}<th>checkpoint</th><th>trajectories</th></tr></thead><tbody>`;
    for (const r of rows) {
      const split = r.split || (r.kind === "sft" ? "sft" : "train");
      const s = INDEX.steps.find((x) => x.step === r.step && x.split === split);
      html += `<tr class="${s ? "clickable" : ""}" data-key="${s ? esc(s.key) : ""}"><td>${r.step}</td><td>${esc(split)}</td>`;
      html += cols.map((c) => `<td>${fmt(r[c])}</td>`).join("");
      html += `<td>${ck.has(r.step) ? "&#10003;" : ""}</td><td>${s ? s.trajectories : ""}</td></tr>`;
    }
    $("steps-table").innerHTML = html + "</tbody>";
    $("steps-table").querySelectorAll("tr.clickable").forEach((tr) => tr.addEventListener("click", () => open(tr.dataset.key)));
    $("checkpoints").textContent = INDEX.checkpoints.length ? `checkpoints: ${INDEX.checkpoints.join(", ")}` : "no checkpoints";
  }

  // -- loading a step -------------------------------------------------------------------------
  window.ART_STEP = function (key, data) {
    loaded[key] = data;
    (waiting[key] || []).forEach((w) => w[0](data));
    delete waiting[key];
  };

  function load(key) {
    if (loaded[key]) return Promise.resolve(loaded[key]);
    return new Promise((resolve, reject) => {
      if (waiting[key]) { waiting[key].push([resolve, reject]); return; }
      waiting[key] = [[resolve, reject]];
      const tag = document.createElement("script");
      tag.src = `data/${key}.js`;
      tag.onerror = () => {
        const msg = `could not load data/${key}.js: keep the report's data/ folder next to index.html`;
        (waiting[key] || []).forEach((w) => w[1](new Error(msg)));
        delete waiting[key];
      };
      document.head.appendChild(tag);
    });
  }

  function open(key, opts) {
    opts = opts || {};
    state.key = key;
    state.group = opts.group !== undefined ? opts.group : 0;
    state.traj = opts.traj || null;
    state.shown = PAGE;
    $("step-select").value = key;
    document.body.dataset.ready = "0";
    $("cards").innerHTML = `<div class="empty">loading ${esc(key)}...</div>`;
    return load(key).then(() => { if (state.key === key) render(); }, (err) => {
      $("cards").innerHTML = `<div class="empty">${esc(err.message)}</div>`;
      console.warn(err.message);
    });
  }
  window.artOpen = open; // for scripted use (tests, benchmarks)

  // -- rendering trajectories -----------------------------------------------------------------
  function tokenSpans(sample) {
    let html = "";
    for (let i = 0; i < sample.ids.length; i++) {
      const lp = sample.logprobs ? sample.logprobs[i] : null;
      const text = sample.text ? sample.text[i] : `[${sample.ids[i]}]`;
      const alpha = lp === null ? 0 : Math.min(0.85, 1 - Math.exp(lp)); // low probability: more red
      const title = `id ${sample.ids[i]}` + (lp === null ? "" : `, logprob ${lp.toFixed(3)}, p ${Math.exp(lp).toFixed(3)}`);
      const shown = text === "" ? "\u2205" : text.replace(/\n/g, "\u21b5\n"); // newlines and empty tokens stay visible
      html += `<span class="tok" style="background:rgba(220,38,38,${alpha.toFixed(3)})" title="${esc(title)}">${esc(shown)}</span>`;
    }
    return html;
  }

  function message(m) {
    let body = "";
    if (m.sample && state.tokens) body = tokenSpans(m.sample);
    else if (m.content) body = esc(m.content);
    for (const c of m.tool_calls || []) body += `<span class="call">&#8594; ${esc(c.name)}(${esc(c.arguments || "")})</span>`;
    let role = m.role;
    if (m.role === "tool") role += ` ${m.name || ""} ${m.tool_call_id ? "[" + m.tool_call_id + "]" : ""}`;
    if (m.sample) role += ` &middot; sampled, step ${m.sample.step === null || m.sample.step === undefined ? "?" : m.sample.step}${m.sample.node ? " &middot; " + esc(m.sample.node) : ""}`;
    return `<div class="msg ${esc(m.role)}"><span class="role">${role}</span>${body}</div>`;
  }

  function card(t, gi) {
    const adv = t.advantage === null || t.advantage === undefined ? "" :
      `<span class="${t.advantage >= 0 ? "adv-pos" : "adv-neg"}">adv ${t.advantage >= 0 ? "+" : ""}${fmt(t.advantage, 2)}</span>`;
    const metrics = Object.entries(t.metrics || {}).map(([k, v]) => `${esc(k)} ${fmt(v)}`).join(" &middot; ");
    const logs = (t.logs || []).map((l) => `<div class="log ${/^RULER/.test(l) ? "ruler" : ""}">${esc(l)}</div>`).join("");
    const hist = t.histories.map((h, i) => (i ? `<div class="hist-title">additional history ${i}</div>` : "") + h.messages.map(message).join("")).join("");
    return `<article class="traj${state.traj === t.id ? " selected" : ""}" data-id="${esc(t.id)}"><div class="traj-head"><span class="reward">reward ${fmt(t.reward)}</span>${adv}<span class="muted">group ${gi} &middot; ${esc(t.id)}</span></div>` +
      (metrics ? `<div class="kv">${metrics}</div>` : "") + logs + hist + "</article>";
  }

  function matches(t) {
    if (state.minReward !== null && !(t.reward >= state.minReward)) return false;
    if (!state.search) return true;
    const q = state.search.toLowerCase();
    return t.histories.some((h) => h.messages.some((m) => (m.content || "").toLowerCase().includes(q) ||
      (m.sample && m.sample.text && m.sample.text.join("").toLowerCase().includes(q)) ||
      (m.tool_calls || []).some((c) => ((c.name || "") + (c.arguments || "")).toLowerCase().includes(q))));
  }

  function render() {
    const data = loaded[state.key];
    const groups = data.groups;
    let gbar = "";
    if (state.sort === "group") {
      gbar = groups.map((g) => {
        const rs = g.trajectories.map((t) => t.reward);
        const mean = rs.length ? rs.reduce((a, b) => a + b, 0) / rs.length : null;
        const extra = g.exceptions.length ? `, ${g.exceptions.length} failed` : "";
        return `<button data-group="${g.index}" class="${g.index === state.group ? "active" : ""}" title="${esc(JSON.stringify(g.metadata))}">group ${g.index}: ${rs.length} &middot; mean ${fmt(mean, 2)}${extra}</button>`;
      }).join("");
    }
    $("groups").innerHTML = gbar;
    $("groups").querySelectorAll("button").forEach((b) => b.addEventListener("click", () => {
      state.group = +b.dataset.group; state.shown = PAGE; render();
    }));
    let items;
    if (state.sort === "group") {
      const g = groups[state.group] || groups[0];
      items = g ? g.trajectories.filter(matches).map((t) => [t, g.index]) : [];
    } else {
      items = groups.flatMap((g) => g.trajectories.filter(matches).map((t) => [t, g.index]));
      items.sort((a, b) => (state.sort === "reward-desc" ? b[0].reward - a[0].reward : a[0].reward - b[0].reward));
    }
    let html = items.slice(0, state.shown).map(([t, gi]) => card(t, gi)).join("");
    if (items.length > state.shown) html += `<button class="more" id="more">show ${Math.min(PAGE, items.length - state.shown)} more of ${items.length - state.shown}</button>`;
    $("cards").innerHTML = html || `<div class="empty">no trajectory matches</div>`;
    const more = $("more");
    if (more) more.addEventListener("click", () => { state.shown += PAGE; render(); });
    const sel = state.traj && document.querySelector(`.traj[data-id="${CSS.escape(state.traj)}"]`);
    if (sel) sel.scrollIntoView({ block: "nearest", inline: "nearest" });
    location.replace(`#step=${encodeURIComponent(state.key)}&group=${state.group}` + (state.traj ? `&traj=${encodeURIComponent(state.traj)}` : ""));
    document.body.dataset.ready = "1";
    window.ART_RENDERED = { key: state.key, cards: document.querySelectorAll(".traj").length };
  }

  // -- start ----------------------------------------------------------------------------------
  function start() {
    const m = INDEX.model;
    $("title").textContent = `ART report: ${m.name}`;
    document.title = `ART report: ${m.name}`;
    const ntraj = INDEX.steps.reduce((a, s) => a + s.trajectories, 0);
    $("subtitle").textContent = [m.project && `project ${m.project}`, m.base_model && `base ${m.base_model}`,
      `${INDEX.steps.length} step files`, `${ntraj} trajectories`, INDEX.tokens_decoded ? "" : "tokens shown as ids"].filter(Boolean).join(" · ");
    const keys = new Set();
    INDEX.history.forEach((r) => Object.keys(r).forEach((k) => { if (typeof r[k] === "number") keys.add(k); }));
    ["step", "time", "reward_mean"].forEach((k) => keys.delete(k));
    const opts = [...keys].sort();
    const first = ["loss", "kl", "entropy", "grad_norm"].find((k) => keys.has(k)) || opts[0];
    $("metric-select").innerHTML = opts.map((k) => `<option ${k === first ? "selected" : ""}>${esc(k)}</option>`).join("");
    $("metric-select").addEventListener("change", drawCharts);
    drawCharts();
    window.addEventListener("resize", drawCharts);
    stepTable();
    $("step-select").innerHTML = INDEX.steps.map((s) => `<option value="${esc(s.key)}">${esc(s.split)} step ${s.step} (${s.trajectories})</option>`).join("");
    $("step-select").addEventListener("change", () => open($("step-select").value));
    $("sort-select").addEventListener("change", () => { state.sort = $("sort-select").value; state.shown = PAGE; render(); });
    $("min-reward").addEventListener("input", () => { const v = $("min-reward").value; state.minReward = v === "" ? null : +v; state.shown = PAGE; if (loaded[state.key]) render(); });
    $("search").addEventListener("input", () => { state.search = $("search").value; state.shown = PAGE; if (loaded[state.key]) render(); });
    $("show-tokens").addEventListener("change", () => { state.tokens = $("show-tokens").checked; if (loaded[state.key]) render(); });
    const hash = new URLSearchParams(location.hash.slice(1));
    const want = hash.get("step");
    const key = INDEX.steps.some((s) => s.key === want) ? want : (INDEX.steps.length ? INDEX.steps[INDEX.steps.length - 1].key : null);
    if (key) open(key, { group: +(hash.get("group") || 0), traj: hash.get("traj") });
    else { $("cards").innerHTML = `<div class="empty">no trajectories in this run yet</div>`; document.body.dataset.ready = "1"; }
  }

  if (!INDEX) showError("this page has no run data: build it with `art report RUN_DIR`");
  else start();
})();
