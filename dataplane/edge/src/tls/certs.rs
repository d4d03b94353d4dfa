//! The served certificates: PEM pairs loaded into rustls keys, the names each one carries, and
//! the choice of one by the client's SNI.

use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::hosts::HostTable;

/// One certificate chain with its key, as files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PemPair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A pair with the contents of its two files: (pair, certificate PEM, key PEM).
pub type PemFiles = (PemPair, Vec<u8>, Vec<u8>);

/// What is known of a loaded certificate, for logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    /// DNS names (subjectAltName, or the subject's CN without one), lowercased; may start
    /// with `*.`.
    pub names: Vec<String>,
    /// The end of its validity, seconds since the epoch.
    pub not_after: i64,
}

/// The certificates in force: the first is the default.
pub struct CertSet {
    keys: Vec<Arc<CertifiedKey>>,
    described: Vec<Described>,
    /// Each certificate's names, the first the default (the sites' host matching).
    names: HostTable,
}

impl std::fmt::Debug for CertSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertSet")
            .field("described", &self.described)
            .finish_non_exhaustive()
    }
}

impl CertSet {
    /// Load every pair from its PEM bytes (`(cert, key)` in the order of `pairs`); the error
    /// names the file and what is wrong with it.
    pub fn from_pem(pairs: &[PemFiles], provider: &CryptoProvider) -> Result<Self, String> {
        if pairs.is_empty() {
            return Err("no certificate".into());
        }
        let mut set = CertSet {
            keys: Vec::with_capacity(pairs.len()),
            described: Vec::with_capacity(pairs.len()),
            names: HostTable::default(),
        };
        for (i, (pair, cert_pem, key_pem)) in pairs.iter().enumerate() {
            let (key, described) = load_pair(pair, cert_pem, key_pem, provider)?;
            // An earlier certificate keeps a name two carry.
            set.names.add(i, &described.names, i == 0);
            set.keys.push(Arc::new(key));
            set.described.push(described);
        }
        Ok(set)
    }

    /// The certificate for a client that asked for `sni`: one that carries the exact name,
    /// else one whose wildcard covers it (one label), else the default.
    pub fn choose(&self, sni: Option<&str>) -> &Arc<CertifiedKey> {
        // The name read as a request's host is (one parser: edgecache_policy::authority).
        let name = sni.and_then(|s| edgecache_policy::Authority::parse(s, "https").ok());
        name.and_then(|n| self.names.route(n.host()))
            .and_then(|i| self.keys.get(i))
            .unwrap_or(&self.keys[0])
    }

    pub fn described(&self) -> &[Described] {
        &self.described
    }
}

fn load_pair(
    pair: &PemPair,
    cert_pem: &[u8],
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> Result<(CertifiedKey, Described), String> {
    let cert_file = pair.cert.display();
    let key_file = pair.key.display();
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{cert_file}: not a PEM certificate chain: {e}"))?;
    let Some(leaf) = chain.first() else {
        return Err(format!("{cert_file}: no certificate in it"));
    };
    let described = describe(leaf).map_err(|e| format!("{cert_file}: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| format!("{key_file}: not a PEM private key: {e}"))?;
    let certified = CertifiedKey::from_der(chain, key, provider)
        .map_err(|e| format!("{key_file}: cannot be used with {cert_file}: {e}"))?;
    Ok((certified, described))
}

/// The names and expiry of a DER certificate.
pub fn describe(der: &CertificateDer<'_>) -> Result<Described, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref())
        .map_err(|e| format!("cannot parse the certificate: {e}"))?;
    let mut names: Vec<String> = match cert.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_ascii_lowercase()),
                _ => None,
            })
            .collect(),
        Ok(None) => Vec::new(),
        Err(e) => return Err(format!("its subjectAltName cannot be read: {e}")),
    };
    if names.is_empty()
        && let Some(cn) = cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
    {
        names.push(cn.to_ascii_lowercase());
    }
    Ok(Described {
        names,
        not_after: cert.validity().not_after.timestamp(),
    })
}

/// Read the files of `pairs`.
pub fn read_files(pairs: &[PemPair]) -> Result<Vec<PemFiles>, String> {
    pairs
        .iter()
        .map(|p| {
            let read = |path: &PathBuf| {
                std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
            };
            Ok((p.clone(), read(&p.cert)?, read(&p.key)?))
        })
        .collect()
}

/// Hands rustls the certificate of the set in force; the set is swapped when the files change.
#[derive(Debug)]
pub struct Resolver {
    current: RwLock<Arc<CertSet>>,
}

impl Resolver {
    pub fn new(set: CertSet) -> Self {
        Self {
            current: RwLock::new(Arc::new(set)),
        }
    }

    pub fn replace(&self, set: CertSet) {
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(set);
    }

    pub fn current(&self) -> Arc<CertSet> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current().choose(hello.server_name()).clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(names: &[&str]) -> PemFiles {
        let key = rcgen::KeyPair::generate().expect("key");
        let params =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .expect("params");
        let cert = params.self_signed(&key).expect("cert");
        (
            PemPair {
                cert: format!("{}.crt", names[0]).into(),
                key: format!("{}.key", names[0]).into(),
            },
            cert.pem().into_bytes(),
            key.serialize_pem().into_bytes(),
        )
    }

    fn provider() -> CryptoProvider {
        rustls::crypto::aws_lc_rs::default_provider()
    }

    fn chosen(set: &CertSet, sni: Option<&str>) -> Vec<String> {
        let key = set.choose(sni);
        describe(&key.cert[0]).expect("describe").names
    }

    #[test]
    fn sni_picks_exact_then_wildcard_then_the_default() {
        let set = CertSet::from_pem(
            &[
                pair(&["default.test"]),
                pair(&["a.test", "www.a.test"]),
                pair(&["*.b.test"]),
            ],
            &provider(),
        )
        .expect("load");
        assert_eq!(chosen(&set, Some("www.a.test")), ["a.test", "www.a.test"]);
        assert_eq!(chosen(&set, Some("WWW.A.TEST.")), ["a.test", "www.a.test"]);
        assert_eq!(chosen(&set, Some("img.b.test")), ["*.b.test"]);
        // A wildcard covers one label only.
        assert_eq!(chosen(&set, Some("x.img.b.test")), ["default.test"]);
        assert_eq!(chosen(&set, Some("b.test")), ["default.test"]);
        assert_eq!(chosen(&set, None), ["default.test"]);
    }

    #[test]
    fn a_bad_pair_is_an_error_that_names_its_file() {
        let (p, cert, _) = pair(&["a.test"]);
        let (_, _, other_key) = pair(&["b.test"]);
        let err = CertSet::from_pem(&[(p.clone(), cert.clone(), other_key)], &provider())
            .expect_err("mismatched key");
        assert!(err.contains("a.test.key"), "{err}");
        let err = CertSet::from_pem(
            &[(p.clone(), b"junk".to_vec(), b"junk".to_vec())],
            &provider(),
        )
        .expect_err("junk");
        assert!(err.contains("a.test.crt"), "{err}");
        let err = CertSet::from_pem(&[(p, cert, b"-----BEGIN X-----\n".to_vec())], &provider())
            .expect_err("bad key");
        assert!(err.contains("a.test.key"), "{err}");
    }
}
