//! The ConfigMap holding the peer list of a sharded EdgeCache, mounted at
//! [`PEERS_DIR`](crate::validate::PEERS_DIR) in every pod. It is its own object, outside the
//! config hash, so the operator rewrites it as pods become ready or go, and the data plane
//! reloads it, without a rollout.

use std::collections::BTreeMap;

use edgecache_api::dataplane::ShardingMode;
use k8s_openapi::api::core::v1::ConfigMap;

use super::{child_meta, peers_config_map_name};
use crate::peers::{self, Peer};
use crate::validate::{PEERS_KEY, ValidatedEdgeCache};

/// The peers ConfigMap with an empty list, when sharding is on.
pub(super) fn peers_config_map(ec: &ValidatedEdgeCache) -> Option<ConfigMap> {
    if ec.dataplane.sharding.mode != ShardingMode::Consistent {
        return None;
    }
    let mut cm = ConfigMap {
        metadata: child_meta(ec, peers_config_map_name(&ec.name)),
        ..ConfigMap::default()
    };
    set_peers(&mut cm, &[]);
    Some(cm)
}

/// Put `peers` in the ConfigMap (the key is always there: the data plane needs the file).
pub(super) fn set_peers(cm: &mut ConfigMap, peers: &[Peer]) {
    cm.data = Some(BTreeMap::from([(
        PEERS_KEY.to_string(),
        peers::render(peers),
    )]));
}
