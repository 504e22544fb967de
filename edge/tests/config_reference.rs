//! The configuration reference in docs/src/reference/ is generated from the config types (doc
//! comments, serde names, defaults: `wicket_edge::reference`); this fails when the committed pages
//! differ from what the code generates, so a key added or changed in the code without regenerating
//! the pages does not pass. `WICKET_BLESS=1` writes the pages instead of comparing (the same as
//! `cargo run -p wicket-edge --bin wicket -- config-reference docs/src/reference`).

use std::path::PathBuf;

#[test]
fn committed_reference_is_the_generated_one() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/src/reference");
    let bless = std::env::var_os("WICKET_BLESS").is_some();
    let mut stale = Vec::new();
    for page in wicket_edge::reference::pages() {
        let path = dir.join(page.file);
        if bless {
            std::fs::write(&path, &page.text).unwrap();
            continue;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed != page.text {
            let same = committed.lines().zip(page.text.lines()).take_while(|(a, b)| a == b).count();
            stale.push(format!("docs/src/reference/{} (first difference at line {})", page.file, same + 1));
        }
    }
    assert!(
        stale.is_empty(),
        "the configuration reference differs from the config types: {}\nregenerate it with:\n    {}",
        stale.join(", "),
        wicket_edge::reference::REGENERATE
    );
}
