//! The ConfigMap holding the data-plane config, and its content hash.

use std::collections::BTreeMap;

use edgecache_api::dataplane;
use k8s_openapi::api::core::v1::ConfigMap;
use sha2::{Digest, Sha256};

use super::{CONFIG_HASH_ANNOTATION, CONFIG_KEY, child_meta, config_map_name};
use crate::validate::ValidatedEdgeCache;

/// The ConfigMap and the sha256 (hex) of its `config.yaml`.
pub(super) fn config_map(ec: &ValidatedEdgeCache) -> (ConfigMap, String) {
    let yaml = dataplane::to_yaml(&ec.dataplane);
    let hash = sha256_hex(yaml.as_bytes());
    let mut meta = child_meta(ec, config_map_name(&ec.name));
    meta.annotations = Some(BTreeMap::from([(
        CONFIG_HASH_ANNOTATION.to_string(),
        hash.clone(),
    )]));
    let cm = ConfigMap {
        metadata: meta,
        data: Some(BTreeMap::from([(CONFIG_KEY.to_string(), yaml)])),
        ..ConfigMap::default()
    };
    (cm, hash)
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
