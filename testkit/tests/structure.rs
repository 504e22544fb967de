//! The files under testkit/src import each other without a circle (read from their `use` lines
//! and `crate::` / `super::` / `self::` paths: [`wicket_testkit::structure`]).
//!
//! `cargo nextest run -p wicket-testkit --test structure`

#[test]
fn no_import_circle() {
    wicket_testkit::structure::assert_no_import_cycles(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
}
