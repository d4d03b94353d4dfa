//! The Secrets an EdgeCache names but does not own, checked before anything is applied, pure:
//! the TLS certificates of `spec.tls.certificates` and the origin CA bundles of
//! `spec.sites[].originTls.caSecret`. A pod whose Secret volume is missing never starts, and one
//! whose Secret holds no usable PEM files cannot start its TLS listener or reach its HTTPS
//! origins, so the EdgeCache is Degraded instead (`TlsSecretInvalid`, `OriginCaSecretInvalid`),
//! naming each field, Secret and what is wrong with it. `reconcile` reads the Secrets; this
//! module only judges them. Their contents are never hashed into the pod template: a renewed
//! certificate or rotated bundle rolls no pod (the kubelet updates the mounted files; the data
//! plane reloads certificates, and reads a CA bundle when it starts).

use std::collections::BTreeMap;
use std::fmt;

use edgecache_api::v1alpha1::EdgeCacheSpec;
use k8s_openapi::api::core::v1::Secret;

use crate::validate::{TLS_CERT_KEY, TLS_KEY_KEY, origin_ca_secrets, site_ca};

/// The type a certificate Secret must have (cert-manager's, `kubectl create secret tls`).
pub const TLS_SECRET_TYPE: &str = "kubernetes.io/tls";
/// The Degraded reason of an EdgeCache with an unusable TLS Secret.
pub const TLS_REASON: &str = "TlsSecretInvalid";
/// The Degraded reason of an EdgeCache with an unusable origin CA Secret.
pub const ORIGIN_CA_REASON: &str = "OriginCaSecretInvalid";

const PEM_CERTIFICATE: &[u8] = b"-----BEGIN CERTIFICATE-----";

/// One named Secret that cannot serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The field naming it, e.g. `spec.tls.certificates[1].secretName`.
    pub field: String,
    /// The Secret's name.
    pub secret: String,
    /// What is wrong, e.g. `does not exist`, `has no tls.key`.
    pub what: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: Secret {} {}", self.field, self.secret, self.what)
    }
}

/// Which named Secrets keep a rollout back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `spec.tls.certificates`.
    Tls,
    /// `spec.sites[].originTls.caSecret`.
    OriginCa,
}

impl Kind {
    /// The Degraded reason (and event reason).
    pub fn reason(self) -> &'static str {
        match self {
            Self::Tls => TLS_REASON,
            Self::OriginCa => ORIGIN_CA_REASON,
        }
    }
    /// The event's action.
    pub fn action(self) -> &'static str {
        match self {
            Self::Tls => "CheckTlsSecrets",
            Self::OriginCa => "CheckOriginCaSecrets",
        }
    }
    /// A bounded label for metrics.
    pub fn category(self) -> &'static str {
        match self {
            Self::Tls => "tls_secret",
            Self::OriginCa => "origin_ca_secret",
        }
    }
    fn what(self) -> &'static str {
        match self {
            Self::Tls => "the TLS certificates cannot be served",
            Self::OriginCa => "the origins' CA bundles cannot be read",
        }
    }
}

/// Why nothing is rolled out: one kind of named Secret and the message naming its problems.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub kind: Kind,
    pub message: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Every Secret `spec` names (TLS certificates, then origin CA bundles), each once.
pub fn names(spec: &EdgeCacheSpec) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    let tls = spec.tls.iter().flat_map(|t| &t.certificates);
    for name in tls
        .map(|c| c.secret_name.as_str())
        .chain(origin_ca_secrets(spec))
    {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// Whether `spec` names the Secret `name`.
pub fn names_secret(spec: &EdgeCacheSpec, name: &str) -> bool {
    names(spec).contains(&name)
}

/// What keeps `spec` from rolling out in `namespace`, given the Secrets found by name (a name
/// missing from `found` does not exist): the TLS Secrets' problems first, then the CA Secrets'.
pub fn refusal(
    spec: &EdgeCacheSpec,
    namespace: &str,
    found: &BTreeMap<String, Secret>,
) -> Option<Refusal> {
    [
        (Kind::Tls, tls_problems(spec, found)),
        (Kind::OriginCa, origin_ca_problems(spec, found)),
    ]
    .into_iter()
    .find(|(_, p)| !p.is_empty())
    .map(|(kind, problems)| Refusal {
        kind,
        message: message(kind, namespace, &problems),
    })
}

/// What is wrong with each TLS Secret `spec` names, in the spec's order.
pub fn tls_problems(spec: &EdgeCacheSpec, found: &BTreeMap<String, Secret>) -> Vec<Problem> {
    let certificates = spec.tls.iter().flat_map(|t| t.certificates.iter());
    certificates
        .enumerate()
        .filter_map(|(i, c)| {
            problem(
                format!("spec.tls.certificates[{i}].secretName"),
                &c.secret_name,
                check(found.get(&c.secret_name)),
            )
        })
        .collect()
}

/// What is wrong with each origin CA Secret `spec` names, by site, in the spec's order.
pub fn origin_ca_problems(spec: &EdgeCacheSpec, found: &BTreeMap<String, Secret>) -> Vec<Problem> {
    (spec.sites.iter().enumerate())
        .filter_map(|(i, site)| {
            let ca = site_ca(site)?;
            problem(
                format!("spec.sites[{i}].originTls.caSecret"),
                &ca.name,
                check_ca(found.get(&ca.name), &ca.key),
            )
        })
        .collect()
}

fn problem(field: String, secret: &str, verdict: Result<(), String>) -> Option<Problem> {
    Some(Problem {
        field,
        secret: secret.to_string(),
        what: verdict.err()?,
    })
}

/// The Degraded message for `problems` (not empty) of `kind` in `namespace`.
pub fn message(kind: Kind, namespace: &str, problems: &[Problem]) -> String {
    let each: Vec<String> = problems.iter().map(ToString::to_string).collect();
    format!(
        "{}, so nothing is rolled out (namespace {namespace}): {}",
        kind.what(),
        each.join("; ")
    )
}

/// Whether one Secret can serve as a certificate: it exists, is of type `kubernetes.io/tls`,
/// and holds a PEM certificate in `tls.crt` and a PEM private key in `tls.key`.
pub fn check(secret: Option<&Secret>) -> Result<(), String> {
    let secret = existing(secret)?;
    let type_ = secret.type_.as_deref().unwrap_or("Opaque");
    if type_ != TLS_SECRET_TYPE {
        return Err(format!("is of type {type_}, not {TLS_SECRET_TYPE}"));
    }
    let (cert, key) = (value(secret, TLS_CERT_KEY), value(secret, TLS_KEY_KEY));
    let missing: Vec<&str> = [(TLS_CERT_KEY, cert), (TLS_KEY_KEY, key)]
        .into_iter()
        .filter(|(_, v)| v.is_none())
        .map(|(k, _)| k)
        .collect();
    if !missing.is_empty() {
        return Err(format!("has no {}", missing.join(" and no ")));
    }
    let (cert, key) = (cert.unwrap_or_default(), key.unwrap_or_default());
    // A real API server lets an empty key through (cert-manager writes the Secret before it is
    // issued); the data plane cannot serve it.
    for (name, value) in [(TLS_CERT_KEY, cert), (TLS_KEY_KEY, key)] {
        if blank(value) {
            return Err(format!("has an empty {name} (not issued yet?)"));
        }
    }
    if !contains(cert, PEM_CERTIFICATE) {
        return Err(format!("has no PEM certificate in {TLS_CERT_KEY}"));
    }
    if !(contains(key, b"-----BEGIN ") && contains(key, b"PRIVATE KEY-----")) {
        return Err(format!("has no PEM private key in {TLS_KEY_KEY}"));
    }
    Ok(())
}

/// Whether one Secret (of any type) can serve as an origin CA bundle: it exists and holds at
/// least one PEM certificate in `key`.
pub fn check_ca(secret: Option<&Secret>, key: &str) -> Result<(), String> {
    let secret = existing(secret)?;
    let Some(bundle) = value(secret, key) else {
        return Err(format!("has no key {key}"));
    };
    if blank(bundle) {
        return Err(format!("has an empty {key}"));
    }
    if !contains(bundle, PEM_CERTIFICATE) {
        return Err(format!("has no PEM certificate in {key}"));
    }
    Ok(())
}

fn existing(secret: Option<&Secret>) -> Result<&Secret, String> {
    secret.ok_or_else(|| "does not exist".to_string())
}

fn value<'a>(secret: &'a Secret, key: &str) -> Option<&'a [u8]> {
    secret.data.as_ref()?.get(key).map(|b| b.0.as_slice())
}

fn blank(value: &[u8]) -> bool {
    value.iter().all(u8::is_ascii_whitespace)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;

    use super::*;

    const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n";

    fn secret(type_: Option<&str>, data: &[(&str, &str)]) -> Secret {
        Secret {
            type_: type_.map(String::from),
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Secret::default()
        }
    }

    fn tls_secret(cert: &str, key: &str) -> Secret {
        secret(
            Some(TLS_SECRET_TYPE),
            &[(TLS_CERT_KEY, cert), (TLS_KEY_KEY, key)],
        )
    }

    #[test]
    fn a_tls_secret_with_pem_files_passes() {
        assert_eq!(check(Some(&tls_secret(CERT, KEY))), Ok(()));
        // RSA (PKCS#1) and EC (SEC1) keys, and a chain after the leaf.
        let rsa = KEY.replace("PRIVATE KEY", "RSA PRIVATE KEY");
        let ec = KEY.replace("PRIVATE KEY", "EC PRIVATE KEY");
        let chain = format!("{CERT}{CERT}");
        for key in [rsa.as_str(), ec.as_str()] {
            assert_eq!(check(Some(&tls_secret(&chain, key))), Ok(()));
        }
    }

    #[test]
    fn each_way_a_secret_can_be_unusable_is_named() {
        for (secret, want) in [
            (None, "does not exist"),
            (
                Some(secret(
                    Some("Opaque"),
                    &[(TLS_CERT_KEY, CERT), (TLS_KEY_KEY, KEY)],
                )),
                "is of type Opaque, not kubernetes.io/tls",
            ),
            (
                Some(secret(None, &[])),
                "is of type Opaque, not kubernetes.io/tls",
            ),
            (
                Some(secret(Some(TLS_SECRET_TYPE), &[(TLS_CERT_KEY, CERT)])),
                "has no tls.key",
            ),
            (
                Some(Secret {
                    type_: Some(TLS_SECRET_TYPE.into()),
                    ..Secret::default()
                }),
                "has no tls.crt and no tls.key",
            ),
            (
                Some(tls_secret(CERT, "")),
                "has an empty tls.key (not issued yet?)",
            ),
            (
                Some(tls_secret("not a certificate", KEY)),
                "has no PEM certificate in tls.crt",
            ),
            (
                Some(tls_secret(CERT, CERT)),
                "has no PEM private key in tls.key",
            ),
        ] {
            assert_eq!(check(secret.as_ref()), Err(want.to_string()), "{want}");
        }
    }

    fn spec(yaml: &str) -> EdgeCacheSpec {
        crate::test_support::minimal_edgecache(yaml).spec
    }

    #[test]
    fn problems_follow_the_spec_order_and_name_field_and_secret() {
        let tls = spec(
            "tls:\n  certificates:\n  - secretName: a\n  - secretName: b\n  - secretName: c\n",
        );
        let found = BTreeMap::from([
            ("a".to_string(), tls_secret(CERT, KEY)),
            ("b".to_string(), secret(Some("Opaque"), &[])),
        ]);
        let p = tls_problems(&tls, &found);
        let lines: Vec<String> = p.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "spec.tls.certificates[1].secretName: Secret b is of type Opaque, not kubernetes.io/tls",
                "spec.tls.certificates[2].secretName: Secret c does not exist",
            ]
        );
        assert!(
            message(Kind::Tls, "edge", &p).contains("(namespace edge): spec.tls.certificates[1]")
        );
    }

    #[test]
    fn a_ca_secret_of_any_type_with_a_pem_bundle_in_its_key_passes() {
        for type_ in [None, Some("Opaque"), Some(TLS_SECRET_TYPE)] {
            let s = secret(type_, &[("ca.crt", CERT), ("tls.key", KEY)]);
            assert_eq!(check_ca(Some(&s), "ca.crt"), Ok(()));
        }
        for (secret, key, want) in [
            (None, "ca.crt", "does not exist"),
            (
                Some(secret(None, &[("ca.crt", CERT)])),
                "bundle.pem",
                "has no key bundle.pem",
            ),
            (
                Some(secret(None, &[("ca.crt", " \n")])),
                "ca.crt",
                "has an empty ca.crt",
            ),
            (
                Some(secret(None, &[("ca.crt", KEY)])),
                "ca.crt",
                "has no PEM certificate in ca.crt",
            ),
        ] {
            assert_eq!(
                check_ca(secret.as_ref(), key),
                Err(want.to_string()),
                "{want}"
            );
        }
    }

    #[test]
    fn origin_ca_problems_name_the_site_and_the_secret() {
        let spec = crate::test_support::sites_edgecache(&format!(
            "{}- hosts: [cdn.shop.example]\n  origins: [https://cdn]\n  originTls: {{caSecret: {{name: cdn-ca}}}}\n",
            crate::test_support::TWO_SITES
        ))
        .spec;
        assert_eq!(names(&spec), ["img-ca", "cdn-ca"]);
        assert!(names_secret(&spec, "cdn-ca") && !names_secret(&spec, "web-tls"));
        let found = BTreeMap::from([("img-ca".to_string(), secret(None, &[("ca.crt", CERT)]))]);
        let lines: Vec<String> = origin_ca_problems(&spec, &found)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            lines,
            [
                "spec.sites[1].originTls.caSecret: Secret img-ca has no key bundle.pem",
                "spec.sites[2].originTls.caSecret: Secret cdn-ca does not exist",
            ]
        );
        let r = refusal(&spec, "edge", &found).unwrap();
        assert_eq!(r.kind, Kind::OriginCa);
        assert_eq!(r.kind.reason(), "OriginCaSecretInvalid");
        assert!(
            r.message.starts_with(
                "the origins' CA bundles cannot be read, so nothing is rolled out (namespace edge): spec.sites[1]"
            ),
            "{r}"
        );
        // TLS problems come first; with every Secret fine there is nothing to refuse.
        let both = crate::test_support::sites_edgecache(&format!(
            "{}tls:\n  certificates:\n  - secretName: web-tls\n",
            crate::test_support::TWO_SITES
        ))
        .spec;
        assert_eq!(names(&both), ["web-tls", "img-ca"]);
        assert_eq!(refusal(&both, "edge", &found).unwrap().kind, Kind::Tls);
        let all = BTreeMap::from([
            ("web-tls".to_string(), tls_secret(CERT, KEY)),
            ("img-ca".to_string(), secret(None, &[("bundle.pem", CERT)])),
        ]);
        assert_eq!(refusal(&both, "edge", &all), None);
    }
}
