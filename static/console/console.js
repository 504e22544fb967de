// Wicket operator console: sign-in, live room charts from /admin/stream, and the controls of the
// admin API (edge/src/console.rs). No build step: plain JS and the vendored uPlot.
"use strict";

const KEEP = 900; // points kept per chart: 15 minutes at one frame a second

const TEXT = {
  en: {
    title: "Wicket console", signin_title: "Sign in", token: "Admin token", signin: "Sign in", signout: "Sign out",
    edge_title: "Edge", blocklist: "Blocklist", ip: "IP / CIDR", user: "user", device: "device", add: "Add", remove: "Remove",
    bot_policy: "Bot policy", save: "Save", pause: "Pause", resume: "Resume", queue_all: "Queue all", apply: "Apply",
    confirm_pause: "Pause admissions of room {0}? Nobody new gets in until you resume.",
    confirm_queue_all: "Queue everyone in room {0}? Nobody new gets in until you resume.",
    mode: "mode", queue_state: "queue", passing: "passing through", queueing: "queue on", always: "always", queued: "queued", serving: "serving", issued: "joined", active: "active sessions", budget: "budget",
    release: "release set / measured (/s)", p99: "core P99 edge / core / target (ms)", errors: "error fraction",
    util: "utilisation", available: "available", sold_out: "sold out", leader: "this edge leads", yes: "yes", no: "no",
    chart_queue: "Queue", chart_release: "Release rate (/s)", chart_p99: "Core P99 (ms)", chart_sessions: "Sessions",
    decisions: "Controller decisions", rate: "rate", min: "min", max: "max", auto: "auto", fixed: "fixed",
    requests: "requests/s", rejects: "refusals/s by reason", bad_token: "Wrong token", signed_out: "Signed out",
    stream_lost: "Live stream lost: reconnecting…", saved: "Saved", none: "(empty)",
    schedule: "Schedule", prequeue_at: "pre-queue from", opens_at: "opens at", closes_at: "closes at",
    window: "opens / closes", now: "now", never: "never", report: "Report",
    reject_all: "Reject all", confirm_reject_all: "Turn everyone away from room {0}? Nobody new is queued or admitted until you resume; admitted sessions keep running.",
    preview: "Preview", preview_state: "state", preview_lang: "language",
    invites: "Invites", inv_codes: "codes", inv_redeemed: "redeemed", inv_users: "allowlisted users",
    inv_only_until: "invite-only until {0}", inv_only: "invite-only", inv_open: "open to everyone",
    inv_generate: "Generate", inv_how_many: "how many", inv_upload: "Upload", inv_kind_codes: "codes", inv_kind_users: "user ids",
    inv_paste: "one code or user id a line", inv_generated: "Generated (shown once: copy them now)", inv_added: "{0} added",
  },
  "zh-CN": {
    title: "Wicket 控制台", signin_title: "登录", token: "管理令牌", signin: "登录", signout: "退出",
    edge_title: "边缘节点", blocklist: "黑名单", ip: "IP / 网段", user: "用户", device: "设备", add: "添加", remove: "移除",
    bot_policy: "防机器人策略", save: "保存", pause: "暂停", resume: "恢复", queue_all: "全部排队", apply: "应用",
    confirm_pause: "暂停房间 {0} 的放行？恢复之前不会再放人进入。",
    confirm_queue_all: "让房间 {0} 的所有人排队？恢复之前不会再放人进入。",
    mode: "模式", queue_state: "排队", passing: "直接放行", queueing: "排队中（已开启）", always: "始终排队", queued: "排队中", serving: "已放行序号", issued: "已加入", active: "活跃会话", budget: "会话预算",
    release: "放行速率 设定 / 实测（每秒）", p99: "核心 P99 边缘 / 核心 / 目标（毫秒）", errors: "错误比例",
    util: "利用率", available: "剩余库存", sold_out: "已售罄", leader: "本节点为主", yes: "是", no: "否",
    chart_queue: "队列", chart_release: "放行速率（每秒）", chart_p99: "核心 P99（毫秒）", chart_sessions: "会话",
    decisions: "控制器决策", rate: "速率", min: "下限", max: "上限", auto: "自动", fixed: "固定",
    requests: "请求/秒", rejects: "拒绝/秒（按原因）", bad_token: "令牌错误", signed_out: "已退出",
    stream_lost: "实时数据中断，正在重连…", saved: "已保存", none: "（空）",
    schedule: "时间安排", prequeue_at: "预排队开始", opens_at: "开放时间", closes_at: "关闭时间",
    window: "开放 / 关闭", now: "立即", never: "不关闭", report: "报告",
    reject_all: "全部拒绝", confirm_reject_all: "拒绝房间 {0} 的所有访客？恢复之前不再让任何新访客排队或进入；已放行的会话继续有效。",
    preview: "预览", preview_state: "状态", preview_lang: "语言",
    invites: "邀请", inv_codes: "邀请码", inv_redeemed: "已兑换", inv_users: "白名单用户",
    inv_only_until: "{0} 之前仅限受邀", inv_only: "仅限受邀", inv_open: "对所有人开放",
    inv_generate: "生成", inv_how_many: "数量", inv_upload: "上传", inv_kind_codes: "邀请码", inv_kind_users: "用户 ID",
    inv_paste: "每行一个邀请码或用户 ID", inv_generated: "已生成（仅显示一次，请立即复制）", inv_added: "已添加 {0} 个",
  },
};

// The queue page's states and languages the preview renders (GET /admin/rooms/<room>/preview).
const PREVIEW_STATES = ["waiting", "queue_all", "paused", "not_open", "sold_out", "sold_out_for_now", "closed", "reject_all", "check"];
const PAGE_LANGS = ["ar", "de", "en", "es", "fa", "fr", "id", "it", "ja", "ko", "nl", "pl", "pt-BR", "ru", "tr", "zh-CN", "zh-TW"];

let lang = localStorage.getItem("wicket-console-lang") || (navigator.language.startsWith("zh") ? "zh-CN" : "en");
let csrf = null;
let stream = null;
const rooms = new Map();

const $ = (id) => document.getElementById(id);
const t = (key, ...args) => (TEXT[lang][key] || TEXT.en[key] || key).replace(/\{(\d)\}/g, (_, i) => args[i]);

function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

function translate() {
  document.documentElement.lang = lang;
  for (const e of document.querySelectorAll("[data-i18n]")) e.textContent = t(e.dataset.i18n);
  $("lang").value = lang;
}

function say(target, text, ok) {
  target.textContent = text;
  target.className = "msg " + (ok ? "ok" : "err");
}

// One call of the admin API: JSON in and out; the server's {error, message} becomes the thrown text.
async function api(method, path, body) {
  const headers = { "content-type": "application/json" };
  if (csrf && method !== "GET") headers["x-csrf-token"] = csrf;
  const r = await fetch(path, { method, headers, credentials: "same-origin", body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  let v = null;
  try { v = text ? JSON.parse(text) : null; } catch (_) { v = text; }
  if (!r.ok) {
    const msg = v && v.message ? `${r.status} ${v.error}: ${v.message}` : `${r.status}`;
    throw new Error(msg);
  }
  return v;
}

async function signIn(ev) {
  ev.preventDefault();
  try {
    const v = await api("POST", "/admin/session", { token: $("token").value });
    $("token").value = "";
    csrf = v.csrf;
    start();
  } catch (e) {
    say($("signin-msg"), `${t("bad_token")} (${e.message})`, false);
  }
}

async function signOut() {
  try { await api("DELETE", "/admin/session"); } catch (_) { /* signed out either way */ }
  csrf = null;
  if (stream) stream.close();
  location.reload();
}

function fmt(v, digits = 1) {
  if (v === null || v === undefined) return "—";
  if (typeof v === "number") return Number.isInteger(v) ? v.toLocaleString() : v.toFixed(digits);
  return String(v);
}

function fmtMode(m) {
  if (m && typeof m === "object" && "fixed" in m) return `${t("fixed")} ${fmt(m.fixed)}/s`;
  return m === undefined ? "—" : String(m);
}

// "2026-12-01T02:00:00Z" -> "2026-12-01T10:00:00" in the browser's time zone (a datetime-local value).
function toLocalInput(s) {
  if (!s) return "";
  const d = new Date(s);
  if (isNaN(d)) return "";
  return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19);
}

function fmtWindow(w) {
  const at = (s, none) => (s ? new Date(s).toLocaleString() : t(none));
  return w ? `${at(w.opens_at, "now")} / ${at(w.closes_at, "never")}` : "—";
}

function chart(title, series, target) {
  const opts = {
    title, width: Math.max(380, target.clientWidth || 420), height: 200,
    scales: { x: { time: true } },
    series: [{}, ...series.map(([label, stroke, dash]) => ({ label, stroke, width: 2, dash }))],
    axes: [{}, { size: 60 }],
  };
  const data = [[], ...series.map(() => [])];
  const u = new uPlot(opts, data, target);
  return { u, data, target };
}

function push(c, x, values) {
  c.data[0].push(x);
  values.forEach((v, i) => c.data[i + 1].push(v === undefined ? null : v));
  if (c.data[0].length > KEEP) c.data.forEach((s) => s.shift());
  c.u.setData(c.data);
  // How many points the chart holds (for anyone checking the page fills; the canvas says nothing).
  c.target.dataset.points = c.data[0].length;
}

function roomCard(id) {
  const figures = el("div", { class: "grid" });
  const charts = el("div", { class: "charts" });
  const timeline = el("ol", { class: "timeline" });
  const msg = el("p", { class: "msg", role: "status" });
  const mode = el("select", {}, el("option", { value: "auto" }, t("auto")), el("option", { value: "fixed" }, t("fixed")));
  const rate = el("input", { type: "number", step: "any", min: "0", placeholder: t("rate") });
  const min = el("input", { type: "number", step: "any", min: "0", placeholder: t("min") });
  const max = el("input", { type: "number", step: "any", min: "0", placeholder: t("max") });
  // The server's answer (the room's mode and rate now) or its error, in place.
  const act = async (what, body) => {
    const label = t({ pause: "pause", resume: "resume", "queue-all": "queue_all", "reject-all": "reject_all", release: "apply" }[what]);
    try {
      const v = await api(what === "release" ? "PUT" : "POST", `/admin/rooms/${encodeURIComponent(id)}/${what}`, body);
      say(msg, `${label}: ${t("mode")} ${v.reject_all ? "reject_all" : fmtMode(v.mode)}`, true);
    } catch (e) { say(msg, `${label}: ${e.message}`, false); }
  };
  // The schedule: local date-times in the inputs, RFC 3339 (UTC) on the wire; empty means none.
  const when = {};
  for (const k of ["prequeue_at", "opens_at", "closes_at"]) when[k] = el("input", { type: "datetime-local", step: "1", "aria-label": t(k), title: t(k) });
  const schedMsg = el("p", { class: "msg", role: "status" });
  const showSchedule = (cfg) => {
    const sc = (cfg && cfg.schedule) || {};
    for (const k of Object.keys(when)) when[k].value = toLocalInput(sc[k.replace(/_/g, "-")]);
  };
  api("GET", `/admin/rooms/${encodeURIComponent(id)}`).then((v) => showSchedule(v.config)).catch((e) => say(schedMsg, e.message, false));
  const schedule = el("div", { class: "row schedule" },
    el("b", {}, t("schedule")),
    ...Object.entries(when).flatMap(([k, input]) => [el("label", {}, t(k)), input]),
    el("button", {
      onclick: async () => {
        const body = {};
        for (const [k, input] of Object.entries(when)) body[k] = input.value ? new Date(input.value).toISOString().replace(".000Z", "Z") : null;
        try {
          const v = await api("PUT", `/admin/rooms/${encodeURIComponent(id)}/schedule`, body);
          showSchedule(v.config);
          say(schedMsg, `${t("schedule")}: ${t("saved")} (${t("window")} ${fmtWindow(v.stats.window)})`, true);
        } catch (e) { say(schedMsg, `${t("schedule")}: ${e.message}`, false); }
      },
    }, t("save")));
  const controls = el("div", { class: "row" },
    el("button", { onclick: () => confirm(t("confirm_pause", id)) && act("pause") }, t("pause")),
    el("button", { onclick: () => act("resume") }, t("resume")),
    el("button", { onclick: () => confirm(t("confirm_queue_all", id)) && act("queue-all") }, t("queue_all")),
    el("button", { onclick: () => confirm(t("confirm_reject_all", id)) && act("reject-all") }, t("reject_all")),
    el("button", { onclick: () => need("report.js", () => openReport(id)) }, t("report")),
    mode, rate, min, max,
    el("button", {
      onclick: () => {
        const body = { mode: mode.value };
        for (const [k, input] of [["rate", rate], ["min", min], ["max", max]]) if (input.value !== "") body[k] = Number(input.value);
        act("release", body);
      },
    }, t("apply")));
  // The room's page as a fan sees it, in a state and a language (nothing of the room changes).
  const pvState = el("select", { class: "pv-state", "aria-label": t("preview_state") }, ...PREVIEW_STATES.map((s) => el("option", { value: s }, s)));
  const pvLang = el("select", { class: "pv-lang", "aria-label": t("preview_lang") }, ...PAGE_LANGS.map((l) => el("option", { value: l }, l)));
  pvLang.value = lang;
  const frame = el("iframe", { class: "preview", title: `${t("preview")} ${id}` });
  const showPreview = () => {
    frame.src = `/admin/rooms/${encodeURIComponent(id)}/preview?state=${pvState.value}&lang=${encodeURIComponent(pvLang.value)}`;
  };
  pvState.addEventListener("change", showPreview);
  pvLang.addEventListener("change", showPreview);
  showPreview();
  const preview = el("div", { class: "preview-box" }, el("div", { class: "row" }, el("b", {}, t("preview")), pvState, pvLang), frame);
  const card = el("section", { class: "card room", "data-room": id }, el("h2", {}, id), figures, controls, msg, schedule, schedMsg, preview, charts, el("h3", {}, t("decisions")), timeline);
  $("rooms").append(card);
  schedMsg.after(...inviteRow(id));
  const slot = () => { const d = el("div"); charts.append(d); return d; };
  const room = {
    figures, timeline, lastReason: null,
    queue: chart(t("chart_queue"), [[t("queued"), "#1565c0"], [t("serving"), "#2e7d32"], [t("issued"), "#8a93a6", [4, 4]]], slot()),
    release: chart(t("chart_release"), [["set", "#6a1b9a"], ["measured", "#ef6c00"]], slot()),
    p99: chart(t("chart_p99"), [["edge", "#c62828"], ["core", "#ad1457"], ["target", "#5b6479", [6, 4]]], slot()),
    sessions: chart(t("chart_sessions"), [[t("active"), "#00838f"], [t("budget"), "#5b6479", [6, 4]]], slot()),
  };
  rooms.set(id, room);
  return room;
}

// The room's invite lane (edge/src/room/invite_admin.rs): its figures, generating codes (shown
// once), uploading codes or allowlisted user ids.
function inviteRow(id) {
  const base = `/admin/rooms/${encodeURIComponent(id)}/invites`;
  const summary = el("span", { class: "invite-summary" });
  const msg = el("p", { class: "msg", role: "status" });
  const count = el("input", { type: "number", min: "1", max: "10000", value: "100", "aria-label": t("inv_how_many"), title: t("inv_how_many") });
  const kind = el("select", { "aria-label": t("inv_upload") }, el("option", { value: "codes" }, t("inv_kind_codes")), el("option", { value: "users" }, t("inv_kind_users")));
  const input = el("textarea", { rows: "3", spellcheck: "false", placeholder: t("inv_paste"), class: "invite-input" });
  const out = el("textarea", { rows: "3", readonly: "", hidden: "", class: "invite-generated", "aria-label": t("inv_generated") });
  const show = (v) => {
    const state = v.invite_only ? (v.only_until ? t("inv_only_until", new Date(v.only_until).toLocaleString()) : t("inv_only")) : t("inv_open");
    summary.textContent = `${state} · ${t("inv_codes")} ${fmt(v.codes)} · ${t("inv_redeemed")} ${fmt(v.redeemed)} · ${t("inv_users")} ${fmt(v.users)}`;
  };
  const refresh = () => api("GET", base).then(show).catch((e) => say(msg, `${t("invites")}: ${e.message}`, false));
  const post = async (path, body, label) => {
    try {
      const v = await api("POST", `${base}/${path}`, body);
      say(msg, `${label}: ${t("inv_added", fmt(v.added))}`, true);
      refresh();
      return v;
    } catch (e) { say(msg, `${label}: ${e.message}`, false); return null; }
  };
  const row = el("div", { class: "row invites" },
    el("b", {}, t("invites")), summary,
    count,
    el("button", {
      onclick: async () => {
        const v = await post("codes", { generate: Number(count.value) }, t("inv_generate"));
        if (v && v.codes) { out.value = v.codes.join("\n"); out.hidden = false; out.title = t("inv_generated"); }
      },
    }, t("inv_generate")),
    input, kind,
    el("button", {
      onclick: async () => {
        const items = input.value.split(/[\n,]/).map((x) => x.trim()).filter((x) => x);
        if (await post(kind.value, { [kind.value]: items }, t("inv_upload"))) input.value = "";
      },
    }, t("inv_upload")),
    out);
  refresh();
  setInterval(refresh, 5000);
  return [row, msg];
}

// Code loaded the first time it is needed (report.js: a room's post-sale report; lane.js: its
// invite lane's share; regions.js: [edge.geoip]'s regions), so the page stays small; `then` runs once it is there.
const loaded = {};
function need(file, then) {
  if (loaded[file] === 1) return then();
  if (!loaded[file]) {
    loaded[file] = 2;
    document.head.append(el("script", { src: `/console/${file}`, onload: () => { loaded[file] = 1; then(); } }));
  }
}

function updateRoom(s, at) {
  const room = rooms.get(s.room) || roomCard(s.room);
  const core = s.core || {};
  const x = at / 1000;
  const figure = (label, value, warn) => el("div", { class: "fig" }, el("b", warn ? { class: "warn" } : {}, value), el("span", {}, label));
  const overTarget = core.p99_ms_edge !== null && core.p99_ms_edge !== undefined && core.p99_target_ms && core.p99_ms_edge > core.p99_target_ms;
  room.figures.replaceChildren(
    figure(t("mode"), s.reject_all ? "reject_all" : fmtMode(s.mode), s.reject_all),
    figure(t("queue_state"), s.queue === "when-needed" ? t(s.passing ? "passing" : "queueing") : t("always")),
    figure(t("queued"), fmt(s.queued)),
    figure(t("serving"), fmt(s.serving)),
    figure(`${t("active")} / ${t("budget")}`, `${fmt(s.active)} / ${fmt(s.budget)}`),
    figure(t("release"), `${fmt(s.release_per_second)} / ${fmt(s.measured_release_per_second)}`),
    figure(t("p99"), `${fmt(core.p99_ms_edge)} / ${fmt(core.p99_ms_core)} / ${fmt(core.p99_target_ms)}`, overTarget),
    figure(t("errors"), fmt(core.error_fraction, 3), core.error_fraction > 0.01),
    figure(t("util"), fmt(core.utilisation, 2)),
    figure(t("available"), fmt(s.available)),
    figure(t("sold_out"), s.sold_out ? t("yes") : t("no"), s.sold_out),
    figure(t("leader"), s.leader ? t("yes") : t("no")),
    figure(t("window"), fmtWindow(s.window)),
  );
  if (s.lane) need("lane.js", () => showLane(room, s, x));
  push(room.queue, x, [s.queued, s.serving, s.issued]);
  push(room.release, x, [s.release_per_second, s.measured_release_per_second]);
  push(room.p99, x, [core.p99_ms_edge, core.p99_ms_core, core.p99_target_ms]);
  push(room.sessions, x, [s.active, s.budget]);
  const reason = s.decision && s.decision.reason;
  if (reason && reason !== room.lastReason) {
    room.lastReason = reason;
    const when = new Date(at).toLocaleTimeString();
    room.timeline.prepend(el("li", {}, `${when} ${reason} → ${fmt(s.decision.rate)}/s, ${t("budget")} ${fmt(s.decision.budget)}`));
    while (room.timeline.children.length > 50) room.timeline.lastChild.remove();
  }
}

function openStream() {
  stream = new EventSource("/admin/stream");
  stream.onmessage = (e) => {
    const frame = JSON.parse(e.data);
    for (const s of frame.rooms || []) updateRoom(s, frame.at_ms);
  };
  stream.onerror = () => say($("block-msg"), t("stream_lost"), false);
}

// Edge-wide figures from /metrics: requests/s by outcome and refusals/s by reason, every 2 s.
let lastMetrics = null;
async function pollMetrics() {
  try {
    const r = await fetch("/metrics", { credentials: "same-origin" });
    const text = await r.text();
    const now = Date.now();
    const sums = {};
    for (const line of text.split("\n")) {
      const m = line.match(/^(wicket_edge_requests_total|wicket_edge_rejects_total)\{([^}]*)\} (\d+(?:\.\d+)?)/);
      if (!m) continue;
      const label = m[1] === "wicket_edge_requests_total" ? (m[2].match(/outcome="([^"]+)"/) || [])[1] : "refused " + (m[2].match(/reason="([^"]+)"/) || [])[1];
      sums[label] = (sums[label] || 0) + Number(m[3]);
    }
    if (lastMetrics) {
      const dt = (now - lastMetrics.at) / 1000;
      const figs = Object.entries(sums).map(([k, v]) => {
        const rate = Math.max(0, (v - (lastMetrics.sums[k] || 0)) / dt);
        return el("div", { class: "fig" }, el("b", {}, rate.toFixed(1)), el("span", {}, `${k} /s`));
      });
      $("edge-figures").replaceChildren(...figs);
    }
    lastMetrics = { at: now, sums };
  } catch (_) { /* next time */ }
}

async function loadBlocklist() {
  try {
    const v = await api("GET", "/admin/blocklist");
    const items = [];
    for (const kind of ["ips", "users", "devices"]) {
      for (const value of v[kind] || []) {
        items.push(el("li", {}, `${kind}: ${value} `, el("button", {
          onclick: async () => {
            try { await api("DELETE", "/admin/blocklist", { [kind]: [value] }); loadBlocklist(); }
            catch (e) { say($("block-msg"), e.message, false); }
          },
        }, t("remove"))));
      }
    }
    $("block-list").replaceChildren(...(items.length ? items : [el("li", {}, t("none"))]));
  } catch (e) { say($("block-msg"), e.message, false); }
}

async function addBlock(ev) {
  ev.preventDefault();
  const kind = $("block-kind").value;
  try {
    await api("POST", "/admin/blocklist", { [kind]: [$("block-value").value.trim()] });
    $("block-value").value = "";
    say($("block-msg"), t("saved"), true);
    loadBlocklist();
  } catch (e) { say($("block-msg"), e.message, false); }
}

async function loadBotPolicy() {
  try { $("bot-json").value = JSON.stringify(await api("GET", "/admin/bot-policy"), null, 2); }
  catch (e) { say($("bot-msg"), e.message, false); }
}

async function saveBotPolicy() {
  let body;
  try { body = JSON.parse($("bot-json").value); } catch (e) { say($("bot-msg"), e.message, false); return; }
  try {
    $("bot-json").value = JSON.stringify(await api("PUT", "/admin/bot-policy", body), null, 2);
    say($("bot-msg"), t("saved"), true);
  } catch (e) { say($("bot-msg"), e.message, false); }
}

async function start() {
  document.title = t("title");
  $("signin").hidden = true;
  $("app").hidden = false;
  $("signout").hidden = false;
  try {
    const h = await api("GET", "/admin/health");
    $("edge").textContent = `${h.status} · ${Math.round(h.uptime_seconds / 60)} min`;
  } catch (_) { /* shown by the stream */ }
  openStream();
  loadBlocklist();
  loadBotPolicy();
  api("GET", "/admin/geoip").then(() => need("regions.js", showRegions), () => {});
  pollMetrics();
  setInterval(pollMetrics, 2000);
}

async function boot() {
  translate();
  $("lang").addEventListener("change", () => { lang = $("lang").value; localStorage.setItem("wicket-console-lang", lang); location.reload(); });
  $("signin").addEventListener("submit", signIn);
  $("signout").addEventListener("click", signOut);
  $("block-form").addEventListener("submit", addBlock);
  $("bot-save").addEventListener("click", saveBotPolicy);
  try {
    csrf = (await api("GET", "/admin/session")).csrf;
    start();
  } catch (_) {
    $("signin").hidden = false;
    document.title = `${t("signin_title")} · ${t("title")}`;
  }
}

boot();
