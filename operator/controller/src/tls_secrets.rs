//! The TLS Secrets an EdgeCache names (`spec.tls.certificates`), checked before anything is
//! applied, pure: a pod whose Secret volume is missing never starts, and one whose Secret holds
//! no usable PEM files cannot start its TLS listener, so the EdgeCache is Degraded
//! (`TlsSecretInvalid`) instead, naming each Secret and what is wrong with it. `reconcile`
//! reads the Secrets; this module only judges them. Their contents are never hashed into the
//! pod template: a renewed certificate rolls no pod (the kubelet updates the mounted files and
//! the data plane reloads them).

use std::collections::BTreeMap;
use std::fmt;

use edgecache_api::v1alpha1::TlsSpec;
use k8s_openapi::api::core::v1::Secret;

use crate::validate::{TLS_CERT_KEY, TLS_KEY_KEY};

/// The type a certificate Secret must have (cert-manager's, `kubectl create secret tls`).
pub const TLS_SECRET_TYPE: &str = "kubernetes.io/tls";
/// The Degraded reason of an EdgeCache with an unusable TLS Secret.
pub const REASON: &str = "TlsSecretInvalid";

/// One named Secret that cannot serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Its index in `spec.tls.certificates`.
    pub index: usize,
    /// The Secret's name.
    pub secret: String,
    /// What is wrong, e.g. `does not exist`, `has no tls.key`.
    pub what: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "spec.tls.certificates[{}].secretName: Secret {} {}",
            self.index, self.secret, self.what
        )
    }
}

/// What is wrong with each Secret `tls` names, given the Secrets found by name (a name missing
/// from `found` does not exist), in the spec's order.
pub fn problems(tls: &TlsSpec, found: &BTreeMap<String, Secret>) -> Vec<Problem> {
    tls.certificates
        .iter()
        .enumerate()
        .filter_map(|(index, c)| {
            let what = check(found.get(&c.secret_name)).err()?;
            Some(Problem {
                index,
                secret: c.secret_name.clone(),
                what,
            })
        })
        .collect()
}

/// The Degraded message for `problems` (not empty) in `namespace`.
pub fn message(namespace: &str, problems: &[Problem]) -> String {
    let each: Vec<String> = problems.iter().map(ToString::to_string).collect();
    format!(
        "the TLS certificates cannot be served, so nothing is rolled out (namespace {namespace}): {}",
        each.join("; ")
    )
}

/// Whether one Secret can serve as a certificate: it exists, is of type `kubernetes.io/tls`,
/// and holds a PEM certificate in `tls.crt` and a PEM private key in `tls.key`.
pub fn check(secret: Option<&Secret>) -> Result<(), String> {
    let Some(secret) = secret else {
        return Err("does not exist".into());
    };
    let type_ = secret.type_.as_deref().unwrap_or("Opaque");
    if type_ != TLS_SECRET_TYPE {
        return Err(format!("is of type {type_}, not {TLS_SECRET_TYPE}"));
    }
    let data = secret.data.as_ref();
    let get = |key: &str| data.and_then(|d| d.get(key)).map(|b| b.0.as_slice());
    let (cert, key) = (get(TLS_CERT_KEY), get(TLS_KEY_KEY));
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
        if value.iter().all(u8::is_ascii_whitespace) {
            return Err(format!("has an empty {name} (not issued yet?)"));
        }
    }
    if !contains(cert, b"-----BEGIN CERTIFICATE-----") {
        return Err(format!("has no PEM certificate in {TLS_CERT_KEY}"));
    }
    if !(contains(key, b"-----BEGIN ") && contains(key, b"PRIVATE KEY-----")) {
        return Err(format!("has no PEM private key in {TLS_KEY_KEY}"));
    }
    Ok(())
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

    #[test]
    fn problems_follow_the_spec_order_and_name_field_and_secret() {
        let tls: TlsSpec = serde_yaml::from_str(
            "certificates:\n- secretName: a\n- secretName: b\n- secretName: c\n",
        )
        .unwrap();
        let found = BTreeMap::from([
            ("a".to_string(), tls_secret(CERT, KEY)),
            ("b".to_string(), secret(Some("Opaque"), &[])),
        ]);
        let p = problems(&tls, &found);
        let lines: Vec<String> = p.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "spec.tls.certificates[1].secretName: Secret b is of type Opaque, not kubernetes.io/tls",
                "spec.tls.certificates[2].secretName: Secret c does not exist",
            ]
        );
        assert!(message("edge", &p).contains("(namespace edge): spec.tls.certificates[1]"));
    }
}
