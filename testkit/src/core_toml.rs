//! The config of a core under test (core/API.md "Config"), as TOML text: one builder for the tests of
//! wicket-core, its examples and the benchmarks, so the block that starts a core is written once.
//!
//! Every core built here signs and verifies admission tokens with one HS256 key, kid `hs`, issuer
//! `wicket`; the rest is the caller's:
//!
//! ```
//! use wicket_testkit::core_toml::CoreToml;
//! let text = CoreToml::new("admin-token-0123456789", "callback-secret-0123456789", "hs256-secret-0123456789abcdef")
//!     .listen(8081)
//!     .store("memory")
//!     .core("max-inflight = 100000")
//!     .build();
//! assert!(text.starts_with("listen = \"127.0.0.1:8081\"\n"));
//! assert!(text.contains("[tokens]\nissuer = \"wicket\"\nsigning-kid = \"hs\"\n"));
//! ```

/// A core's config file, built key by key; an empty line given to any of its methods adds nothing
/// (so an optional key can be passed as `""`). [`build`](Self::build) writes it out.
#[derive(Debug, Clone)]
pub struct CoreToml {
    admin_token: String,
    callback_secret: String,
    hs_secret: String,
    /// Top-level keys (`listen = ...`, `store = ...`), in order, before the first table.
    top: Vec<String>,
    /// Lines of `[payment]` after `callback-secret`.
    payment: Vec<String>,
    /// Lines of `[core]`; the table is left out when there are none (its defaults).
    core: Vec<String>,
    /// More `[[tokens.keys]]` entries after the HS256 key `hs`, each a whole entry's text.
    keys: Vec<String>,
    /// Sections after the core's own (`[redis]`, `[edge]`, `[[rooms]]`), as written.
    after: Vec<String>,
}

impl CoreToml {
    /// The core's admin token (`admin-token`), the payment callbacks' secret (`payment.callback-secret`)
    /// and the secret of the HS256 signing key `hs`.
    pub fn new(admin_token: &str, callback_secret: &str, hs_secret: &str) -> CoreToml {
        CoreToml {
            admin_token: admin_token.into(),
            callback_secret: callback_secret.into(),
            hs_secret: hs_secret.into(),
            top: Vec::new(),
            payment: Vec::new(),
            core: Vec::new(),
            keys: Vec::new(),
            after: Vec::new(),
        }
    }

    /// `listen = "127.0.0.1:{port}"` (without it, the core's default `127.0.0.1:8081`).
    pub fn listen(self, port: u16) -> CoreToml {
        self.top(&format!("listen = \"127.0.0.1:{port}\""))
    }

    /// `store = "{store}"`: `embedded`, `memory` or a `redis://` URL (without it, `embedded`).
    pub fn store(self, store: &str) -> CoreToml {
        self.top(&format!("store = \"{store}\""))
    }

    /// `data-dir = "{dir}"`, the durable embedded store's folder (relative to the config file's).
    pub fn data_dir(self, dir: &str) -> CoreToml {
        self.top(&format!("data-dir = {dir:?}"))
    }

    /// Any other top-level line (`event-files = ["ev.json"]`, `snapshot-every-mb = 1`); several lines at
    /// once are fine.
    pub fn top(mut self, line: &str) -> CoreToml {
        push(&mut self.top, line);
        self
    }

    /// A line of `[payment]` (`query-url = "..."`).
    pub fn payment(mut self, line: &str) -> CoreToml {
        push(&mut self.payment, line);
        self
    }

    /// A line of `[core]` (`max-inflight = 100000`).
    pub fn core(mut self, line: &str) -> CoreToml {
        push(&mut self.core, line);
        self
    }

    /// One more `[[tokens.keys]]` entry, its lines without the header (`kid = "ed"`, `alg = "EdDSA"`, ...).
    pub fn key(mut self, entry: &str) -> CoreToml {
        push(&mut self.keys, entry);
        self
    }

    /// Sections after the core's own (`[redis]`, `[edge]`, `[[rooms]]`), written as they are.
    pub fn then(mut self, sections: &str) -> CoreToml {
        push(&mut self.after, sections);
        self
    }

    /// The file's text.
    pub fn build(&self) -> String {
        let mut out = String::new();
        let mut line = |l: &str| {
            out.push_str(l);
            out.push('\n');
        };
        self.top.iter().for_each(|l| line(l));
        line(&format!("admin-token = \"{}\"", self.admin_token));
        line("[payment]");
        line(&format!("callback-secret = \"{}\"", self.callback_secret));
        self.payment.iter().for_each(|l| line(l));
        if !self.core.is_empty() {
            line("[core]");
            self.core.iter().for_each(|l| line(l));
        }
        line("[tokens]");
        line("issuer = \"wicket\"");
        line("signing-kid = \"hs\"");
        line("[[tokens.keys]]");
        line("kid = \"hs\"");
        line("alg = \"HS256\"");
        line(&format!("secret = \"{}\"", self.hs_secret));
        for k in &self.keys {
            line("[[tokens.keys]]");
            line(k);
        }
        self.after.iter().for_each(|l| line(l));
        out
    }
}

/// Adds `text` without its trailing newlines, unless there is nothing else in it.
fn push(to: &mut Vec<String>, text: &str) {
    let text = text.trim_end_matches('\n');
    if !text.trim().is_empty() {
        to.push(text.to_owned());
    }
}
