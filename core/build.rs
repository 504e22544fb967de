//! What `--version` says besides the crate version: the commit the binaries were built from and the build
//! date, as `WICKET_COMMIT` and `WICKET_BUILD_DATE` for [`wicket_core::VERSION`] (both binaries, `wicket`
//! and `wicket-core`, print it).
//!
//! - Commit: the environment's `WICKET_COMMIT` when set (a container build gets the source without `.git`
//!   and is handed the commit as a build argument), else `git rev-parse --short=12 HEAD` in this crate's
//!   folder, else `unknown` (a source tarball, no git installed). It names HEAD: a build from a tree with
//!   uncommitted changes names the commit those changes sit on.
//! - Date: `SOURCE_DATE_EPOCH` when set and not empty (reproducible builds; scripts/release.sh sets it to the
//!   start of the current UTC day unless given one), else the time this script ran — which, in a development
//!   tree, is the last time HEAD moved or the crate was cleaned, not every build. UTC, `YYYY-MM-DD`.
//!
//! No dependencies: the date arithmetic is the civil-from-days algorithm, a few lines.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=WICKET_COMMIT");
    println!("cargo::rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());

    let commit = match std::env::var("WICKET_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_owned(),
        _ => {
            watch_head(&dir);
            git(&dir, &["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into())
        }
    };
    // Set but empty counts as unset (a container build passes the build argument through either way).
    let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(s) if !s.trim().is_empty() => {
            s.trim().parse::<i64>().unwrap_or_else(|_| panic!("SOURCE_DATE_EPOCH is not a number of seconds: {s:?}"))
        }
        _ => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64),
    };
    let (y, m, d) = civil_from_days(epoch.div_euclid(86_400));
    println!("cargo::rustc-env=WICKET_COMMIT={commit}");
    println!("cargo::rustc-env=WICKET_BUILD_DATE={y:04}-{m:02}-{d:02}");
}

/// Runs git in `dir`; its trimmed output, or `None` when git is missing or fails (not a repository).
fn git(dir: &str, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

/// Reruns this script when HEAD moves: the HEAD file (a checkout, a detached HEAD), the branch's loose ref (a
/// commit) and `packed-refs` (a ref packed by `git gc`). Only files that exist are named: cargo reruns a script
/// on every build while a named file is missing. Paths come from `git rev-parse --git-path`, which knows
/// worktrees (HEAD per worktree, refs in the common dir).
fn watch_head(dir: &str) {
    let mut files = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        files.push(branch);
    }
    for f in files {
        if let Some(path) = git(dir, &["rev-parse", "--path-format=absolute", "--git-path", &f])
            && Path::new(&path).is_file()
        {
            println!("cargo::rerun-if-changed={path}");
        }
    }
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}
