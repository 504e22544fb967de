//! A test CA and certificates signed by it, made with the `openssl` command in a temporary folder, and
//! `curl` checking a server against that CA, for the HTTPS tests of core and edge (one way to make
//! their certificates).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A test CA and leaf certificates signed by it, in a temporary folder.
pub struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// A new CA (`ca.pem`, `ca.key`), valid two days.
    #[allow(clippy::new_without_default)] // making a CA runs openssl: not a default value
    pub fn new() -> Pki {
        let pki = Pki { dir: tempfile::tempdir().unwrap() };
        pki.openssl(&[
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-subj", "/CN=Wicket Test CA", "-days", "2",
        ]);
        pki
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl").args(args).current_dir(self.dir.path()).output().expect("the openssl command");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// `<file>.pem` and `<file>.key` for `names` (DNS subject alternative names; an IP address becomes an IP
    /// one), valid `days` (negative: expired).
    pub fn leaf(&self, file: &str, names: &[&str], days: i32) -> (PathBuf, PathBuf) {
        self.leaf_with_key(file, names, days, &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"])
    }

    /// [`Pki::leaf`] with a key made by these `openssl req` arguments, e.g. `["-newkey", "rsa:2048"]`
    /// or `["-newkey", "ed25519"]` (written as PKCS#8, `BEGIN PRIVATE KEY`).
    pub fn leaf_with_key(&self, file: &str, names: &[&str], days: i32, newkey: &[&str]) -> (PathBuf, PathBuf) {
        let (key, csr, pem, ext) = (format!("{file}.key"), format!("{file}.csr"), format!("{file}.pem"), format!("{file}.ext"));
        let subject = format!("/CN={}", names[0]);
        let mut req = vec!["req", "-new"];
        req.extend_from_slice(newkey);
        req.extend_from_slice(&["-nodes", "-keyout", &key, "-out", &csr, "-subj", &subject]);
        self.openssl(&req);
        let sans: Vec<String> =
            names.iter().map(|n| if n.parse::<std::net::IpAddr>().is_ok() { format!("IP:{n}") } else { format!("DNS:{n}") }).collect();
        std::fs::write(self.path(&ext), format!("subjectAltName={}\n", sans.join(","))).unwrap();
        self.openssl(&[
            "x509", "-req", "-in", &csr, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", &days.to_string(), "-extfile",
            &ext, "-out", &pem,
        ]);
        (self.path(&pem), self.path(&key))
    }

    /// Writes `key` again in its algorithm's own older format (`BEGIN EC PRIVATE KEY`, `BEGIN RSA
    /// PRIVATE KEY`) as `<file>`.
    pub fn traditional_key(&self, key: &Path, file: &str) -> PathBuf {
        let key = key.display().to_string();
        self.openssl(&["pkey", "-in", &key, "-traditional", "-out", file]);
        self.path(file)
    }

    /// The base64 SHA-256 of a certificate's public key (SPKI), as Chromium's
    /// `--ignore-certificate-errors-spki-list` takes it.
    pub fn spki_sha256(&self, cert: &Path) -> String {
        let sh = format!(
            "openssl x509 -in '{}' -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | openssl base64 -A",
            cert.display()
        );
        let out = Command::new("sh").arg("-c").arg(&sh).output().expect("sh");
        assert!(out.status.success(), "{sh}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }
}

/// curl's answer: status, HTTP version, headers (lower-cased) and body; `Err(exit code)` when curl failed
/// (60: the certificate was not verified; 35: the handshake failed).
pub fn curl(ca: &Path, url: &str, args: &[&str]) -> Result<(u16, String, String, String), i32> {
    let dir = tempfile::tempdir().unwrap();
    let head = dir.path().join("head");
    let out = Command::new("curl")
        .args(["-s", "--max-time", "10", "--cacert"])
        .arg(ca)
        .arg("-D")
        .arg(&head)
        .args(["-w", "\n%{http_code} %{http_version}"])
        .args(args)
        .arg(url)
        .output()
        .expect("curl");
    if !out.status.success() {
        return Err(out.status.code().unwrap_or(-1));
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, tail) = text.rsplit_once('\n').unwrap();
    let (code, version) = tail.split_once(' ').unwrap();
    let headers = std::fs::read_to_string(&head).unwrap_or_default().to_ascii_lowercase();
    Ok((code.parse().unwrap(), version.to_owned(), headers, body.to_owned()))
}

/// curl's `--resolve` for `name:port` → 127.0.0.1.
pub fn resolve(name: &str, port: u16) -> String {
    format!("{name}:{port}:127.0.0.1")
}
