//! The Service in front of the cache pods, and their ServiceAccount.

use k8s_openapi::api::core::v1::{Service, ServiceAccount, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{child_meta, selector_labels};
use crate::validate::ValidatedEdgeCache;

/// Clients reach the caches on `network.port` (`http`) and, with `spec.tls`, on `tls.port`
/// (`https`). The admin port (metrics, PURGE) stays off the Service; scrape the pods directly.
pub(super) fn service(ec: &ValidatedEdgeCache) -> Service {
    Service {
        metadata: child_meta(ec, ec.name.clone()),
        spec: Some(ServiceSpec {
            type_: Some(ec.spec.network.service_type.as_str().into()),
            internal_traffic_policy: Some(ec.spec.network.internal_traffic_policy.as_str().into()),
            selector: Some(selector_labels(&ec.name)),
            ports: Some(
                std::iter::once(port("http", ec.spec.network.port))
                    .chain(ec.spec.tls.as_ref().map(|tls| port("https", tls.port)))
                    .collect(),
            ),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// A TCP Service port of the same number as the container port it targets by name.
fn port(name: &str, number: u16) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port: i32::from(number),
        target_port: Some(IntOrString::String(name.into())),
        protocol: Some("TCP".into()),
        ..ServicePort::default()
    }
}

/// The pods talk to no API: no token is mounted.
pub(super) fn service_account(ec: &ValidatedEdgeCache) -> ServiceAccount {
    ServiceAccount {
        metadata: child_meta(ec, ec.name.clone()),
        automount_service_account_token: Some(false),
        ..ServiceAccount::default()
    }
}
