//! The files under deploy/ as the deployment tests read them (`edge/tests/deploy.rs`, `core/tests/deploy.rs`):
//! for each way of running Wicket — the compose file, the systemd units, the Kubernetes manifests — and each
//! program in it (edge, core), the command line it runs, the shipped config file that command names (followed
//! through the volume mounts, the unit's install path or the ConfigMap), the secrets it is given and the ports
//! it declares. The tests then hold each of these against the real binaries and the configs.
//!
//! ```ignore
//! for run in deploy::runs(deploy::Program::Edge) {
//!     assert_eq!(run.argv[0], "wicket");
//!     let cfg = run.config.toml();        // the file `--config` names, as that program would read it
//! }
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_yaml::Value as Yaml;

/// The repository's root folder.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("testkit/ sits in the repository").to_path_buf()
}

/// Which program a run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// `wicket serve`.
    Edge,
    /// `wicket-core serve`.
    Core,
}

impl Program {
    /// Its name in the compose file, the unit file (`wicket-<name>.service`) and the manifests (`wicket-<name>`).
    pub fn name(self) -> &'static str {
        match self {
            Program::Edge => "edge",
            Program::Core => "core",
        }
    }
}

/// A config file a run names, with where its relative paths resolve.
#[derive(Debug, Clone)]
pub struct ShippedConfig {
    /// Where it comes from, for messages: a path under deploy/, or `<file>#<key>` for a ConfigMap entry.
    pub origin: String,
    /// Its text.
    pub text: String,
    /// The file in the repository; none for a ConfigMap entry.
    pub file: Option<PathBuf>,
}

impl ShippedConfig {
    /// The file parsed as TOML (a test failure when it is not).
    pub fn toml(&self) -> toml::Value {
        toml::from_str(&self.text).unwrap_or_else(|e| panic!("{}: not TOML: {e}", self.origin))
    }

    /// Every environment variable a `*-env` key names (`admin-token-env`, `secret-env`, ...), anywhere in it.
    pub fn env_vars(&self) -> Vec<String> {
        fn walk(v: &toml::Value, out: &mut Vec<String>) {
            match v {
                toml::Value::Table(t) => {
                    for (k, v) in t {
                        match v {
                            toml::Value::String(var) if k.ends_with("-env") => out.push(var.clone()),
                            _ => walk(v, out),
                        }
                    }
                }
                toml::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
                _ => {}
            }
        }
        let mut out = Vec::new();
        walk(&self.toml(), &mut out);
        out.sort();
        out.dedup();
        out
    }
}

/// One program as one way of deploying runs it.
#[derive(Debug, Clone)]
pub struct Run {
    /// `compose`, `systemd` or `kubernetes`, and the file, for messages.
    pub origin: String,
    /// The command line without any wrapper (with-secrets): program name first (`wicket`, `wicket-core`), as
    /// written (the systemd unit's absolute path included).
    pub argv: Vec<String>,
    /// The shipped config its `--config` names.
    pub config: ShippedConfig,
    /// The secrets it is given, by name: compose `secrets:`, the unit's `LoadCredential=` names, the Secret
    /// volume's item paths.
    pub secrets: Vec<String>,
}

/// Every run of `program`: the compose file's service, the systemd unit, the Kubernetes Deployment.
pub fn runs(program: Program) -> Vec<Run> {
    vec![compose_run(program), systemd_run(program), kubernetes_run(program)]
}

/// The value after `--config` in a command line.
pub fn config_arg(argv: &[String]) -> &str {
    let i = argv.iter().position(|a| a == "--config" || a == "-c").unwrap_or_else(|| panic!("no --config in {argv:?}"));
    argv.get(i + 1).unwrap_or_else(|| panic!("--config without a value in {argv:?}"))
}

/// A YAML file's documents.
pub fn yaml_docs(rel: &str) -> Vec<Yaml> {
    let path = root().join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| {
            let mut v = <Yaml as serde::Deserialize>::deserialize(d).unwrap_or_else(|e| panic!("{rel}: {e}"));
            v.apply_merge().unwrap_or_else(|e| panic!("{rel}: merge keys: {e}"));
            v
        })
        .collect()
}

/// deploy/container/compose.yaml, its `<<` merge keys applied.
pub fn compose() -> Yaml {
    yaml_docs("deploy/container/compose.yaml").into_iter().next().expect("compose.yaml is empty")
}

/// A YAML sequence of strings (a command, a list of names); a test failure otherwise.
pub fn strings(v: &Yaml, what: &str) -> Vec<String> {
    v.as_sequence()
        .unwrap_or_else(|| panic!("{what}: not a list: {v:?}"))
        .iter()
        .map(|s| match s {
            Yaml::String(s) => s.clone(),
            Yaml::Number(n) => n.to_string(),
            other => panic!("{what}: not a string: {other:?}"),
        })
        .collect()
}

fn compose_run(program: Program) -> Run {
    let compose = compose();
    let service = &compose["services"][program.name()];
    let origin = format!("deploy/container/compose.yaml services.{}", program.name());
    let argv = strings(&service["command"], &origin);
    let config_path = config_arg(&argv).to_owned();
    // The config file through the service's bind mounts (`./config:/etc/wicket:ro`).
    let mounts = strings(&service["volumes"], &format!("{origin}.volumes"));
    let file = mounts
        .iter()
        .filter_map(|m| {
            let mut parts = m.split(':');
            let (host, inside) = (parts.next()?, parts.next()?);
            let rest = Path::new(&config_path).strip_prefix(inside).ok()?;
            host.starts_with("./").then(|| root().join("deploy/container").join(&host[2..]).join(rest))
        })
        .next()
        .unwrap_or_else(|| panic!("{origin}: no bind mount holds {config_path} ({mounts:?})"));
    let secrets = strings(&service["secrets"], &format!("{origin}.secrets"));
    Run { origin, argv, config: shipped(&file), secrets }
}

fn shipped(file: &Path) -> ShippedConfig {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let origin = file.strip_prefix(root()).unwrap_or(file).display().to_string();
    ShippedConfig { origin, text, file: Some(file.to_path_buf()) }
}

/// A systemd unit file: each `Key=value` of each `[Section]`, in order (a key may repeat).
#[derive(Debug, Clone)]
pub struct Unit {
    /// The file under deploy/systemd/.
    pub path: PathBuf,
    /// (section, key, value).
    pub entries: Vec<(String, String, String)>,
}

impl Unit {
    /// deploy/systemd/wicket-<program>.service.
    pub fn of(program: Program) -> Unit {
        let path = root().join(format!("deploy/systemd/wicket-{}.service", program.name()));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut section = String::new();
        let mut entries = Vec::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = s.to_owned();
            } else if let Some((k, v)) = line.split_once('=') {
                entries.push((section.clone(), k.trim().to_owned(), v.trim().to_owned()));
            }
        }
        Unit { path, entries }
    }

    /// Every value of `key` in `section`.
    pub fn all(&self, section: &str, key: &str) -> Vec<&str> {
        self.entries.iter().filter(|(s, k, _)| s == section && k == key).map(|(_, _, v)| v.as_str()).collect()
    }

    /// The one value of `key` in `[Service]`; a test failure when it is missing or repeated.
    pub fn service(&self, key: &str) -> &str {
        match self.all("Service", key)[..] {
            [v] => v,
            ref vs => panic!("{}: [Service] {key}= is there {} times", self.path.display(), vs.len()),
        }
    }

    /// `ExecStart=` split on spaces (the shipped units quote nothing).
    pub fn exec_start(&self) -> Vec<String> {
        self.service("ExecStart").split_whitespace().map(str::to_owned).collect()
    }
}

/// with-secrets, as the units, the image and the manifests install it: the first word of a command line that
/// runs through it.
pub const WITH_SECRETS: &str = "with-secrets";

fn without_wrapper(argv: Vec<String>) -> Vec<String> {
    match argv.first() {
        Some(first) if Path::new(first).file_name().is_some_and(|n| n == WITH_SECRETS) => argv[1..].to_vec(),
        _ => argv,
    }
}

fn systemd_run(program: Program) -> Run {
    let unit = Unit::of(program);
    let origin = format!("deploy/systemd/wicket-{}.service", program.name());
    let argv = without_wrapper(unit.exec_start());
    // Installed as /etc/wicket/<name>.toml from deploy/systemd/<name>.toml (the unit's install lines).
    let config_path = config_arg(&argv);
    let name = config_path.strip_prefix("/etc/wicket/").unwrap_or_else(|| panic!("{origin}: --config {config_path} is not in /etc/wicket"));
    let file = root().join("deploy/systemd").join(name);
    let secrets = unit
        .all("Service", "LoadCredential")
        .iter()
        .map(|c| c.split_once(':').map_or(*c, |(name, _)| name).to_owned())
        .collect();
    Run { origin, argv, config: shipped(&file), secrets }
}

/// Every Kubernetes object under deploy/kubernetes/, with the file it is in.
pub fn kubernetes_objects() -> Vec<(String, Yaml)> {
    let dir = root().join("deploy/kubernetes");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            let rel = f.strip_prefix(root()).unwrap().display().to_string();
            yaml_docs(&rel).into_iter().filter(|d| !d.is_null()).map(move |d| (rel.clone(), d))
        })
        .collect()
}

/// The object of `kind` named `name` under deploy/kubernetes/; a test failure when there is not exactly one.
pub fn kubernetes_object(kind: &str, name: &str) -> Yaml {
    let found: Vec<_> = kubernetes_objects()
        .into_iter()
        .filter(|(_, o)| o["kind"].as_str() == Some(kind) && o["metadata"]["name"].as_str() == Some(name))
        .map(|(_, o)| o)
        .collect();
    match &found[..] {
        [one] => one.clone(),
        _ => panic!("deploy/kubernetes: {} objects of kind {kind} named {name}", found.len()),
    }
}

/// The only container of a Deployment.
pub fn deployment_container(deployment: &Yaml) -> &Yaml {
    let containers = deployment["spec"]["template"]["spec"]["containers"].as_sequence().expect("containers");
    assert_eq!(containers.len(), 1, "one container per pod");
    &containers[0]
}

fn kubernetes_run(program: Program) -> Run {
    let name = format!("wicket-{}", program.name());
    let origin = format!("deploy/kubernetes Deployment {name}");
    let deployment = kubernetes_object("Deployment", &name);
    let container = deployment_container(&deployment);
    let argv = strings(&container["args"], &format!("{origin} args"));
    let config_path = config_arg(&argv).to_owned();
    let volumes = deployment["spec"]["template"]["spec"]["volumes"].as_sequence().expect("volumes").clone();
    let volume = |n: &str| volumes.iter().find(|v| v["name"].as_str() == Some(n)).cloned();
    let mut config = None;
    let mut secrets = Vec::new();
    for mount in container["volumeMounts"].as_sequence().expect("volumeMounts") {
        let at = mount["mountPath"].as_str().unwrap();
        let v = volume(mount["name"].as_str().unwrap()).unwrap_or_else(|| panic!("{origin}: no volume for {mount:?}"));
        if let (Some(cm), Ok(rest)) = (v["configMap"]["name"].as_str(), Path::new(&config_path).strip_prefix(at)) {
            // The file is the ConfigMap key whose item has that path (all keys when there are no items).
            let file = rest.to_str().unwrap();
            let key = match v["configMap"]["items"].as_sequence() {
                Some(items) => items.iter().find(|i| i["path"].as_str() == Some(file)).and_then(|i| i["key"].as_str()),
                None => Some(file),
            }
            .unwrap_or_else(|| panic!("{origin}: ConfigMap {cm} mounted at {at} has no item {file}"))
            .to_owned();
            let map = kubernetes_object("ConfigMap", cm);
            let text = map["data"][key.as_str()].as_str().unwrap_or_else(|| panic!("ConfigMap {cm} has no key {key}")).to_owned();
            config = Some(ShippedConfig { origin: format!("deploy/kubernetes ConfigMap {cm} {key}"), text, file: None });
        }
        if let Some(items) = v["secret"]["items"].as_sequence() {
            // with-secrets reads the folder WICKET_SECRETS_DIR names: this mount must be it.
            let dir_env = container["env"]
                .as_sequence()
                .and_then(|env| env.iter().find(|e| e["name"].as_str() == Some("WICKET_SECRETS_DIR")))
                .and_then(|e| e["value"].as_str());
            assert_eq!(dir_env, Some(at), "{origin}: WICKET_SECRETS_DIR must be where the Secret is mounted");
            secrets.extend(items.iter().map(|i| i["path"].as_str().unwrap().to_owned()));
        }
    }
    let config = config.unwrap_or_else(|| panic!("{origin}: no ConfigMap mount holds {config_path}"));
    Run { origin, argv, config, secrets }
}

/// `host:port` → port; a test failure otherwise.
pub fn port_of(addr: &str) -> u16 {
    addr.rsplit_once(':').and_then(|(_, p)| p.parse().ok()).unwrap_or_else(|| panic!("not host:port: {addr}"))
}

/// The ports of a Kubernetes container by name.
pub fn container_ports(container: &Yaml) -> BTreeMap<String, u16> {
    container["ports"]
        .as_sequence()
        .expect("ports")
        .iter()
        .map(|p| (p["name"].as_str().expect("named port").to_owned(), p["containerPort"].as_u64().expect("containerPort") as u16))
        .collect()
}

/// What `check-config` answered for a run's config: `<binary> check-config <file>` with every variable the
/// config's `*-env` keys name set to a made-up secret (64 characters: over every minimum length).
///
/// Checked as a copy in `scratch`, with only these changes, when the file has what exists only where it is
/// deployed: a ConfigMap entry (no file here); an absolute `data-dir` (a unit's state directory), moved under
/// `scratch`, so the test neither needs nor touches /var/lib; an `edge.core` or `edge.origin` named by a host
/// name other than `localhost` (a compose service, a Kubernetes Service: the edge resolves it at start and in
/// check-config, and it resolves only on that network), pointed at 127.0.0.1 with the same port. The tests
/// check those names against the compose services and the Services themselves.
pub fn check_config(binary: &Path, run: &Run, scratch: &Path) -> std::process::Output {
    let mut cfg = run.config.toml();
    let host_data_dir = cfg.get("data-dir").and_then(|d| d.as_str()).is_some_and(|d| d.starts_with('/'));
    let mut named_upstreams = Vec::new();
    if let Some(edge) = cfg.get("edge").and_then(|e| e.as_table()) {
        for key in ["core", "origin"] {
            let Some(url) = edge.get(key).and_then(|v| v.as_str()) else { continue };
            let Some((scheme, rest)) = url.split_once("://") else { continue };
            let Some((host, port)) = rest.trim_end_matches('/').rsplit_once(':') else { continue };
            if host != "localhost" && host.parse::<std::net::IpAddr>().is_err() {
                named_upstreams.push((key, format!("{scheme}://127.0.0.1:{port}")));
            }
        }
    }
    let file = match &run.config.file {
        Some(file) if !host_data_dir && named_upstreams.is_empty() => file.clone(),
        _ => {
            if host_data_dir {
                let moved = scratch.join("data");
                cfg.as_table_mut().unwrap().insert("data-dir".into(), toml::Value::String(moved.display().to_string()));
            }
            if let Some(edge) = cfg.get_mut("edge").and_then(|e| e.as_table_mut()) {
                for (key, local) in named_upstreams {
                    edge.insert(key.into(), toml::Value::String(local));
                }
            }
            // Relative paths in it would now resolve in `scratch`, and fail: the shipped copies have none.
            let copy = scratch.join(Path::new(config_arg(&run.argv)).file_name().unwrap());
            std::fs::write(&copy, toml::to_string(&cfg).unwrap()).unwrap();
            copy
        }
    };
    let mut cmd = std::process::Command::new(binary);
    cmd.arg("check-config").arg(&file);
    for var in run.config.env_vars() {
        cmd.env(var, "0123456789abcdef".repeat(4));
    }
    cmd.output().unwrap()
}

/// Runs `systemd-analyze verify` on deploy/systemd/wicket-<program>.service as installed, except that its
/// programs are where this machine has them: with-secrets from deploy/bin/, the program at `binary` (verify
/// refuses a unit whose ExecStart is missing). Passes only when verify exits 0 and prints nothing: it reports
/// an unknown key or a bad value on stderr and still exits 0.
pub fn systemd_verify(program: Program, binary: &Path) {
    let unit = Unit::of(program);
    let text = std::fs::read_to_string(&unit.path).unwrap();
    let argv = unit.exec_start();
    let wrapper = &argv[0];
    assert!(wrapper.ends_with(&format!("/{WITH_SECRETS}")), "{}: ExecStart runs through with-secrets", unit.path.display());
    let installed = &argv[1];
    let here = text.replace(wrapper.as_str(), &root().join("deploy/bin").join(WITH_SECRETS).display().to_string()).replace(
        installed.as_str(),
        &binary.display().to_string(),
    );
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join(unit.path.file_name().unwrap());
    std::fs::write(&copy, here).unwrap();
    let analyze = tool("systemd-analyze");
    let out = std::process::Command::new(analyze).arg("verify").arg(&copy).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "systemd-analyze verify {}:\n{said}", unit.path.display());
}

/// A checking tool the deployment tests run: from `PATH`, else target/deploy-venv/bin/ (where scripts/test.sh
/// installs the PyPI ones); a test failure naming the install step when neither has it.
pub fn tool(name: &str) -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|f| f.is_file()))
        .unwrap_or_default();
    let venv = root().join("target/deploy-venv/bin").join(name);
    on_path.or_else(|| venv.is_file().then_some(venv)).unwrap_or_else(|| {
        panic!(
            "{name} is not installed: scripts/test.sh installs it (systemd-analyze: apt-get install systemd; \
             kubernetes-validate, check-jsonschema: pip, into target/deploy-venv)"
        )
    })
}

/// Checks a `--version` line: `<name> <crate version> (<commit> <YYYY-MM-DD>)`, the commit being this checkout's
/// HEAD (12 hex digits) when git knows it and no `WICKET_COMMIT` overrides it.
pub fn check_version_line(name: &str, stdout: &str) {
    let line = stdout.trim();
    let rest = line.strip_prefix(&format!("{name} ")).unwrap_or_else(|| panic!("--version: {line:?}"));
    let (version, paren) = rest.split_once(' ').unwrap_or_else(|| panic!("--version: {line:?}"));
    assert!(version.split('.').count() == 3 && version.split('.').all(|p| p.parse::<u32>().is_ok()), "--version: {line:?}");
    let inner = paren.strip_prefix('(').and_then(|p| p.strip_suffix(')')).unwrap_or_else(|| panic!("--version: {line:?}"));
    let (commit, date) = inner.split_once(' ').unwrap_or_else(|| panic!("--version: {line:?}"));
    let d: Vec<&str> = date.split('-').collect();
    let valid_date = d.len() == 3
        && d[0].len() == 4
        && d[0].parse::<u32>().is_ok_and(|y| y >= 2024)
        && d[1].parse::<u32>().is_ok_and(|m| (1..=12).contains(&m))
        && d[2].parse::<u32>().is_ok_and(|d| (1..=31).contains(&d));
    assert!(valid_date, "--version: the build date is not YYYY-MM-DD: {line:?}");
    let head = std::process::Command::new("git")
        .arg("-C")
        .arg(root())
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    match (std::env::var("WICKET_COMMIT").ok().filter(|c| !c.is_empty()), head) {
        (Some(given), _) => assert_eq!(commit, given, "--version: {line:?}"),
        (None, Some(head)) => assert_eq!(commit, head, "--version names another commit than HEAD: {line:?}"),
        (None, None) => assert_eq!(commit, "unknown", "--version: {line:?}"),
    }
}
