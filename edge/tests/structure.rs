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
