//! The release controller vs a fixed rate vs a clairvoyant oracle, on the simulated core of
//! `wicket_controller::sim` (known capacity curve, real actuation delay): cold start, −50% and +50%
//! capacity steps, over several seeds; and several rooms on one core (one after another, at once
//! with one surging) and light load (`rooms_scenarios`).

use serde_json::json;
use wicket_controller::sim::{compare, rooms_scenarios, rooms_table, run_rooms, standard_scenarios, summary_table};

/// Runs the comparison over `seeds`; returns the summary.json value and the text of its section (bench/results/controller.md).
pub fn run(seeds: &[u64]) -> (serde_json::Value, String) {
    let mut per_scenario = serde_json::Map::new();
    for i in 0..3 {
        let (mut over, mut steady, mut fixed_over, mut extra_viol, mut worst_settle) = (0usize, 0usize, 0usize, 0i64, 0u64);
        let (mut gp_min, mut gp_sum, mut fixed_gp_sum) = (f64::MAX, 0.0, 0.0);
        let mut name = "";
        for &seed in seeds {
            let (scn, ranges, step) = standard_scenarios(seed).swap_remove(i);
            name = scn.name;
            let c = compare(&scn);
            let (o, n) = c.controller.over(&ranges);
            over += o;
            steady += n;
            fixed_over += c.fixed.over(&ranges).0;
            let og = c.oracle.goodput(&ranges).max(1e-9);
            let g = c.controller.goodput(&ranges) / og;
            gp_min = gp_min.min(g);
            gp_sum += g;
            fixed_gp_sum += c.fixed.goodput(&ranges) / og;
            if let Some(s) = step {
                let extra = c.controller.violation_s(s, s + 120) as i64 - c.oracle.violation_s(s, s + 120) as i64;
                extra_viol = extra_viol.max(extra);
                worst_settle = worst_settle.max(c.controller.settle_after(s, 120));
            }
        }
        let n = seeds.len() as f64;
        per_scenario.insert(
            name.to_string(),
            json!({
                "controller_steady_over_fraction": over as f64 / steady.max(1) as f64,
                "fixed_steady_over_fraction": fixed_over as f64 / steady.max(1) as f64,
                "controller_goodput_vs_oracle_min": (gp_min * 1000.0).round() / 1000.0,
                "controller_goodput_vs_oracle_mean": (gp_sum / n * 1000.0).round() / 1000.0,
                "fixed_goodput_vs_oracle_mean": (fixed_gp_sum / n * 1000.0).round() / 1000.0,
                "extra_violation_seconds_vs_oracle_max": extra_viol,
                "settle_seconds_max": worst_settle,
            }),
        );
    }
    let mut table = summary_table(seeds);
    table.push('\n');
    table.push_str(&rooms_table(seeds));
    (json!({"seeds": seeds, "scenarios": per_scenario, "rooms": rooms(seeds)}), table)
}

/// Per multi-room scenario and room, over `seeds` (worst seed): fans admitted, the longest wait,
/// and the ticks at which the controller set a rate under the room's minimum.
fn rooms(seeds: &[u64]) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for i in 0..rooms_scenarios(0).len() {
        let runs: Vec<_> = seeds.iter().map(|&s| run_rooms(&rooms_scenarios(s).swap_remove(i), true)).collect();
        let name = rooms_scenarios(0).swap_remove(i).name;
        let mut per_room = serde_json::Map::new();
        for k in 0..runs[0].rooms.len() {
            let outcomes: Vec<_> = runs.iter().map(|r| &r.rooms[k]).collect();
            let wait = outcomes.iter().map(|o| o.max_wait_s).try_fold(0.0f64, |w, o| o.map(|o| w.max(o)));
            per_room.insert(
                outcomes[0].name.to_string(),
                json!({
                    "fans": outcomes[0].fans,
                    "admitted_min": outcomes.iter().map(|o| o.admitted).min().unwrap_or(0),
                    "max_wait_seconds": wait.map(|w| (w * 10.0).round() / 10.0),
                    "ticks_below_min": outcomes.iter().map(|o| o.ticks_below_min).sum::<usize>(),
                }),
            );
        }
        out.insert(name.to_string(), serde_json::Value::Object(per_room));
    }
    serde_json::Value::Object(out)
}
