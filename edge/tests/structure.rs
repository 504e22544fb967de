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

/// The order of the edge's checks exists once (issue #25, docs/DESIGN.md §7): the doors — the
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
    for door in ["fast.rs", "fast_h2.rs", "forward.rs", "proxy.rs", "front.rs"] {
        let text = code(door);
        let found: Vec<&str> = checks.iter().copied().filter(|c| text.contains(c)).collect();
        assert!(found.is_empty(), "{door} runs checks of the decision step itself: {found:?}");
    }
    let step = code("decide.rs");
    let missing: Vec<&str> = checks.iter().copied().filter(|c| !step.contains(c)).collect();
    assert!(missing.is_empty(), "the decision step does not run {missing:?}: the list above names the wrong calls");
}
