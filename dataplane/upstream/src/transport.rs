//! How a site's client reaches its origins: plain or TLS (the CAs trusted, the name checked),
//! HTTP/1.1 or HTTP/2. The sites make one per site from the config (src/sites.rs); the origin
//! client (src/origin.rs) and the active health checks connect through it.

use std::sync::Arc;
use std::time::Duration;

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;

use crate::error::ProxyError;

/// How a site's client reaches its origins.
#[derive(Debug, Clone, Default)]
pub struct Transport {
    pub https: bool,
    /// PEM of the CAs trusted for the origins' certificates; the Mozilla roots without it.
    pub ca_pem: Option<Vec<u8>>,
    /// The name sent in SNI and checked in the certificate, instead of the URL's host.
    pub server_name: Option<String>,
    /// HTTP/2 to the origins.
    pub http2: bool,
}

impl Transport {
    /// The connector of a site's requests and of its active health checks alike: TLS as
    /// `originTls` says when the origins are HTTPS, HTTP/2 when asked for.
    pub fn connector(
        &self,
        connect_timeout: Duration,
    ) -> Result<HttpsConnector<HttpConnector>, ProxyError> {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(connect_timeout));
        http.set_nodelay(true);
        http.enforce_http(false);
        let tls = self.client_config()?;
        let https = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls);
        let https = if self.https {
            https.https_only()
        } else {
            https.https_or_http()
        };
        let https = match &self.server_name {
            Some(name) => {
                let name = rustls_pki_types::ServerName::try_from(name.clone()).map_err(|_| {
                    ProxyError::config("originTls.serverName is not a DNS name or address")
                })?;
                https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
            }
            None => https,
        };
        // HTTP/2 is asked for, not negotiated: ALPN offers h2 alone, so the pool knows every
        // connection multiplexes and opens one per origin instead of one per request in flight.
        Ok(if self.http2 {
            https.enable_http2().wrap_connector(http)
        } else {
            https.enable_http1().wrap_connector(http)
        })
    }

    fn client_config(&self) -> Result<rustls::ClientConfig, ProxyError> {
        let mut roots = rustls::RootCertStore::empty();
        match &self.ca_pem {
            Some(pem) => {
                use rustls_pki_types::pem::PemObject;
                for cert in rustls_pki_types::CertificateDer::pem_slice_iter(pem) {
                    let cert =
                        cert.map_err(|_| ProxyError::config("originTls.caFile is not PEM"))?;
                    roots.add(cert).map_err(|_| {
                        ProxyError::config("originTls.caFile holds a certificate rustls refuses")
                    })?;
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        Ok(rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|_| ProxyError::config("no TLS versions"))?
            .with_root_certificates(roots)
            .with_no_client_auth())
    }
}
