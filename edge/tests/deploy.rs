//! deploy/ against the real `wicket` binary and the shipped configs, on a machine without a container engine:
//! every config a compose service, a systemd unit or a Kubernetes Deployment runs the edge with passes
//! `wicket check-config` with the secrets that deployment gives it; their command lines are real subcommands
//! and flags; the ports the compose file, the image and the manifests declare are the ones the configs listen
//! on; stop deadlines cover the shutdown grace; the units pass `systemd-analyze verify`; the manifests pass the
//! Kubernetes schema (`kubernetes-validate --strict`) and the compose file the Compose schema
//! (`check-jsonschema`); `wicket --version` names the commit and the build date. The core's side (its
//! configs, its unit, `wicket-core --version`) is core/tests/deploy.rs. What these cannot show (the image
//! built and run, the units started by systemd, the manifests applied) is listed in docs/src/deploy.md.

use std::path::{Path, PathBuf};
use std::process::Command;

use wicket_testkit::deploy::{self, Program, Unit, port_of};

fn wicket() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_wicket"))
}

fn name_of(argv0: &str) -> &str {
    Path::new(argv0).file_name().and_then(|n| n.to_str()).unwrap_or(argv0)
}

fn edge_table(cfg: &toml::Value) -> &toml::Value {
    cfg.get("edge").expect("an edge config has [edge]")
}

/// A string key of `[edge]`, else its default (docs/src/reference/edge.md).
fn edge_key(cfg: &toml::Value, key: &str, default: &str) -> String {
    edge_table(cfg).get(key).and_then(|v| v.as_str()).unwrap_or(default).to_owned()
}

fn core_listen(cfg: &toml::Value) -> String {
    cfg.get("listen").and_then(|v| v.as_str()).unwrap_or("127.0.0.1:8081").to_owned()
}

fn grace_seconds(cfg: &toml::Value) -> u64 {
    edge_table(cfg).get("shutdown-grace-seconds").and_then(|v| v.as_integer()).map_or(5, |g| g as u64)
}

/// `http://host:port` → (host, port).
fn host_port(url: &str) -> (String, u16) {
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")).unwrap_or_else(|| panic!("not a URL: {url}"));
    let (host, port) = rest.trim_end_matches('/').rsplit_once(':').unwrap_or_else(|| panic!("no port in {url}"));
    (host.to_owned(), port.parse().unwrap())
}

fn run_of(program: Program, kind: &str) -> deploy::Run {
    deploy::runs(program).into_iter().find(|r| r.origin.contains(kind)).unwrap()
}

#[test]
fn version_names_the_commit_and_the_build_date() {
    let out = Command::new(wicket()).arg("--version").output().unwrap();
    assert!(out.status.success());
    deploy::check_version_line("wicket", &String::from_utf8_lossy(&out.stdout));
}

#[test]
fn every_edge_run_is_a_real_command_with_a_config_that_passes_check_config() {
    let scratch = tempfile::tempdir().unwrap();
    for run in deploy::runs(Program::Edge) {
        let origin = &run.origin;
        assert_eq!(name_of(&run.argv[0]), "wicket", "{origin}: {:?}", run.argv);
        assert_eq!(run.argv[1], "serve", "{origin}: {:?}", run.argv);
        // Every flag is one `wicket serve` has.
        let help = Command::new(wicket()).args([&run.argv[1], "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&help.stdout);
        for flag in run.argv.iter().filter(|a| a.starts_with('-')) {
            assert!(help.contains(flag.as_str()), "{origin}: `wicket serve` has no {flag}:\n{help}");
        }
        // The secrets it is given are the ones its config reads, no fewer (it would not start) and no more.
        let mut given: Vec<_> = run.secrets.iter().filter(|s| s.starts_with("WICKET_")).cloned().collect();
        given.sort();
        assert_eq!(given, run.config.env_vars(), "{origin}: secrets given vs the `*-env` keys of {}", run.config.origin);
        let dir = scratch.path().join(origin.replace(['/', ' '], "_"));
        std::fs::create_dir_all(&dir).unwrap();
        let out = deploy::check_config(&wicket(), &run, &dir);
        assert!(
            out.status.success(),
            "{origin}: wicket check-config {}:\n{}{}",
            run.config.origin,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // The edge and the core it names must be two programs of the same deployment, not an embedded core.
        assert_ne!(edge_key(&run.config.toml(), "core", ""), "embedded", "{origin}");
    }
}

#[test]
fn compose_ports_and_names_agree_with_the_configs_and_the_image() {
    let compose = deploy::compose();
    let edge = run_of(Program::Edge, "compose").config.toml();
    let core = run_of(Program::Core, "compose").config.toml();
    let services = compose["services"].as_mapping().unwrap();
    let has_service = |name: &str| services.contains_key(name);

    // The published port maps to the edge's public port.
    let ports = deploy::strings(&compose["services"]["edge"]["ports"], "edge.ports");
    let public = port_of(&edge_key(&edge, "listen", "0.0.0.0:8080"));
    assert!(ports.iter().any(|p| p.rsplit(':').next() == Some(public.to_string().as_str())), "edge.ports {ports:?} vs listen {public}");
    // Only the edge publishes a port (the admin port and the core stay on the compose network).
    for (name, service) in services {
        if name.as_str() != Some("edge") {
            assert!(service.get("ports").is_none(), "compose service {name:?} publishes a port");
        }
    }
    let admin_port = port_of(&edge_key(&edge, "admin-listen", "127.0.0.1:9090"));
    assert!(ports.iter().all(|p| !p.ends_with(&format!(":{admin_port}"))), "the admin port is published: {ports:?}");

    // The edge reaches the core by its service name and its listen port; both reach Redis by its name.
    let (host, port) = host_port(&edge_key(&edge, "core", "http://127.0.0.1:8081"));
    assert!(has_service(&host), "edge.core names {host}, not a compose service");
    assert_eq!(port, port_of(&core_listen(&core)), "edge.core's port vs the core's listen");
    for cfg in [&edge, &core] {
        let store = cfg.get("store").and_then(|s| s.as_str()).expect("the compose configs use Redis");
        let (host, _) = host_port(&store.replace("redis://", "http://").split('/').take(3).collect::<Vec<_>>().join("/"));
        assert!(has_service(&host), "store {store} names {host}, not a compose service");
    }

    // Health checks: the image's default asks the edge's admin port; the core's service points it at its listen.
    let healthz = std::fs::read_to_string(deploy::root().join("deploy/container/healthz")).unwrap();
    let default_port: u16 = healthz
        .split("WICKET_HEALTH_PORT:-")
        .nth(1)
        .and_then(|r| r.split('}').next())
        .and_then(|p| p.parse().ok())
        .expect("healthz: ${WICKET_HEALTH_PORT:-<port>}");
    let admin = edge_key(&edge, "admin-listen", "127.0.0.1:9090");
    assert_eq!(default_port, port_of(&admin), "the image's health check vs the edge's admin-listen");
    assert!(admin.starts_with("0.0.0.0:") || admin.starts_with("127.0.0.1:"), "healthz asks 127.0.0.1: {admin}");
    let core_health = compose["services"]["core"]["environment"]["WICKET_HEALTH_PORT"].as_str().expect("core's WICKET_HEALTH_PORT");
    assert_eq!(core_health.parse::<u16>().unwrap(), port_of(&core_listen(&core)), "core's health check vs its listen");

    // The image declares every port the configs listen on.
    let containerfile = std::fs::read_to_string(deploy::root().join("deploy/container/Containerfile")).unwrap();
    let exposed: Vec<u16> = containerfile
        .lines()
        .filter_map(|l| l.strip_prefix("EXPOSE "))
        .flat_map(|l| l.split_whitespace().map(|p| p.parse::<u16>().unwrap()))
        .collect();
    for port in [public, port_of(&admin), port_of(&core_listen(&core))] {
        assert!(exposed.contains(&port), "Containerfile EXPOSE {exposed:?} lacks {port}");
    }
}

#[test]
fn the_image_runs_unprivileged_through_with_secrets_with_a_health_check() {
    let containerfile = std::fs::read_to_string(deploy::root().join("deploy/container/Containerfile")).unwrap();
    let last = |instr: &str| containerfile.lines().rfind(|l| l.starts_with(instr)).map(|l| l[instr.len()..].trim().to_owned());
    let user = last("USER ").expect("USER");
    let uid: u32 = user.split(':').next().unwrap().parse().expect("USER as a number (runAsNonRoot checks it)");
    assert_ne!(uid, 0);
    assert!(last("HEALTHCHECK ").is_some_and(|h| h.contains("/usr/local/bin/healthz")));
    assert_eq!(last("ENTRYPOINT ").as_deref(), Some("[\"/usr/local/bin/with-secrets\"]"));
    assert!(containerfile.contains("COPY deploy/bin/with-secrets deploy/container/healthz /usr/local/bin/"));
    assert_eq!(last("VOLUME ").as_deref(), Some("[\"/var/lib/wicket\"]"));
    // The manifests run as the image's user, and compose mounts the data volume where the image has it.
    for name in ["wicket-edge", "wicket-core"] {
        let d = deploy::kubernetes_object("Deployment", name);
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["securityContext"]["runAsUser"].as_u64(), Some(u64::from(uid)), "{name}");
        assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true), "{name}");
        assert_eq!(pod["automountServiceAccountToken"].as_bool(), Some(false), "{name}");
        let c = deploy::deployment_container(&d);
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"].as_bool(), Some(true), "{name}");
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"].as_bool(), Some(false), "{name}");
        assert!(c["resources"]["requests"].is_mapping() && c["resources"]["limits"]["memory"].is_string(), "{name}: resources");
    }
    let compose = deploy::compose();
    let core_mounts = deploy::strings(&compose["services"]["core"]["volumes"], "core.volumes");
    assert!(core_mounts.iter().any(|m| m.split(':').nth(1) == Some("/var/lib/wicket")), "{core_mounts:?}");
    for service in ["edge", "core"] {
        assert_eq!(compose["services"][service]["read_only"].as_bool(), Some(true), "{service}: read_only");
    }
}

#[test]
fn kubernetes_ports_probes_and_services_agree_with_the_configs() {
    let edge = run_of(Program::Edge, "kubernetes").config.toml();
    let core = run_of(Program::Core, "kubernetes").config.toml();
    let d = deploy::kubernetes_object("Deployment", "wicket-edge");
    let c = deploy::deployment_container(&d);
    let ports = deploy::container_ports(c);
    let public = port_of(&edge_key(&edge, "listen", "0.0.0.0:8080"));
    let admin_listen = edge_key(&edge, "admin-listen", "127.0.0.1:9090");
    assert_eq!(ports.get("http"), Some(&public), "edge containerPort http vs listen");
    assert_eq!(ports.get("admin"), Some(&port_of(&admin_listen)), "edge containerPort admin vs admin-listen");
    // The kubelet probes the pod's IP: a loopback admin port would fail every probe.
    assert!(admin_listen.starts_with("0.0.0.0:"), "edge.admin-listen {admin_listen} is not reachable by the probes");
    for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
        assert_eq!(c[probe]["httpGet"]["path"].as_str(), Some("/healthz"), "edge {probe}");
        assert_eq!(c[probe]["httpGet"]["port"].as_str(), Some("admin"), "edge {probe}");
    }

    let dc = deploy::kubernetes_object("Deployment", "wicket-core");
    let cc = deploy::deployment_container(&dc);
    let core_port = port_of(&core_listen(&core));
    assert_eq!(deploy::container_ports(cc).get("api"), Some(&core_port), "core containerPort api vs listen");
    assert!(core_listen(&core).starts_with("0.0.0.0:"), "the core must listen beyond loopback in a pod");
    for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
        assert_eq!(cc[probe]["httpGet"]["path"].as_str(), Some("/healthz"), "core {probe}");
        assert_eq!(cc[probe]["httpGet"]["port"].as_str(), Some("api"), "core {probe}");
    }

    // edge.core names the core's Service and its port, which leads to the core's listen port.
    let (host, port) = host_port(&edge_key(&edge, "core", ""));
    let svc = deploy::kubernetes_object("Service", &host);
    assert_eq!(svc["spec"]["type"].as_str().unwrap_or("ClusterIP"), "ClusterIP", "the core stays inside the cluster");
    let sp = svc["spec"]["ports"].as_sequence().unwrap().iter().find(|p| p["port"].as_u64() == Some(u64::from(port)));
    let sp = sp.unwrap_or_else(|| panic!("Service {host} has no port {port}"));
    assert_eq!(sp["targetPort"].as_str(), Some("api"));
    assert_eq!(svc["spec"]["selector"]["app.kubernetes.io/name"].as_str(), Some("wicket-core"), "Service {host} selects the core");
    assert_eq!(dc["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"].as_str(), Some("wicket-core"));

    // No Service reachable from outside the cluster leads to the admin port (by name or number).
    for (file, o) in deploy::kubernetes_objects() {
        if o["kind"].as_str() != Some("Service") {
            continue;
        }
        let kind = o["spec"]["type"].as_str().unwrap_or("ClusterIP");
        for p in o["spec"]["ports"].as_sequence().unwrap() {
            let target = &p["targetPort"];
            let to_admin = target.as_str() == Some("admin") || target.as_u64() == Some(u64::from(port_of(&admin_listen)));
            assert!(!(to_admin && kind != "ClusterIP"), "{file}: Service {:?} ({kind}) exposes the admin port", o["metadata"]["name"]);
        }
    }
    // The public Service leads to the public port.
    let public_svc = deploy::kubernetes_object("Service", "wicket-edge");
    assert!(public_svc["spec"]["ports"].as_sequence().unwrap().iter().all(|p| p["targetPort"].as_str() == Some("http")));

    // The network policies open exactly these ports.
    let np_ports = |name: &str| -> Vec<u64> {
        let np = deploy::kubernetes_object("NetworkPolicy", name);
        let mut v: Vec<u64> = np["spec"]["ingress"]
            .as_sequence()
            .unwrap()
            .iter()
            .flat_map(|r| r["ports"].as_sequence().unwrap().iter().map(|p| p["port"].as_u64().unwrap()))
            .collect();
        v.sort();
        v
    };
    let mut edge_ports = vec![u64::from(public), u64::from(port_of(&admin_listen))];
    edge_ports.sort();
    assert_eq!(np_ports("wicket-edge"), edge_ports);
    assert_eq!(np_ports("wicket-core"), vec![u64::from(core_port)]);

    // A disruption budget for each.
    for name in ["wicket-edge", "wicket-core"] {
        let pdb = deploy::kubernetes_object("PodDisruptionBudget", name);
        assert_eq!(pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"].as_str(), Some(name));
    }
}

#[test]
fn stop_deadlines_cover_the_shutdown_grace() {
    // systemd: TimeoutStopSec past the grace.
    let grace = grace_seconds(&run_of(Program::Edge, "systemd").config.toml());
    let unit = Unit::of(Program::Edge);
    let timeout: u64 = unit.service("TimeoutStopSec").parse().unwrap();
    assert!(timeout > grace, "TimeoutStopSec={timeout} vs shutdown-grace-seconds {grace}");
    // compose: stop_grace_period past the grace.
    let grace = grace_seconds(&run_of(Program::Edge, "compose").config.toml());
    let compose = deploy::compose();
    let period = compose["services"]["edge"]["stop_grace_period"].as_str().unwrap();
    let period: u64 = period.strip_suffix('s').unwrap().parse().unwrap();
    assert!(period > grace, "stop_grace_period {period}s vs shutdown-grace-seconds {grace}");
    // Kubernetes: the preStop pause plus the grace within terminationGracePeriodSeconds.
    let grace = grace_seconds(&run_of(Program::Edge, "kubernetes").config.toml());
    let d = deploy::kubernetes_object("Deployment", "wicket-edge");
    let total = d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"].as_u64().unwrap();
    let pause: u64 = deploy::strings(&deploy::deployment_container(&d)["lifecycle"]["preStop"]["exec"]["command"], "preStop")[1].parse().unwrap();
    assert!(pause + grace < total, "preStop {pause} s + grace {grace} s vs terminationGracePeriodSeconds {total}");
}

#[test]
fn the_edge_unit_is_hardened_and_passes_systemd_analyze_verify() {
    let unit = Unit::of(Program::Edge);
    assert_eq!(unit.service("DynamicUser"), "yes");
    assert_eq!(unit.service("ProtectSystem"), "strict");
    assert_eq!(unit.service("NoNewPrivileges"), "yes");
    assert!(unit.service("LimitNOFILE").parse::<u64>().unwrap() >= 1_048_576, "LimitNOFILE for a million connections");
    assert_eq!(unit.service("StateDirectory"), "wicket-edge");
    // SIGHUP reloads the TLS certificates (edge/src/server.rs): the only reload there is.
    assert_eq!(unit.service("ExecReload"), "/bin/kill -HUP $MAINPID");
    assert_eq!(unit.exec_start()[1], "/usr/local/bin/wicket");
    deploy::systemd_verify(Program::Edge, &wicket());
}

#[test]
fn manifests_and_the_compose_file_pass_their_schemas() {
    let dir = deploy::root().join("deploy/kubernetes");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "yaml")).collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    let out = Command::new(deploy::tool("kubernetes-validate")).arg("--strict").args(&files).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && !said.contains("ERROR") && !said.contains("WARN"), "kubernetes-validate --strict:\n{said}");
    // Every object was checked (a kind the tool has no schema for is only a warning).
    assert_eq!(said.matches(" passed for resource ").count(), deploy::kubernetes_objects().len(), "{said}");

    let compose = deploy::root().join("deploy/container/compose.yaml");
    let out = Command::new(deploy::tool("check-jsonschema")).args(["--builtin-schema", "vendor.compose-spec"]).arg(&compose).output().unwrap();
    assert!(
        out.status.success(),
        "check-jsonschema compose.yaml:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn with_secrets_exports_the_wicket_files_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("WICKET_ADMIN_TOKEN"), "token-from-a-file\n").unwrap();
    std::fs::write(dir.path().join("WICKET_lower"), "no").unwrap();
    std::fs::write(dir.path().join("token-signing.pem"), "-----BEGIN-----").unwrap();
    let script = deploy::root().join("deploy/bin").join(deploy::WITH_SECRETS);
    let env_of = |var: &str, val: &Path| {
        let out = Command::new("sh").arg(&script).arg("env").env_remove("CREDENTIALS_DIRECTORY").env_remove("WICKET_SECRETS_DIR").env(var, val).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    for var in ["CREDENTIALS_DIRECTORY", "WICKET_SECRETS_DIR"] {
        let env = env_of(var, dir.path());
        assert!(env.lines().any(|l| l == "WICKET_ADMIN_TOKEN=token-from-a-file"), "{var}: {env}");
        assert!(!env.contains("WICKET_lower") && !env.contains("BEGIN"), "{var}: {env}");
    }
    // A missing folder runs the command all the same.
    let env = env_of("WICKET_SECRETS_DIR", &dir.path().join("missing"));
    assert!(!env.contains("WICKET_ADMIN_TOKEN="), "{env}");
}

/// `systemctl reload wicket-edge` (ExecReload: SIGHUP) reloads the TLS certificates; an edge without `[edge.tls]`
/// must take it too, and keep serving (SIGHUP's default action ends a process: it did, before the edge handled
/// it without TLS). Then SIGTERM still stops it cleanly.
#[test]
fn a_reload_signal_leaves_an_edge_without_tls_serving() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (wicket_testkit::free_port(), wicket_testkit::free_port());
    let cfg = dir.path().join("edge.toml");
    std::fs::write(
        &cfg,
        format!("[edge]\nlisten = \"127.0.0.1:{port}\"\nadmin-listen = \"127.0.0.1:{admin}\"\nthreads = 1\nshutdown-grace-seconds = 2\n"),
    )
    .unwrap();
    let mut child = Command::new(wicket())
        .args(["serve", "--config"])
        .arg(&cfg)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let healthz = || -> Option<String> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", admin)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
        let mut answer = String::new();
        s.read_to_string(&mut answer).ok()?;
        Some(answer)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !healthz().is_some_and(|a| a.starts_with("HTTP/1.1 200")) {
        assert!(Instant::now() < deadline, "the edge did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Its background services (the SIGHUP handler among them) start with the listeners; leave them a moment.
    std::thread::sleep(Duration::from_millis(300));
    let pid = child.id().to_string();
    let kill = |sig: &str| assert!(Command::new("kill").arg(format!("-{sig}")).arg(&pid).status().unwrap().success());
    kill("HUP");
    std::thread::sleep(Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "SIGHUP stopped the edge");
    assert!(healthz().is_some_and(|a| a.starts_with("HTTP/1.1 200")), "the edge does not answer after SIGHUP");
    kill("TERM");
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the edge did not stop within its grace after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
}
