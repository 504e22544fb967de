//! `wicket-core --help`: every subcommand and every option says what it is (an empty help text for
//! `--config` was a newcomer's first stumble), and `--version` answers.

use std::process::Command;

fn wicket_core(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_wicket-core")).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The option lines of a clap help text without a description: neither "signature  description" nor
/// the signature alone with the description on the next, deeper-indented line (clap's long layout).
fn undescribed(help: &str) -> Vec<String> {
    let lines: Vec<&str> = help.lines().collect();
    lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("  ") && l.trim_start().starts_with(['-', '<']) && !l.trim().contains("  "))
        .filter(|(i, _)| !lines.get(i + 1).is_some_and(|n| n.starts_with("          ") && !n.trim().is_empty()))
        .map(|(_, l)| (*l).to_owned())
        .collect()
}

#[test]
fn every_subcommand_and_option_has_help_text() {
    assert!(wicket_core(&["--version"]).starts_with("wicket-core "));
    for sub in ["serve", "check-config", "mint-token"] {
        let help = wicket_core(&[sub, "--help"]);
        assert_eq!(undescribed(&help), Vec::<String>::new(), "wicket-core {sub} --help:\n{help}");
    }
}
