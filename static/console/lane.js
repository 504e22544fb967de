// Wicket operator console: a room's invite lane and its share of the release (`[rooms.invite]
// share`): a figure beside the room's others and a chart under its charts. console.js loads it
// when a room's stats first carry `lane` (it uses console.js's TEXT, t, el, fmt, chart and push).
"use strict";

Object.assign(TEXT.en, {
  lane: "invite lane: share / joined / let in by it", chart_lane: "Invite lane",
  lane_in: "let in by the lane", lane_joined: "joined the lane",
});
Object.assign(TEXT["zh-CN"], {
  lane: "邀请通道：份额 / 加入 / 经通道放行", chart_lane: "邀请通道",
  lane_in: "经通道放行", lane_joined: "加入通道",
});

// Called with each stream frame of a room whose stats carry `lane` (after its figures are drawn).
function showLane(room, s, x) {
  const l = s.lane;
  const share = `${fmt(Math.round(l.share * 1000) / 10)} %`;
  room.figures.append(el("div", { class: "fig", "data-figure": "lane" },
    el("b", {}, `${share} · ${fmt(l.issued)} · ${fmt(l.serving)}`), el("span", {}, t("lane"))));
  if (!room.lane) {
    const target = el("div", { class: "lane-chart" });
    room.queue.target.parentNode.append(target);
    room.lane = chart(t("chart_lane"), [[t("lane_joined"), "#1565c0"], [t("lane_in"), "#2e7d32"]], target);
  }
  push(room.lane, x, [l.issued, l.serving]);
}
