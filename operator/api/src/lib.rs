//! The contract crate. [`dataplane`] is the config the operator writes and the data plane reads;
//! [`quantity`] holds the byte-size and duration types both use. With the `crd` feature it also
//! carries the `EdgeCache` and `EdgeCachePurge` custom resource types (kube, k8s-openapi,
//! schemars), which the data plane never pulls in; with `schema` alone, the
//! JSON schema of the data-plane config ([`schema::dataplane_config_schema`]).

pub mod dataplane;
pub mod quantity;

pub use dataplane::{DataplaneConfig, SteeringMode};
pub use quantity::{ByteSize, DiskSize, Duration};

#[cfg(feature = "crd")]
pub mod purge;
#[cfg(feature = "schema")]
pub mod schema;
#[cfg(feature = "crd")]
pub mod v1alpha1;
