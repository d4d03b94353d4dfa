//! What a real API server refuses with `422 Invalid`: the built-in kinds' own validation
//! (names, required fields, selectors, ports, duplicates: the part of
//! `k8s.io/kubernetes/pkg/apis/*/validation` the operator's objects touch), with the same field
//! paths, cause reasons and messages, collected into one `Status` with every cause.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::ApiError;

/// One reason an object is invalid (a `StatusCause`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cause {
    /// `FieldValueRequired`, `FieldValueInvalid`, `FieldValueDuplicate`, `FieldValueNotFound`,
    /// `FieldValueNotSupported`.
    pub reason: &'static str,
    /// The field path (`spec.template.spec.containers[0].name`).
    pub field: String,
    /// What is wrong, without the field path (`Required value`, `Invalid value: ...`).
    pub message: String,
}

impl Cause {
    pub fn required(field: impl Into<String>) -> Self {
        Self {
            reason: "FieldValueRequired",
            field: field.into(),
            message: "Required value".into(),
        }
    }
    pub fn invalid(field: impl Into<String>, value: &Value, detail: &str) -> Self {
        Self {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: format!("Invalid value: {}: {detail}", go_value(value)),
        }
    }
    pub fn too_long(field: &str, max: u64) -> Self {
        Self {
            reason: "FieldValueTooLong",
            field: field.into(),
            message: format!("Too long: may not be more than {max} bytes"),
        }
    }
    pub fn duplicate(field: impl Into<String>, value: &Value) -> Self {
        Self {
            reason: "FieldValueDuplicate",
            field: field.into(),
            message: format!("Duplicate value: {}", go_value(value)),
        }
    }
    fn not_found(field: impl Into<String>, value: &Value) -> Self {
        Self {
            reason: "FieldValueNotFound",
            field: field.into(),
            message: format!("Not found: {}", go_value(value)),
        }
    }
    fn not_supported(field: impl Into<String>, value: &Value, allowed: &[&str]) -> Self {
        let list: Vec<String> = allowed.iter().map(|a| format!("\"{a}\"")).collect();
        Self {
            reason: "FieldValueNotSupported",
            field: field.into(),
            message: format!(
                "Unsupported value: {}: supported values: {}",
                go_value(value),
                list.join(", ")
            ),
        }
    }
}

/// A value as the API server prints it in a message (strings quoted, numbers plain).
fn go_value(v: &Value) -> String {
    v.to_string()
}

/// The `422 Invalid` answer for `causes` (which must not be empty), shaped like the real one:
/// `Kind.group "name" is invalid: [field: message, ...]` with every cause in `details`.
pub fn invalid(kind: &str, group: &str, name: &str, causes: &[Cause]) -> ApiError {
    let each: Vec<String> = causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    let list = match each.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    let qualified = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    let mut details = json!({
        "name": name, "kind": kind,
        "causes": causes.iter().map(|c| json!({
            "reason": c.reason, "message": c.message, "field": c.field
        })).collect::<Vec<_>>(),
    });
    if !group.is_empty() {
        details["group"] = json!(group);
    }
    let mut e = ApiError::new(
        422,
        "Invalid",
        format!("{qualified} \"{name}\" is invalid: {list}"),
    );
    e.details = Some(details);
    e
}

const DNS1123_LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1035_LABEL: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const IANA_SVC_NAME: &str = "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-), must contain at least one letter (a-z), must not start or end with a hyphen, hyphens must not be adjacent, and be no more than 15 characters";
const CONFIG_KEY: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";
const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";

fn label_chars(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn alnum_end(s: &str) -> bool {
    let ok = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    ok(s.bytes().next()) && ok(s.bytes().last())
}

/// RFC 1123 label: container, volume and port-less names.
pub fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty() && s.len() <= 63 && label_chars(s) && alnum_end(s)
}

/// RFC 1123 subdomain: most object names.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.')
            .all(|p| !p.is_empty() && label_chars(p) && alnum_end(p))
}

/// RFC 1035 label: Service names.
pub fn is_dns1035_label(s: &str) -> bool {
    is_dns1123_label(s) && s.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
}

fn is_iana_svc_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 15
        && label_chars(s)
        && s.bytes().any(|b| b.is_ascii_lowercase())
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--")
}

fn name_len_message(detail: &str, s: &str, max: usize) -> String {
    if s.len() > max {
        format!("must be no more than {max} characters")
    } else {
        detail.to_string()
    }
}

fn check_name(
    obj: &Value,
    ok: fn(&str) -> bool,
    detail: &str,
    max: usize,
    causes: &mut Vec<Cause>,
) {
    match obj.pointer("/metadata/name").and_then(Value::as_str) {
        None | Some("") => causes.push(Cause::required("metadata.name")),
        Some(n) if !ok(n) => causes.push(Cause::invalid(
            "metadata.name",
            &json!(n),
            &name_len_message(detail, n, max),
        )),
        Some(_) => {}
    }
}

/// Most kinds' names: RFC 1123 subdomains.
fn subdomain_name(obj: &Value, causes: &mut Vec<Cause>) {
    check_name(obj, is_dns1123_subdomain, DNS1123_SUBDOMAIN, 253, causes);
}

/// Every reason the built-in object `obj` of `resource` (`group/version/plural`) is invalid;
/// empty for kinds this does not know.
pub fn builtin(resource: &str, obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    match resource {
        "apps/v1/daemonsets" => {
            subdomain_name(obj, &mut causes);
            daemon_set(obj, &mut causes);
        }
        "/v1/services" => {
            check_name(obj, is_dns1035_label, DNS1035_LABEL, 63, &mut causes);
            service(obj, &mut causes);
        }
        "/v1/configmaps" | "/v1/secrets" => {
            subdomain_name(obj, &mut causes);
            for field in ["data", "binaryData"] {
                for key in obj[field].as_object().into_iter().flat_map(|m| m.keys()) {
                    let good = !key.is_empty()
                        && key.len() <= 253
                        && key
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
                    if !good {
                        causes.push(Cause::invalid(field, &json!(key), CONFIG_KEY));
                    }
                }
            }
        }
        "/v1/serviceaccounts" => {
            subdomain_name(obj, &mut causes);
        }
        _ => {}
    }
    if resource == "/v1/secrets" {
        secret(obj, &mut causes);
    }
    causes
}

/// Key of a `kubernetes.io/tls` Secret's certificate chain.
const TLS_CERT_KEY: &str = "tls.crt";
/// Key of a `kubernetes.io/tls` Secret's private key.
const TLS_KEY_KEY: &str = "tls.key";
/// Most bytes of data one Secret may hold (`core.MaxSecretSize`).
const MAX_SECRET_SIZE: usize = 1024 * 1024;

/// `ValidateSecret` (pkg/apis/core/validation): the keys each well-known type needs, and the
/// total size. (The data arrives base64-encoded; undecodable data never gets here.)
fn secret(obj: &Value, causes: &mut Vec<Cause>) {
    let data = obj["data"].as_object();
    let has = |key: &str| data.is_some_and(|d| d.contains_key(key));
    let size: usize = data
        .into_iter()
        .flatten()
        .map(|(_, v)| v.as_str().map_or(0, |b64| b64.len() / 4 * 3))
        .sum();
    if size > MAX_SECRET_SIZE {
        causes.push(Cause::too_long("data", MAX_SECRET_SIZE as u64));
    }
    let required = |key: &str| Cause::required(format!("data[{key}]"));
    match obj["type"].as_str().unwrap_or("Opaque") {
        "kubernetes.io/tls" => {
            for key in [TLS_CERT_KEY, TLS_KEY_KEY] {
                if !has(key) {
                    causes.push(required(key));
                }
            }
        }
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            causes.push(required("username"));
            causes.push(required("password"));
        }
        "kubernetes.io/ssh-auth"
            if obj["data"]["ssh-privatekey"]
                .as_str()
                .is_none_or(str::is_empty) =>
        {
            causes.push(required("ssh-privatekey"));
        }
        "kubernetes.io/dockerconfigjson" if !has(".dockerconfigjson") => {
            causes.push(required(".dockerconfigjson"));
        }
        _ => {}
    }
}

/// `ValidateSecretUpdate`: a Secret's type never changes, and an `immutable` Secret's data and
/// immutability do not either.
pub fn secret_update(new: &Value, old: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let type_of = |v: &Value| v["type"].as_str().unwrap_or("Opaque").to_string();
    if type_of(new) != type_of(old) {
        causes.push(Cause::invalid(
            "type",
            &json!(type_of(new)),
            "field is immutable",
        ));
    }
    if old["immutable"] == true {
        if new["data"] != old["data"] {
            causes.push(Cause {
                reason: "FieldValueForbidden",
                field: "data".into(),
                message: "Forbidden: field is immutable when `immutable` is set".into(),
            });
        }
        if new["immutable"] != true {
            causes.push(Cause {
                reason: "FieldValueForbidden",
                field: "immutable".into(),
                message: "Forbidden: field is immutable when `immutable` is set".into(),
            });
        }
    }
    causes
}

fn daemon_set(obj: &Value, causes: &mut Vec<Cause>) {
    let spec = &obj["spec"];
    let selector = &spec["selector"];
    let labels = &spec["template"]["metadata"]["labels"];
    let empty = selector["matchLabels"]
        .as_object()
        .is_none_or(|m| m.is_empty())
        && selector["matchExpressions"]
            .as_array()
            .is_none_or(Vec::is_empty);
    if selector.is_null() {
        causes.push(Cause::required("spec.selector"));
    } else if empty {
        causes.push(Cause::invalid(
            "spec.selector",
            selector,
            "empty selector is invalid for daemonset",
        ));
    } else if !selector_matches(selector, labels) {
        causes.push(Cause::invalid(
            "spec.template.metadata.labels",
            labels,
            "`selector` does not match template `labels`",
        ));
    }
    pod_spec(&spec["template"]["spec"], "spec.template.spec", causes);
}

/// Whether a `LabelSelector` (matchLabels and matchExpressions) selects `labels`.
fn selector_matches(selector: &Value, labels: &Value) -> bool {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let by_labels = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k) == v.as_str());
    let by_exprs = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e["key"].as_str().unwrap_or_default();
            let values: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            match e["operator"].as_str() {
                Some("In") => label(key).is_some_and(|l| values.contains(&l)),
                Some("NotIn") => label(key).is_none_or(|l| !values.contains(&l)),
                Some("Exists") => label(key).is_some(),
                Some("DoesNotExist") => label(key).is_none(),
                _ => false,
            }
        });
    by_labels && by_exprs
}

fn pod_spec(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    let mut volumes = BTreeSet::new();
    for (i, v) in spec["volumes"].as_array().into_iter().flatten().enumerate() {
        let field = format!("{path}.volumes[{i}].name");
        unique_label(&v["name"], field, true, &mut volumes, causes);
    }
    let containers = spec["containers"].as_array().filter(|c| !c.is_empty());
    if containers.is_none() {
        causes.push(Cause::required(format!("{path}.containers")));
    }
    let mut names = BTreeSet::new();
    for list in ["initContainers", "containers"] {
        for (i, c) in spec[list].as_array().into_iter().flatten().enumerate() {
            let at = format!("{path}.{list}[{i}]");
            unique_label(&c["name"], format!("{at}.name"), true, &mut names, causes);
            if c["image"].as_str().is_none_or(|s| s.trim().is_empty()) {
                causes.push(Cause::required(format!("{at}.image")));
            }
            container_ports(c, &at, causes);
            for (j, m) in c["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                let name = m["name"].as_str().unwrap_or_default();
                if name.is_empty() {
                    causes.push(Cause::required(format!("{at}.volumeMounts[{j}].name")));
                } else if !volumes.contains(name) {
                    causes.push(Cause::not_found(
                        format!("{at}.volumeMounts[{j}].name"),
                        &m["name"],
                    ));
                }
                if m["mountPath"].as_str().is_none_or(str::is_empty) {
                    causes.push(Cause::required(format!("{at}.volumeMounts[{j}].mountPath")));
                }
            }
            for (j, e) in c["env"].as_array().into_iter().flatten().enumerate() {
                if e["name"].as_str().is_none_or(str::is_empty) {
                    causes.push(Cause::required(format!("{at}.env[{j}].name")));
                }
            }
        }
    }
}

const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];

fn container_ports(c: &Value, at: &str, causes: &mut Vec<Cause>) {
    let mut names = BTreeSet::new();
    for (i, p) in c["ports"].as_array().into_iter().flatten().enumerate() {
        let pat = format!("{at}.ports[{i}]");
        if let Some(n) = p["name"].as_str() {
            if !is_iana_svc_name(n) {
                causes.push(Cause::invalid(
                    format!("{pat}.name"),
                    &p["name"],
                    IANA_SVC_NAME,
                ));
            } else if !names.insert(n.to_string()) {
                causes.push(Cause::duplicate(format!("{pat}.name"), &p["name"]));
            }
        }
        port(p, &pat, "containerPort", Needed::Required, causes);
        port(p, &pat, "hostPort", Needed::ZeroOrAbsent, causes);
        protocol(&p["protocol"], &format!("{pat}.protocol"), causes);
    }
}

/// Check a name that must be an RFC 1123 label unique among `seen` (required or optional).
fn unique_label(
    v: &Value,
    field: String,
    required: bool,
    seen: &mut BTreeSet<String>,
    causes: &mut Vec<Cause>,
) {
    match v.as_str() {
        None | Some("") if required => causes.push(Cause::required(field)),
        None | Some("") => {}
        Some(n) if !is_dns1123_label(n) => causes.push(Cause::invalid(field, v, DNS1123_LABEL)),
        Some(n) => {
            if !seen.insert(n.to_string()) {
                causes.push(Cause::duplicate(field, v));
            }
        }
    }
}

/// Whether a port number field must be there.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Needed {
    Required,
    Optional,
    /// Optional, and 0 means none (`hostPort`).
    ZeroOrAbsent,
}

/// Check the port number `p[key]` (under `at`); the number when it is a valid port.
fn port(p: &Value, at: &str, key: &str, needed: Needed, causes: &mut Vec<Cause>) -> Option<i64> {
    let field = format!("{at}.{key}");
    let Some(n) = p[key].as_i64() else {
        if needed == Needed::Required {
            causes.push(Cause::required(field));
        }
        return None;
    };
    if n == 0 && needed == Needed::ZeroOrAbsent {
        return None;
    }
    if !(1..=65535).contains(&n) {
        causes.push(Cause::invalid(field, &p[key], PORT_RANGE));
        return None;
    }
    Some(n)
}

fn protocol(v: &Value, field: &str, causes: &mut Vec<Cause>) {
    if let Some(p) = v.as_str()
        && !PROTOCOLS.contains(&p)
    {
        causes.push(Cause::not_supported(field, v, PROTOCOLS));
    }
}

fn service(obj: &Value, causes: &mut Vec<Cause>) {
    let spec = &obj["spec"];
    let type_ = spec["type"].as_str().unwrap_or("ClusterIP");
    const TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
    if !TYPES.contains(&type_) {
        causes.push(Cause::not_supported("spec.type", &spec["type"], TYPES));
    }
    const POLICIES: &[&str] = &["Cluster", "Local"];
    for field in ["internalTrafficPolicy", "externalTrafficPolicy"] {
        if let Some(p) = spec[field].as_str()
            && !POLICIES.contains(&p)
        {
            causes.push(Cause::not_supported(
                format!("spec.{field}"),
                &spec[field],
                POLICIES,
            ));
        }
    }
    if spec["externalTrafficPolicy"].is_string() && type_ == "ClusterIP" {
        causes.push(Cause::invalid(
            "spec.externalTrafficPolicy",
            &spec["externalTrafficPolicy"],
            "may only be set for externally-accessible services",
        ));
    }
    let ports = spec["ports"].as_array().cloned().unwrap_or_default();
    let headless = spec["clusterIP"] == "None";
    if ports.is_empty() && type_ != "ExternalName" && !headless {
        causes.push(Cause::required("spec.ports"));
    }
    let mut names = BTreeSet::new();
    let mut keys = BTreeSet::new();
    for (i, p) in ports.iter().enumerate() {
        let pat = format!("spec.ports[{i}]");
        // One port may go unnamed; several must all be named.
        let needed = ports.len() > 1;
        unique_label(
            &p["name"],
            format!("{pat}.name"),
            needed,
            &mut names,
            causes,
        );
        if let Some(n) = port(p, &pat, "port", Needed::Required, causes) {
            let proto = p["protocol"].as_str().unwrap_or("TCP").to_string();
            if !keys.insert((n, proto.clone())) {
                causes.push(Cause::duplicate(
                    pat.clone(),
                    &json!({"port": n, "protocol": proto}),
                ));
            }
        }
        match &p["targetPort"] {
            Value::String(s) if !is_iana_svc_name(s) => causes.push(Cause::invalid(
                format!("{pat}.targetPort"),
                &p["targetPort"],
                IANA_SVC_NAME,
            )),
            Value::String(_) => {}
            _ => {
                port(p, &pat, "targetPort", Needed::Optional, causes);
            }
        }
        protocol(&p["protocol"], &format!("{pat}.protocol"), causes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["web", "a", "web-1", "1web"] {
            assert!(is_dns1123_label(ok), "{ok}");
        }
        for bad in ["", "Web", "web-", "-web", "web.v2", &"a".repeat(64)] {
            assert!(!is_dns1123_label(bad), "{bad}");
        }
        assert!(is_dns1123_subdomain("web.v2"));
        assert!(!is_dns1123_subdomain("web..v2"));
        assert!(!is_dns1123_subdomain("web_v2"));
        assert!(is_dns1035_label("web"));
        assert!(!is_dns1035_label("1web"));
        assert!(!is_dns1035_label("web.v2"));
        assert!(is_iana_svc_name("http"));
        assert!(!is_iana_svc_name("8080"));
        assert!(!is_iana_svc_name("a--b"));
        assert!(!is_iana_svc_name("sixteen-chars-xx"));
    }

    #[test]
    fn the_status_names_every_cause() {
        let causes = [
            Cause::required("spec.template.spec.containers[0].image"),
            Cause::invalid("metadata.name", &json!("A"), "bad"),
        ];
        let e = invalid("DaemonSet", "apps", "A", &causes);
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "DaemonSet.apps \"A\" is invalid: [spec.template.spec.containers[0].image: Required value, metadata.name: Invalid value: \"A\": bad]"
        );
        let d = e.details.unwrap();
        assert_eq!(d["group"], "apps");
        assert_eq!(d["causes"][0]["reason"], "FieldValueRequired");
        assert_eq!(d["causes"][1]["field"], "metadata.name");
    }
}
