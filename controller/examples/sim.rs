//! The release controller on the simulated core: the comparison reports behind bench/controller.
//!
//! ```text
//! cargo run --release -p wicket-controller --example sim -- summary        # one line per scenario (SEEDS=1,2,3; NO_UTILISATION=1)
//! cargo run --release -p wicket-controller --example sim -- comparison     # controller vs fixed vs oracle (SEEDS)
//! cargo run --release -p wicket-controller --example sim -- other-plants   # plants the defaults were not tuned on
//! cargo run --release -p wicket-controller --example sim -- outage         # a 1.5 s core outage at steady state: recovery (SEEDS)
//! cargo run --release -p wicket-controller --example sim -- trace          # per tick, SCN=0|1|2|3 (cold start, −50%, +50%, outage), SEED
//! cargo run --release -p wicket-controller --example sim -- rooms          # several rooms on one core, light load (SEEDS=1..10)
//! cargo run --release -p wicket-controller --example sim -- rooms-trace    # per tick and room, SCN=0|1|2 (rooms_scenarios), SEED
//! ```

use wicket_controller::sim::{ControllerPolicy, comparison_table, other_plants_table, outage_table, rooms_scenarios, rooms_table, run, run_rooms, short_outage, standard_scenarios, summary_table_with};

fn seeds(default: Vec<u64>) -> Vec<u64> {
    std::env::var("SEEDS")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or(default)
}

fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn main() {
    match std::env::args().nth(1).as_deref().unwrap_or("summary") {
        "summary" => {
            let seeds = seeds((1..=10).collect());
            let util = std::env::var("NO_UTILISATION").is_err();
            println!("seeds {seeds:?} utilisation reported: {util}\n{}", summary_table_with(&seeds, util));
        }
        "comparison" => println!("{}", comparison_table(&seeds(vec![42, 7, 1234]))),
        "other-plants" => println!("{}", other_plants_table(&[1, 2, 3])),
        "outage" => println!("{}", outage_table(&seeds((1..=10).collect()))),
        "trace" => {
            let seed = env_num("SEED", 42);
            let scn = match env_num("SCN", 0usize) {
                3 => short_outage(seed),
                i => standard_scenarios(seed).swap_remove(i).0,
            };
            let r = run(&scn, &mut ControllerPolicy::new(scn.controller_config()));
            for t in &r.ticks {
                let w = &r.windows[t.t_s as usize];
                let Some(d) = t.decision else { continue };
                println!(
                    "{:>4} rate {:>7.1} adm {:>4} occ {:>6.0} L {:>7.0} ss {:>7.0} x {:>5.2} p99est {:>6.1} n {:>5} u {:>4.2} exits {:>4} | win p99 {:>7.1} ok {:>4} {}",
                    t.t_s,
                    t.rate,
                    t.admitted,
                    t.input.occupancy,
                    d.budget,
                    d.ssthresh.min(99999.0),
                    d.pressure.unwrap_or(-1.0),
                    t.input.p99_ms.unwrap_or(-1.0),
                    t.input.samples,
                    t.input.utilisation.unwrap_or(0.0),
                    t.input.exits_per_s,
                    w.p99_ms.unwrap_or(-1.0).min(9999.0),
                    w.ok,
                    d.reason.as_str()
                );
            }
        }
        "rooms" => println!("{}", rooms_table(&seeds((1..=10).collect()))),
        "rooms-trace" => {
            let scn = rooms_scenarios(env_num("SEED", 1)).swap_remove(env_num("SCN", 1usize));
            let r = run_rooms(&scn, true);
            for room in &r.rooms {
                let opens = scn.rooms.iter().find(|l| l.name == room.name).map_or(0, |l| l.opens_at_s);
                for (i, d) in room.decisions.iter().enumerate() {
                    let t = opens as usize + i;
                    let w = &r.windows[t.min(r.windows.len() - 1)];
                    println!(
                        "{} {:>4} rate {:>7.1} occ {:>6.0} L {:>7.0} ss {:>7.0} x {:>5.2} | win p99 {:>7.1} ok {:>4} {}",
                        room.name,
                        t,
                        d.rate,
                        d.occupancy,
                        d.budget,
                        d.ssthresh.min(99999.0),
                        d.pressure.unwrap_or(-1.0),
                        w.p99_ms.unwrap_or(-1.0).min(9999.0),
                        w.ok,
                        d.reason.as_str()
                    );
                }
                println!("{} admitted {} of {}, longest wait {:?} s, ticks under min {}", room.name, room.admitted, room.fans, room.max_wait_s, room.ticks_below_min);
            }
        }
        other => {
            eprintln!("unknown report {other:?}: summary | comparison | other-plants | outage | trace | rooms | rooms-trace");
            std::process::exit(2);
        }
    }
}
