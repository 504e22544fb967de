//! The edge's modules import each other without a circle: read from the `use` lines and the
//! `crate::` / `super::` / `self::` paths of every file under edge/src, the file-to-file graph has no
//! cycle, so a change to one part's settings or code does not reach back into the parts it uses. The
//! reader and the circle finder are shared by every crate's structure test
//! ([`wicket_testkit::structure`]).
//!
//! Each part owns its config section (`limit::LimitRule`, `bot::BotConfig`, ...) and
//! [`wicket_edge::config`] only composes them: the config module imports the parts, never the other
//! way round.
//!
//! `cargo nextest run -p wicket-edge --test structure`

use std::collections::BTreeSet;

use wicket_testkit::structure::{ImportGraph, assert_no_import_cycles, module_name};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

#[test]
fn no_import_circle_among_edge_files() {
    assert_no_import_cycles(SRC);
}

#[test]
fn the_config_module_is_imported_by_no_part_it_composes() {
    let g = ImportGraph::of_crate(SRC);
    let config = vec!["config".to_string()];
    // Everything the config module reaches: none of it may import the config module back.
    let mut reach = BTreeSet::new();
    let mut todo: Vec<Vec<String>> = g.edges.get(&config).into_iter().flatten().cloned().collect();
    while let Some(m) = todo.pop() {
        if reach.insert(m.clone()) {
            todo.extend(g.edges.get(&m).into_iter().flatten().cloned());
        }
    }
    let back: Vec<String> =
        reach.iter().filter(|m| g.edges.get(*m).is_some_and(|t| t.contains(&config))).map(|m| module_name(m)).collect();
    assert!(back.is_empty(), "modules the config module uses import it back: {back:?}");
    for part in ["limit", "blocklist", "anomaly", "bot", "admission", "tls", "room"] {
        assert!(reach.contains(&vec![part.to_string()]), "config does not compose {part}: the check above reads too little");
    }
}

/// The order of the edge's checks exists once (issue #25, docs/src/design.md §7): the doors — the
/// HTTP/1.1 front, the HTTP/2 fast path, the forwarded fast path, Pingora's proxy and the
/// listener app — carry out `decide::decide`'s decision and call none of the checks themselves
/// (blocklists, identity, limits, protection, admission token, session, bot check); the decision
/// step calls each of them.
#[test]
fn only_the_decision_step_runs_the_checks() {
    let checks = [
        "blocklist.ip(",
        ".identify(",
        "identity_refused(",
        "check_limits(",
        "protection()",
        ".admission",
        "session_ok(",
        "check_pass(",
        "bot.mode(",
        "touch_by_token(",
    ];
    let code = |file: &str| {
        let text = std::fs::read_to_string(format!("{SRC}/{file}")).unwrap();
        // Code only: comments may name the checks.
        text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
    };
    for door in ["front/http1.rs", "front/h2.rs", "front/forward.rs", "front/proxy.rs", "front/mod.rs"] {
        let text = code(door);
        let found: Vec<&str> = checks.iter().copied().filter(|c| text.contains(c)).collect();
        assert!(found.is_empty(), "{door} runs checks of the decision step itself: {found:?}");
    }
    let step = code("decide.rs");
    let missing: Vec<&str> = checks.iter().copied().filter(|c| !step.contains(c)).collect();
    assert!(missing.is_empty(), "the decision step does not run {missing:?}: the list above names the wrong calls");
}

/// The doors sit side by side under `front/` (issue #25): the HTTP/1.1 door, the HTTP/2 door and
/// Pingora's proxy import none of each other, so a request's way passes through the one door that
/// serves it; the forwarded path belongs to the HTTP/1.1 door alone; what they share
/// (`front::conn`) and the listener (`front`) are the only other files under `front/` they use.
/// Outside `front/`, only the server (which puts the listener and the proxy together) names a
/// door, so no part below the doors reaches back up into one.
#[test]
fn the_doors_sit_side_by_side() {
    let g = ImportGraph::of_crate(SRC);
    let m = |s: &str| s.split("::").map(str::to_string).collect::<Vec<_>>();
    let doors = ["front::http1", "front::h2", "front::proxy", "front::forward"];
    for d in doors {
        assert!(g.files.contains(&m(d)), "{d} is not a file any more: the list above is stale");
        let uses = g.edges.get(&m(d)).cloned().unwrap_or_default();
        let into_front: Vec<String> =
            uses.iter().filter(|t| t.first().is_some_and(|f| f == "front")).map(|t| module_name(t)).collect();
        let allowed: &[&str] = match d {
            "front::http1" => &["front::conn", "front::forward"],
            "front::h2" => &["front::conn"],
            _ => &[],
        };
        let wrong: Vec<&String> = into_front.iter().filter(|t| !allowed.contains(&t.as_str())).collect();
        assert!(wrong.is_empty(), "{d} imports {wrong:?}: a door may use only what the doors share");
    }
    for (from, to) in &g.edges {
        if from.first().is_some_and(|f| f == "front") || module_name(from) == "server" {
            continue;
        }
        let named: Vec<String> = to.iter().filter(|t| t.first().is_some_and(|f| f == "front")).map(|t| module_name(t)).collect();
        assert!(named.is_empty(), "{} imports {named:?}: only the server puts the doors together", module_name(from));
    }
    // The check reads the arrows it should: the listener dispatches to both connection doors.
    let listener = g.edges.get(&m("front")).cloned().unwrap_or_default();
    assert!(listener.contains(&m("front::h2")) && listener.contains(&m("front::http1")), "{listener:?}");
}

/// The edge's shared state is built from the parts and lent out by the services on top of it:
/// only the decision step, the doors, the admin service and the server take the whole
/// `EdgeState` (issue #25). The waiting room and every other part take the handles they need
/// (e.g. `room::http::QueueEdge`, the release loop's rooms, core and registry), so `room/` and
/// `state.rs` do not lean on each other.
#[test]
fn only_the_services_take_the_whole_state() {
    let g = ImportGraph::of_crate(SRC);
    let state = vec!["state".to_string()];
    let takers: BTreeSet<String> =
        g.edges.iter().filter(|(_, to)| to.contains(&state)).map(|(from, _)| module_name(from)).collect();
    let allowed: BTreeSet<String> =
        ["admin", "decide", "front::conn", "front::forward", "front::proxy", "server"].iter().map(|s| s.to_string()).collect();
    let extra: Vec<&String> = takers.difference(&allowed).collect();
    assert!(extra.is_empty(), "{extra:?} import the edge's whole state: lend them the handles they need");
    assert!(takers.contains("decide") && takers.contains("server"), "the reading misses arrows: {takers:?}");
}
