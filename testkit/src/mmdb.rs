//! A MaxMind DB writer for tests: a few networks, each with a country and an autonomous system, written as
//! a real `.mmdb` file (format 2.0, an IPv6 tree of 24-bit records with IPv4 at `::/96`; the format is
//! <https://maxmind.github.io/MaxMind-DB/>). The edge's GeoIP tests read what it writes with the same
//! `maxminddb` crate the edge uses, so a file an operator gets from MaxMind and one written here take the
//! same path.
//!
//! ```ignore
//! let db = Mmdb::new("Wicket-Test-Country-ASN")
//!     .network("127.1.0.0/16", Some("DE"), Some(3320))
//!     .network("2001:db8::/32", Some("FR"), None);
//! db.write(&dir.path().join("geo.mmdb"));
//! ```

use std::net::IpAddr;
use std::path::Path;

/// One network's record: what the edge reads of a GeoLite2-Country and a GeoLite2-ASN record.
#[derive(Debug, Clone)]
struct Place {
    country: Option<String>,
    asn: Option<u32>,
}

/// A database being written.
#[derive(Debug, Clone)]
pub struct Mmdb {
    database_type: String,
    networks: Vec<(u128, u8, Place)>,
}

/// A record of the search tree while it is built.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Rec {
    Empty,
    Node(usize),
    Data(usize),
}

impl Mmdb {
    /// An empty database of this `database_type` (its metadata).
    pub fn new(database_type: &str) -> Self {
        Mmdb { database_type: database_type.to_owned(), networks: Vec::new() }
    }

    /// Adds `cidr` (`"127.1.0.0/16"`, `"2001:db8::/32"`, or one address) with its country's ISO code and
    /// its autonomous system number. Later networks inside earlier ones win for their addresses.
    pub fn network(mut self, cidr: &str, country: Option<&str>, asn: Option<u32>) -> Self {
        let (addr, len) = cidr.split_once('/').map_or((cidr, None), |(a, l)| (a, Some(l)));
        let addr: IpAddr = addr.parse().expect("an IP address");
        let (bits, len) = match addr {
            IpAddr::V4(v4) => (u128::from(u32::from(v4)), 96 + len.map_or(32, |l| l.parse::<u8>().expect("a prefix length"))),
            IpAddr::V6(v6) => (u128::from(v6), len.map_or(128, |l| l.parse::<u8>().expect("a prefix length"))),
        };
        assert!(len <= 128, "prefix too long: {cidr}");
        self.networks.push((bits, len, Place { country: country.map(str::to_owned), asn }));
        self
    }

    /// The file's bytes.
    pub fn bytes(&self) -> Vec<u8> {
        let mut nodes: Vec<[Rec; 2]> = vec![[Rec::Empty, Rec::Empty]];
        for (i, (bits, len, _)) in self.networks.iter().enumerate() {
            let mut node = 0;
            for depth in 0..*len {
                let bit = ((bits >> (127 - depth)) & 1) as usize;
                if depth + 1 == *len {
                    nodes[node][bit] = Rec::Data(i);
                    break;
                }
                node = match nodes[node][bit] {
                    Rec::Node(n) => n,
                    // A wider network's record splits: both halves keep it until overwritten.
                    other => {
                        let inherit = if let Rec::Data(_) = other { other } else { Rec::Empty };
                        nodes.push([inherit, inherit]);
                        let n = nodes.len() - 1;
                        nodes[node][bit] = Rec::Node(n);
                        n
                    }
                };
            }
        }
        let mut data = Vec::new();
        let mut offsets = Vec::new();
        for (_, _, place) in &self.networks {
            offsets.push(data.len());
            let mut fields: Vec<(&str, Vec<u8>)> = Vec::new();
            if let Some(c) = &place.country {
                let mut names = Vec::new();
                map_header(&mut names, 1);
                string(&mut names, "en");
                string(&mut names, &format!("Country {c}"));
                let mut country = Vec::new();
                map_header(&mut country, 2);
                string(&mut country, "iso_code");
                string(&mut country, c);
                string(&mut country, "names");
                country.extend(names);
                fields.push(("country", country));
            }
            if let Some(a) = place.asn {
                let mut v = Vec::new();
                uint(&mut v, 6, u64::from(a));
                fields.push(("autonomous_system_number", v));
                let mut org = Vec::new();
                string(&mut org, &format!("Network {a}"));
                fields.push(("autonomous_system_organization", org));
            }
            map_header(&mut data, fields.len());
            for (k, v) in fields {
                string(&mut data, k);
                data.extend(v);
            }
        }
        let node_count = nodes.len();
        let value = |r: Rec| match r {
            Rec::Empty => node_count,
            Rec::Node(n) => n,
            Rec::Data(i) => node_count + 16 + offsets[i],
        };
        let mut out = Vec::new();
        for [l, r] in &nodes {
            for v in [value(*l), value(*r)] {
                assert!(v < 1 << 24, "too big for 24-bit records");
                out.extend_from_slice(&(v as u32).to_be_bytes()[1..]);
            }
        }
        out.extend([0u8; 16]);
        out.extend(data);
        out.extend(b"\xab\xcd\xefMaxMind.com");
        map_header(&mut out, 9);
        string(&mut out, "node_count");
        uint(&mut out, 6, node_count as u64);
        string(&mut out, "record_size");
        uint(&mut out, 5, 24);
        string(&mut out, "ip_version");
        uint(&mut out, 5, 6);
        string(&mut out, "database_type");
        string(&mut out, &self.database_type);
        string(&mut out, "languages");
        control(&mut out, 11, 1);
        string(&mut out, "en");
        string(&mut out, "binary_format_major_version");
        uint(&mut out, 5, 2);
        string(&mut out, "binary_format_minor_version");
        uint(&mut out, 5, 0);
        string(&mut out, "build_epoch");
        uint(&mut out, 9, 1_700_000_000);
        string(&mut out, "description");
        map_header(&mut out, 1);
        string(&mut out, "en");
        string(&mut out, "Wicket test database");
        out
    }

    /// Writes the file (replacing it whole: a reader never sees half of it).
    pub fn write(&self, path: &Path) {
        let tmp = path.with_extension("tmp-mmdb");
        std::fs::write(&tmp, self.bytes()).expect("write the database");
        std::fs::rename(&tmp, path).expect("move the database into place");
    }
}

/// A field's control byte(s): its type (extended types past 7) and size.
fn control(out: &mut Vec<u8>, kind: u8, size: usize) {
    let (bits, extra): (u8, Vec<u8>) = match size {
        0..29 => (size as u8, vec![]),
        29..285 => (29, vec![(size - 29) as u8]),
        285..65_821 => (30, ((size - 285) as u16).to_be_bytes().to_vec()),
        _ => (31, ((size - 65_821) as u32).to_be_bytes()[1..].to_vec()),
    };
    if kind <= 7 {
        out.push(kind << 5 | bits);
    } else {
        out.push(bits);
        out.push(kind - 7);
    }
    out.extend(extra);
}

fn string(out: &mut Vec<u8>, s: &str) {
    control(out, 2, s.len());
    out.extend(s.as_bytes());
}

fn map_header(out: &mut Vec<u8>, entries: usize) {
    control(out, 7, entries);
}

/// An unsigned integer of type `kind` (5: 16 bits, 6: 32, 9: 64) in as few bytes as it needs.
fn uint(out: &mut Vec<u8>, kind: u8, v: u64) {
    let bytes = v.to_be_bytes();
    let skip = bytes.iter().take_while(|b| **b == 0).count();
    control(out, kind, 8 - skip);
    out.extend(&bytes[skip..]);
}
