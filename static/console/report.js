// Wicket operator console: a room's post-sale report (GET /admin/rooms/<room>/report), opened by a
// room card's "Report" button: totals, five per-minute charts (drop-offs by the minute's own fans:
// admitted then, never used; let in then, never came), the CSV download. console.js loads
// it when first asked for (it uses console.js's TEXT, t, el, api, fmt, say and chart).
"use strict";

Object.assign(TEXT.en, {
  report_of: "Report of {0}", csv: "Download CSV", close: "Close", refresh: "Refresh",
  joins: "joins", admissions: "admissions", holds: "holds (sessions used)", released: "released",
  unused: "admitted, never used", abandoned: "let in, never came", refusals: "refusals",
  wait: "wait P50 / P90 / P99 (s)", sold_out_at: "sold out at", minutes: "minutes",
  r_flow: "Per minute", r_drop: "Drop-offs of each minute's fans", r_rate: "Release rate set / measured (/s)", r_p99: "Core P99 / target (ms)", r_wait: "Wait (s)",
});
Object.assign(TEXT["zh-CN"], {
  report_of: "{0} 的报告", csv: "下载 CSV", close: "关闭", refresh: "刷新",
  joins: "加入", admissions: "放行", holds: "已使用会话", released: "已放行序号",
  unused: "放行后未使用", abandoned: "轮到时未回来", refusals: "拒绝",
  wait: "等待 P50 / P90 / P99（秒）", sold_out_at: "售罄时间", minutes: "分钟数",
  r_flow: "每分钟", r_drop: "每分钟的流失（按该分钟的粉丝）", r_rate: "放行速率 设定 / 实测（每秒）", r_p99: "核心 P99 / 目标（毫秒）", r_wait: "等待（秒）",
});

// The report card (one, for the room last asked), made on first use under the room cards.
let reportCard = null;

async function openReport(id) {
  if (!reportCard) {
    const title = el("h2");
    const csv = el("a", { download: "" }, t("csv"));
    const msg = el("p", { class: "msg", role: "status" });
    const figures = el("div", { class: "grid" });
    const charts = el("div", { class: "charts" });
    const card = el("section", { class: "card", id: "report" }, title,
      el("div", { class: "row" }, csv, el("button", { onclick: () => openReport(reportCard.id) }, t("refresh")),
        el("button", { onclick: () => { card.hidden = true; } }, t("close"))), msg, figures, charts);
    $("rooms").after(card);
    reportCard = { card, title, csv, msg, figures, charts, id };
  }
  const r = reportCard;
  r.id = id;
  r.card.hidden = false;
  r.title.textContent = t("report_of", id);
  const path = `/admin/rooms/${encodeURIComponent(id)}/report`;
  r.csv.href = `${path}?format=csv`;
  let v;
  try { v = await api("GET", path); } catch (e) { say(r.msg, e.message, false); return; }
  say(r.msg, "", true);
  const T = v.totals;
  const refused = Object.values(T.refusals).reduce((a, b) => a + b, 0);
  const w = T.wait_seconds;
  const figure = (label, value) => el("div", { class: "fig", "data-figure": label }, el("b", {}, value), el("span", {}, t(label)));
  r.figures.replaceChildren(
    figure("joins", fmt(T.joins)), figure("admissions", fmt(T.admissions)), figure("holds", fmt(T.holds)),
    figure("released", fmt(T.released)), figure("unused", fmt(T.drop_offs.unused)), figure("abandoned", fmt(T.drop_offs.abandoned)),
    figure("refusals", fmt(refused)),
    ...Object.entries(T.refusals).filter(([, n]) => n > 0).map(([k, n]) => el("div", { class: "fig", "data-figure": k }, el("b", {}, fmt(n)), el("span", {}, k))),
    figure("wait", `${fmt(w.p50)} / ${fmt(w.p90)} / ${fmt(w.p99)}`),
    figure("sold_out_at", T.sold_out_at ? new Date(T.sold_out_at).toLocaleString() : "—"),
    figure("minutes", fmt(v.minutes.length)),
  );
  // Five charts, x = each minute's start.
  const m = v.minutes;
  const x = m.map((row) => Date.parse(row.minute) / 1000);
  const specs = [
    [t("r_flow"), [[t("joins"), "#8a93a6", (q) => q.joins], [t("admissions"), "#2e7d32", (q) => q.admissions],
      [t("holds"), "#1565c0", (q) => q.holds], [t("refusals"), "#c62828", (q) => Object.values(q.refusals).reduce((a, b) => a + b, 0)]]],
    [t("r_drop"), [[t("unused"), "#ef6c00", (q) => q.drop_offs.unused], [t("abandoned"), "#6a1b9a", (q) => q.drop_offs.abandoned]]],
    [t("r_rate"), [["set", "#6a1b9a", (q) => q.rate_set], ["measured", "#ef6c00", (q) => q.rate_measured]]],
    [t("r_p99"), [["P99", "#c62828", (q) => q.p99_ms], ["target", "#5b6479", (q) => q.p99_target_ms, [6, 4]]]],
    [t("r_wait"), [["P50", "#00838f", (q) => q.wait_seconds.p50], ["P90", "#ef6c00", (q) => q.wait_seconds.p90], ["P99", "#c62828", (q) => q.wait_seconds.p99]]],
  ];
  r.charts.replaceChildren();
  for (const [title, series] of specs) {
    const target = el("div");
    r.charts.append(target);
    const c = chart(title, series.map(([label, stroke, , dash]) => [label, stroke, dash]), target);
    c.u.setData([x, ...series.map(([, , f]) => m.map((row) => { const y = f(row); return y === undefined ? null : y; }))]);
    // A minute on each side: a sale of a few minutes is not stretched over years.
    if (x.length) c.u.setScale("x", { min: x[0] - 60, max: x[x.length - 1] + 60 });
    target.dataset.points = x.length;
  }
  r.card.scrollIntoView();
}
