//! Reading a YAML document into a [`DataplaneConfig`] past its mistakes.
//!
//! serde stops at the first field of the wrong type, so the document is read into a value tree
//! and deserialized from it pass after pass. A pass reports the unknown fields it meets and the
//! field that stopped it, which is then taken out of the tree (it keeps its default) before the
//! next pass. The last pass builds the config from what is left. Each mistake is reported once,
//! in document order, with its path once and serde's words turned into the reader's.

use serde_path_to_error::Segment;
use yaml_serde::Value;

use super::{ConfigError, ConfigErrors, DataplaneConfig, err};

/// The path of a mistake in the document as a whole (not YAML, not a mapping).
const DOCUMENT: &str = "(document)";

/// The config built from the valid fields of `yaml`, and a problem for every other field; an
/// error when the document as a whole cannot be read.
pub(super) fn read(yaml: &str) -> Result<(DataplaneConfig, Vec<ConfigError>), ConfigErrors> {
    let whole = |reason: String| ConfigErrors(vec![err(DOCUMENT, None, reason)]);
    let mut tree = match yaml_serde::from_str(yaml) {
        // An empty document: every field takes its default.
        Ok(Value::Null) => Value::Mapping(Default::default()),
        Ok(tree) => tree,
        Err(e) => return Err(whole(e.to_string())),
    };
    let mut problems: Vec<ConfigError> = Vec::new();
    loop {
        let mut unknown = Vec::new();
        let mut track = serde_path_to_error::Track::new();
        let de = serde_path_to_error::Deserializer::new(&tree, &mut track);
        let parsed = serde_ignored::deserialize(de, |path| unknown.push(path.to_string()));
        for path in unknown {
            if !problems.iter().any(|p| p.path == path) {
                problems.push(err(&path, None, "unknown field"));
            }
        }
        let message = match parsed {
            Ok(cfg) => return Ok((cfg, problems)),
            Err(e) => e.to_string(),
        };
        let at = track.path();
        let segments: Vec<Segment> = at.iter().cloned().collect();
        if segments.is_empty() {
            // The document itself is of the wrong type (a list, a number).
            return Err(whole(in_users_words(&message)));
        }
        let path = at.to_string();
        let node = node_at(&mut tree, &segments);
        // Something other than text where text or a name is expected is read again as text
        // and judged by the next pass: a number or boolean, because YAML read from text gives
        // one as text where text is wanted (`name: 2024`); anything where a name is wanted, so
        // that pass lists the names (`steering: [a]`).
        if let Some(node) = node {
            let text = match node {
                Value::String(_) => None,
                _ if message.ends_with(EXPECTED_NAME) => Some(shown(node)),
                _ if message.ends_with(EXPECTED_TEXT) => as_text(node),
                _ => None,
            };
            if let Some(text) = text {
                *node = Value::String(text);
                continue;
            }
        }
        // Reported once: a field taken out for a mistake inside it is not reported again.
        if !problems.iter().any(|p| within(&p.path, &path)) {
            let got = node_at(&mut tree, &segments).map(|n| shown(n));
            problems.push(err(&path, got, in_users_words(&message)));
        }
        if !take(&mut tree, &segments) {
            // Not found in the tree, nor any field above it: no config can be built past it.
            return Err(ConfigErrors(problems));
        }
    }
}

/// Whether `path` is `field` or a field under it.
fn within(path: &str, field: &str) -> bool {
    path.strip_prefix(field)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

/// Whether two paths name the same field, or one is under the other.
pub(super) fn related(a: &str, b: &str) -> bool {
    within(a, b) || within(b, a)
}

/// The node at `segments` (the root for none), if the tree has one there.
fn node_at<'a>(tree: &'a mut Value, segments: &[Segment]) -> Option<&'a mut Value> {
    segments
        .iter()
        .try_fold(tree, |node, segment| match (node, segment) {
            (Value::Mapping(m), Segment::Map { key } | Segment::Enum { variant: key }) => {
                m.get_mut(key.as_str())
            }
            (Value::Sequence(s), Segment::Seq { index }) => s.get_mut(*index),
            (Value::Tagged(t), Segment::Enum { .. }) => Some(&mut t.value),
            _ => None,
        })
}

/// Take the node at `segments` out of the tree, so its field keeps its default. A node that
/// cannot leave its parent alone (the value of a `!tag`) goes with it. False when there is
/// nothing left to take but the root.
fn take(tree: &mut Value, segments: &[Segment]) -> bool {
    let Some((last, parents)) = segments.split_last() else {
        return false;
    };
    let taken = match (node_at(tree, parents), last) {
        (Some(Value::Mapping(m)), Segment::Map { key } | Segment::Enum { variant: key }) => {
            m.remove(key.as_str()).is_some()
        }
        (Some(Value::Sequence(s)), Segment::Seq { index }) if *index < s.len() => {
            s.remove(*index);
            true
        }
        _ => false,
    };
    taken || take(tree, parents)
}

/// A number or boolean as the text YAML would give it.
fn as_text(node: &Value) -> Option<String> {
    match node {
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// How yaml_serde ends its message for a value of the wrong type where text is wanted...
const EXPECTED_TEXT: &str = "expected a string";
/// ... and where the name of an enum variant is.
const EXPECTED_NAME: &str = "expected a Value::Tagged enum";

/// A value as the reader wrote it, for `(got ...)`.
fn shown(node: &Value) -> String {
    match node {
        Value::String(s) => s.clone(),
        Value::Null => "nothing".into(),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(t) => format!("{} {}", t.tag, shown(&t.value)),
        other => as_text(other).unwrap_or_default(),
    }
}

/// serde's message for a value of the wrong type, as a reader of the config would put it.
fn in_users_words(message: &str) -> String {
    if message.starts_with("unknown variant ") {
        // "unknown variant `adq`, expected one of `queue`, `cpu`, ..." (or "`a` or `b`").
        let expected = message.split_once(", expected ").map_or("", |(_, e)| e);
        let names: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        return format!("must be one of {}", names.join(", "));
    }
    if message == "invalid socket address syntax" {
        return format!("must be {ADDRESS}");
    }
    // "invalid type: string \"lots\", expected u32", "invalid value: ..., expected <ours>".
    match message.rsplit_once(", expected ") {
        Some((_, expected)) => format!("must be {}", expected_in_users_words(expected)),
        None => message.to_string(),
    }
}

const ADDRESS: &str = "an address like 0.0.0.0:8080";

/// What serde says it expected, in the reader's words; our own types already use them
/// (e.g. "a size like 10GiB or 500MiB").
fn expected_in_users_words(expected: &str) -> &str {
    match expected {
        "u8" => "a whole number from 0 to 255",
        "u16" | "u32" | "u64" => "a whole number",
        "a boolean" => "true or false",
        "a string" => "text",
        "socket address" => ADDRESS,
        // A `!name value` where the name takes no value (`steering: !queue 1`).
        "unit" | "unit variant" => "the name alone, with no value",
        e if e.starts_with("struct ") => "a mapping of its fields",
        e => e,
    }
}
