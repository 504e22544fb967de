// Wicket operator console: where arrivals come from ([edge.geoip]): the databases in use, the last
// window's arrivals by region with their share and baseline, and the regions the anomaly rule acts
// on now (GET /admin/geoip, every 5 s). console.js loads it when that route answers (an edge with
// [edge.geoip]); it uses console.js's TEXT, t, el, fmt and api.
"use strict";

Object.assign(TEXT.en, {
  regions: "Regions", region: "region", arrivals: "arrivals", share: "share", baseline: "baseline",
  abnormal: "abnormal", regions_window: "last {0} s window · {1}", no_arrivals: "no arrivals yet",
});
Object.assign(TEXT["zh-CN"], {
  regions: "地区", region: "地区", arrivals: "到达", share: "占比", baseline: "基线",
  abnormal: "异常", regions_window: "最近 {0} 秒窗口 · {1}", no_arrivals: "暂无到达",
});

function showRegions() {
  const card = el("section", { class: "card", id: "regions" }, el("h2", {}, t("regions")));
  const info = el("p", { class: "msg" });
  const table = el("table", {});
  card.append(info, table);
  $("blocklist").before(card);
  const pct = (v) => `${fmt(Math.round(v * 1000) / 10)} %`;
  const refresh = async () => {
    let v;
    try { v = await api("GET", "/admin/geoip"); } catch (e) { say(info, e.message, false); return; }
    info.textContent = t("regions_window", v.window_seconds, v.databases);
    const head = el("tr", {}, ...[t("region"), t("arrivals"), t("share"), t("baseline"), t("abnormal")].map((h) => el("th", {}, h)));
    const rows = v.regions.map((r) => el("tr", r.abnormal_seconds > 0 ? { class: "bad" } : {},
      el("td", {}, r.region), el("td", {}, fmt(r.arrivals, 0)), el("td", {}, pct(r.share)), el("td", {}, pct(r.baseline)),
      el("td", {}, r.abnormal_seconds > 0 ? `${r.abnormal_seconds} s` : "")));
    table.replaceChildren(head, ...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 5 }, t("no_arrivals")))]));
  };
  refresh();
  setInterval(refresh, 5000);
}
