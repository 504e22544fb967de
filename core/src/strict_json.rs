//! Strict JSON for what the core reads (request bodies, event files, the provider's answers): a struct is read
//! only from a JSON object, and every refusal names the path of the offending value.
//!
//! Serde's derived `Deserialize` of a struct also accepts a JSON array of its fields in declaration order, so
//! with `serde_json::from_slice` a hold body `["park",1,"k"]` would hold a ticket and `"identity":
//! ["13800000000"]` would be read as a phone. A client must not be able to pass values positionally: the edge,
//! logs and any other reader of the same body see an array, not those fields. So the text is first parsed into
//! a [`Node`] tree (refusing duplicate keys, as the derived structs do), and `T` is then read from that tree by
//! [`NodeDeserializer`], which answers `deserialize_struct` only for an object, at every depth. One place, for
//! every body type, present and future.

use std::collections::HashSet;
use std::fmt;

use serde::de::value::StrDeserializer;
use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, Unexpected, Visitor};

/// Why a body was refused: where (`identity`, `pools[0].capacity`; empty for the whole body) and what.
/// Displayed like a [`FieldError`](crate::model::FieldError): `path: message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    /// The path of the offending value; `None` until the error has bubbled up to the value that caused it.
    path: Option<String>,
    message: String,
}

impl JsonError {
    /// The path of the offending value, in the `validate()` style; empty for the body itself.
    pub fn path(&self) -> &str {
        self.path.as_deref().unwrap_or("")
    }

    /// What is wrong, without the path.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Pins the error to `path` unless a deeper value already claimed it.
    fn at(mut self, path: &Path<'_>) -> JsonError {
        if self.path.is_none() {
            self.path = Some(path.to_string());
        }
        self
    }
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.path() {
            "" => write!(f, "{}", self.message),
            path => write!(f, "{path}: {}", self.message),
        }
    }
}

impl std::error::Error for JsonError {}

impl de::Error for JsonError {
    fn custom<T: fmt::Display>(msg: T) -> JsonError {
        JsonError { path: None, message: msg.to_string() }
    }
}

/// Reads a `T` from a JSON text whose top level is an object. Syntax errors keep serde_json's line and column;
/// shape errors (an array or a scalar where an object belongs, a wrong type, an unknown or missing field) carry
/// the path.
pub fn object_from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, JsonError> {
    let node: Node = serde_json::from_slice(bytes).map_err(|e| JsonError { path: None, message: e.to_string() })?;
    let root = Path::Root;
    if !matches!(node, Node::Object(_)) {
        let e: JsonError = de::Error::invalid_type(node.unexpected(), &"a JSON object");
        return Err(e.at(&root));
    }
    T::deserialize(NodeDeserializer { node: &node, path: root })
}

/// [`object_from_slice`], reporting every shape problem of the body at once (each wrong type, unknown field
/// and missing field with its path, [`crate::problems`]), not only the first. A syntax error is still one
/// error (with serde_json's line and column): nothing after it can be read.
pub fn object_from_slice_all<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Vec<JsonError>> {
    match object_from_slice_partial(bytes) {
        (Some(t), es) if es.is_empty() => Ok(t),
        (_, es) => Err(es),
    }
}

/// [`object_from_slice_all`], also answering what the body reads as with a stand-in for each wrong or
/// missing value ([`crate::problems::collect`]), when it reads at all: for the caller's semantic checks of
/// the rest.
pub fn object_from_slice_partial<T: DeserializeOwned>(bytes: &[u8]) -> (Option<T>, Vec<JsonError>) {
    let node: Node = match serde_json::from_slice(bytes) {
        Ok(n) => n,
        Err(e) => return (None, vec![JsonError { path: None, message: e.to_string() }]),
    };
    if !matches!(node, Node::Object(_)) {
        let e: JsonError = de::Error::invalid_type(node.unexpected(), &"a JSON object");
        return (None, vec![e.at(&Path::Root)]);
    }
    let read = |n: Node| {
        T::deserialize(NodeDeserializer { node: &n, path: Path::Root })
            .map_err(|e| (crate::problems::parse_path(e.path()), e.message))
    };
    let (t, ps) = crate::problems::collect(&node, read);
    let es = ps.into_iter().map(|p| JsonError { path: (!p.path.is_empty()).then_some(p.path), message: p.message }).collect();
    (t, es)
}

impl Node {
    /// The entries of the object at `path` (a key's value, an array's element), when there is one.
    fn object_at(&mut self, path: &[crate::problems::Seg]) -> Option<&mut Vec<(String, Node)>> {
        use crate::problems::Seg;
        let mut cur = self;
        for s in path {
            cur = match (s, cur) {
                (Seg::Key(k), Node::Object(entries)) => entries.iter_mut().find(|(key, _)| key == k).map(|(_, v)| v)?,
                (Seg::Index(i), Node::Array(items)) => items.get_mut(*i)?,
                _ => return None,
            };
        }
        match cur {
            Node::Object(entries) => Some(entries),
            _ => None,
        }
    }
}

impl crate::problems::Tree for Node {
    fn remove(&mut self, path: &[crate::problems::Seg]) -> bool {
        let Some((crate::problems::Seg::Key(last), parent)) = path.split_last() else { return false };
        self.object_at(parent).is_some_and(|entries| {
            let before = entries.len();
            entries.retain(|(k, _)| k != last);
            entries.len() < before
        })
    }

    fn insert(&mut self, path: &[crate::problems::Seg], value: Self) -> bool {
        let Some((crate::problems::Seg::Key(last), parent)) = path.split_last() else { return false };
        let Some(entries) = self.object_at(parent) else { return false };
        // In place when the key is there, so the reader meets the stand-in where it met the wrong value
        // (after the fields that read, before those not read yet).
        match entries.iter_mut().find(|(k, _)| k == last) {
            Some((_, v)) => *v = value,
            None => entries.push((last.clone(), value)),
        }
        true
    }

    fn text(s: &str) -> Self {
        Node::String(s.to_owned())
    }

    fn stand_ins() -> Vec<Self> {
        vec![
            Node::Number(0.into()),
            Node::String(crate::problems::STAND_IN_TIME.into()),
            Node::Bool(false),
            Node::Array(Vec::new()),
            Node::Object(Vec::new()),
            Node::Null,
        ]
    }
}

/// A parsed JSON value. Unlike `serde_json::Value`, an object keeps no duplicate keys silently: a duplicate
/// is refused while parsing, so every reader of the body agrees on its fields.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Node>),
    /// Keys in their order in the text.
    Object(Vec<(String, Node)>),
}

impl Node {
    fn unexpected(&self) -> Unexpected<'_> {
        match self {
            Node::Null => Unexpected::Unit,
            Node::Bool(b) => Unexpected::Bool(*b),
            Node::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => Unexpected::Unsigned(u),
                (None, Some(i), _) => Unexpected::Signed(i),
                (None, None, Some(f)) => Unexpected::Float(f),
                _ => Unexpected::Other("number"),
            },
            Node::String(s) => Unexpected::Str(s),
            Node::Array(_) => Unexpected::Seq,
            Node::Object(_) => Unexpected::Map,
        }
    }
}

impl<'de> de::Deserialize<'de> for Node {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        struct NodeVisitor;

        impl<'de> Visitor<'de> for NodeVisitor {
            type Value = Node;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_none<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
                <Node as de::Deserialize>::deserialize(d)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
                Ok(Node::Bool(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
                Ok(Node::Number(v.into()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
                Ok(Node::Number(v.into()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
                serde_json::Number::from_f64(v).map(Node::Number).ok_or_else(|| E::custom("numbers must be finite"))
            }
            fn visit_str<E>(self, v: &str) -> Result<Node, E> {
                Ok(Node::String(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<Node, E> {
                Ok(Node::String(v))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Node::Array(items))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut entries: Vec<(String, Node)> = Vec::new();
                let mut seen = HashSet::new();
                while let Some(key) = map.next_key::<String>()? {
                    if !seen.insert(key.clone()) {
                        return Err(de::Error::custom(format_args!("duplicate key `{key}`")));
                    }
                    let value = map.next_value()?;
                    entries.push((key, value));
                }
                Ok(Node::Object(entries))
            }
        }

        d.deserialize_any(NodeVisitor)
    }
}

/// Where a value sits in the body, as a chain up to the root; rendered only for an error.
#[derive(Debug, Clone, Copy)]
enum Path<'p> {
    Root,
    Key(&'p Path<'p>, &'p str),
    Index(&'p Path<'p>, usize),
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Key(Path::Root, key) => write!(f, "{key}"),
            Path::Key(parent, key) => write!(f, "{parent}.{key}"),
            Path::Index(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

/// Reads a Rust value from one [`Node`]; a struct only from an object.
struct NodeDeserializer<'a> {
    node: &'a Node,
    path: Path<'a>,
}

impl<'a> NodeDeserializer<'a> {
    fn visit_number<'de, V: Visitor<'de>>(n: &serde_json::Number, visitor: V) -> Result<V::Value, JsonError> {
        if let Some(u) = n.as_u64() {
            visitor.visit_u64(u)
        } else if let Some(i) = n.as_i64() {
            visitor.visit_i64(i)
        } else if let Some(f) = n.as_f64() {
            visitor.visit_f64(f)
        } else {
            Err(de::Error::custom("unrepresentable number"))
        }
    }
}

impl<'de, 'a> de::Deserializer<'de> for NodeDeserializer<'a> {
    type Error = JsonError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, JsonError> {
        let path = self.path;
        let out = match self.node {
            Node::Null => visitor.visit_unit(),
            Node::Bool(b) => visitor.visit_bool(*b),
            Node::Number(n) => Self::visit_number(n, visitor),
            Node::String(s) => visitor.visit_str(s),
            Node::Array(items) => visitor.visit_seq(NodeSeq { items: items.iter(), parent: &path, index: 0 }),
            Node::Object(entries) => {
                visitor.visit_map(NodeMap { entries: entries.iter(), parent: &path, pending: None })
            }
        };
        out.map_err(|e| e.at(&path))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, JsonError> {
        let path = self.path;
        match self.node {
            Node::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
        .map_err(|e| e.at(&path))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, JsonError> {
        let path = self.path;
        visitor.visit_newtype_struct(self).map_err(|e| e.at(&path))
    }

    /// The point of this module: fields by name, from an object, never by position from an array.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, JsonError> {
        let path = self.path;
        match self.node {
            Node::Object(entries) => {
                visitor.visit_map(NodeMap { entries: entries.iter(), parent: &path, pending: None })
            }
            other => Err(de::Error::invalid_type(other.unexpected(), &"a JSON object")),
        }
        .map_err(|e| e.at(&path))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, JsonError> {
        let path = self.path;
        match self.node {
            Node::String(s) => visitor.visit_enum(NodeEnum { variant: s, value: None, path }),
            Node::Object(entries) if entries.len() == 1 => {
                let (variant, value) = &entries[0];
                visitor.visit_enum(NodeEnum { variant, value: Some(value), path })
            }
            other => Err(de::Error::invalid_type(other.unexpected(), &"a string or an object with one key")),
        }
        .map_err(|e| e.at(&path))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, JsonError> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit unit_struct
        seq tuple tuple_struct map identifier
    }
}

struct NodeSeq<'a, 'p> {
    items: std::slice::Iter<'a, Node>,
    parent: &'p Path<'p>,
    index: usize,
}

impl<'de, 'a, 'p> de::SeqAccess<'de> for NodeSeq<'a, 'p> {
    type Error = JsonError;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, JsonError> {
        let Some(node) = self.items.next() else { return Ok(None) };
        let path = Path::Index(self.parent, self.index);
        self.index += 1;
        seed.deserialize(NodeDeserializer { node, path }).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct NodeMap<'a, 'p> {
    entries: std::slice::Iter<'a, (String, Node)>,
    parent: &'p Path<'p>,
    /// The entry whose key was just read, for `next_value_seed`.
    pending: Option<&'a (String, Node)>,
}

impl<'de, 'a, 'p> de::MapAccess<'de> for NodeMap<'a, 'p> {
    type Error = JsonError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, JsonError> {
        let Some(entry) = self.entries.next() else { return Ok(None) };
        self.pending = Some(entry);
        let key: StrDeserializer<'_, JsonError> = entry.0.as_str().into_deserializer();
        // An unknown field is reported at its own path.
        seed.deserialize(key).map(Some).map_err(|e| e.at(&Path::Key(self.parent, &entry.0)))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, JsonError> {
        let (key, node) = self.pending.take().ok_or_else(|| de::Error::custom("a value was read before its key"))?;
        seed.deserialize(NodeDeserializer { node, path: Path::Key(self.parent, key) })
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// An externally tagged enum: `"variant"`, or `{"variant": value}`.
struct NodeEnum<'a> {
    variant: &'a str,
    value: Option<&'a Node>,
    path: Path<'a>,
}

impl<'de, 'a> de::EnumAccess<'de> for NodeEnum<'a> {
    type Error = JsonError;
    type Variant = NodeVariant<'a>;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, NodeVariant<'a>), JsonError> {
        let key: StrDeserializer<'_, JsonError> = self.variant.into_deserializer();
        let tag = seed.deserialize(key)?;
        Ok((tag, NodeVariant { value: self.value, path: self.path, variant: self.variant }))
    }
}

struct NodeVariant<'a> {
    value: Option<&'a Node>,
    path: Path<'a>,
    variant: &'a str,
}

impl<'a> NodeVariant<'a> {
    fn inner(&self, what: &'static str) -> Result<NodeDeserializer<'_>, JsonError> {
        match self.value {
            Some(node) => Ok(NodeDeserializer { node, path: Path::Key(&self.path, self.variant) }),
            None => Err(de::Error::invalid_type(Unexpected::UnitVariant, &what)),
        }
    }
}

impl<'de, 'a> de::VariantAccess<'de> for NodeVariant<'a> {
    type Error = JsonError;

    fn unit_variant(self) -> Result<(), JsonError> {
        match self.value {
            None | Some(Node::Null) => Ok(()),
            Some(other) => Err(de::Error::invalid_type(other.unexpected(), &"a unit variant")),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, JsonError> {
        seed.deserialize(self.inner("a newtype variant")?)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, JsonError> {
        de::Deserializer::deserialize_seq(self.inner("a tuple variant")?, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, JsonError> {
        de::Deserializer::deserialize_struct(self.inner("a struct variant")?, "", fields, visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        phone: Option<String>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        sku: String,
        qty: u32,
        #[serde(default)]
        inner: Option<Inner>,
        #[serde(default)]
        list: Vec<Inner>,
        #[serde(default)]
        tags: Vec<String>,
    }

    fn err(text: &str) -> JsonError {
        object_from_slice::<Outer>(text.as_bytes()).unwrap_err()
    }

    #[test]
    fn objects_are_read_by_name() {
        let o: Outer =
            object_from_slice(br#"{"sku":"a","qty":2,"inner":{"phone":"1"},"list":[{"phone":null}],"tags":["x"]}"#)
                .unwrap();
        assert_eq!(o.inner, Some(Inner { phone: Some("1".into()) }));
        assert_eq!((o.list.len(), o.tags.len()), (1, 1));
    }

    #[test]
    fn arrays_never_stand_in_for_structs() {
        assert_eq!(err(r#"["a", 2]"#).path(), "");
        assert!(err(r#"["a", 2]"#).to_string().contains("expected a JSON object"));
        assert_eq!(err(r#""a""#).path(), "");
        assert_eq!(err(r#"{"sku":"a","qty":2,"inner":["1"]}"#).path(), "inner");
        assert_eq!(err(r#"{"sku":"a","qty":2,"list":[{"phone":"1"},["1"]]}"#).path(), "list[1]");
    }

    #[test]
    fn every_error_names_its_path() {
        assert_eq!(err(r#"{"sku":"a","qty":-1}"#).path(), "qty");
        assert_eq!(err(r#"{"sku":"a","qty":1,"list":[{"phone":3}]}"#).path(), "list[0].phone");
        assert_eq!(err(r#"{"sku":"a","qty":1,"inner":{"colour":"red"}}"#).path(), "inner.colour");
        assert_eq!(err(r#"{"qty":1}"#).path(), "");
        assert!(err(r#"{"qty":1}"#).to_string().contains("sku"));
        assert!(err(r#"{"sku":"a","sku":"b","qty":1}"#).to_string().contains("duplicate key `sku`"));
        assert!(err(r#"{"sku": "#).to_string().contains("line 1"));
    }

    #[test]
    fn enums_read_from_strings_and_one_key_objects() {
        #[derive(Debug, Deserialize, PartialEq)]
        #[serde(rename_all = "snake_case")]
        enum Shape {
            Unit,
            Named { x: u32 },
        }
        #[derive(Debug, Deserialize, PartialEq)]
        struct Holder {
            shape: Shape,
        }
        let h: Holder = object_from_slice(br#"{"shape":"unit"}"#).unwrap();
        assert_eq!(h.shape, Shape::Unit);
        let h: Holder = object_from_slice(br#"{"shape":{"named":{"x":1}}}"#).unwrap();
        assert_eq!(h.shape, Shape::Named { x: 1 });
        let e = object_from_slice::<Holder>(br#"{"shape":{"named":[1]}}"#).unwrap_err();
        assert_eq!(e.path(), "shape.named");
    }
}
