//! deploy/ against the real `wicket-core` binary: every config a compose service, a systemd unit or a Kubernetes
//! Deployment runs the core with passes `wicket-core check-config` with the secrets that deployment gives it,
//! their command lines are real subcommands and flags, the unit passes `systemd-analyze verify` and keeps the
//! embedded store in its state directory, and `wicket-core --version` names the commit and the build date. The
//! rest (ports, schemas, the edge's side) is edge/tests/deploy.rs.

use std::path::{Path, PathBuf};
use std::process::Command;

use wicket_testkit::deploy::{self, Program, Unit};

fn wicket_core() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_wicket-core"))
}

#[test]
fn version_names_the_commit_and_the_build_date() {
    let out = Command::new(wicket_core()).arg("--version").output().unwrap();
    assert!(out.status.success());
    deploy::check_version_line("wicket-core", &String::from_utf8_lossy(&out.stdout));
}

#[test]
fn every_core_run_is_a_real_command_with_a_config_that_passes_check_config() {
    let scratch = tempfile::tempdir().unwrap();
    for run in deploy::runs(Program::Core) {
        let origin = &run.origin;
        let name = Path::new(&run.argv[0]).file_name().unwrap().to_str().unwrap();
        assert_eq!(name, "wicket-core", "{origin}: {:?}", run.argv);
        assert_eq!(run.argv[1], "serve", "{origin}: {:?}", run.argv);
        let help = Command::new(wicket_core()).args([&run.argv[1], "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&help.stdout);
        for flag in run.argv.iter().filter(|a| a.starts_with('-')) {
            assert!(help.contains(flag.as_str()), "{origin}: `wicket-core serve` has no {flag}:\n{help}");
        }
        let mut given: Vec<_> = run.secrets.iter().filter(|s| s.starts_with("WICKET_")).cloned().collect();
        given.sort();
        assert_eq!(given, run.config.env_vars(), "{origin}: secrets given vs the `*-env` keys of {}", run.config.origin);
        let dir = scratch.path().join(origin.replace(['/', ' '], "_"));
        std::fs::create_dir_all(&dir).unwrap();
        let out = deploy::check_config(&wicket_core(), &run, &dir);
        assert!(
            out.status.success(),
            "{origin}: wicket-core check-config {}:\n{}{}",
            run.config.origin,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_core_unit_is_hardened_keeps_its_data_in_its_state_directory_and_passes_verify() {
    let unit = Unit::of(Program::Core);
    assert_eq!(unit.service("DynamicUser"), "yes");
    assert_eq!(unit.service("ProtectSystem"), "strict");
    assert_eq!(unit.service("NoNewPrivileges"), "yes");
    assert!(unit.service("LimitNOFILE").parse::<u64>().unwrap() >= 1_048_576);
    // The core does not handle SIGHUP: a reload would stop it.
    assert!(unit.all("Service", "ExecReload").is_empty(), "wicket-core has no reload");
    assert_eq!(unit.exec_start()[1], "/usr/local/bin/wicket-core");
    // ProtectSystem=strict leaves only the state directory writable: an embedded store must live there.
    let run = deploy::runs(Program::Core).into_iter().find(|r| r.origin.contains("systemd")).unwrap();
    let cfg = run.config.toml();
    if cfg.get("store").and_then(|s| s.as_str()).unwrap_or("embedded") == "embedded" {
        let state = format!("/var/lib/{}", unit.service("StateDirectory"));
        assert_eq!(cfg.get("data-dir").and_then(|d| d.as_str()), Some(state.as_str()), "{}: data-dir", run.config.origin);
    }
    deploy::systemd_verify(Program::Core, &wicket_core());
}
