//! edgecache-cache: the cache's policy (pure RFC 9111 decisions that take `now`) and its storage
//! engine (segment log on NVMe, read through io_uring or a thread pool). It knows no server and
//! no Kubernetes.
//!
//! Unsafe code: the workspace denies `unsafe_code`; this crate allows it only on the few items
//! of [`io`] that need it (the 4096-aligned buffer allocation, tokio-uring's buffer traits,
//! borrowing the store's descriptors into tokio-uring, `fallocate`), each with a `// SAFETY:`
//! comment. See the [`io`] module doc.
//!
//! # Using the store from a worker
//! ```no_run
//! # use std::sync::Arc;
//! # use bytes::Bytes;
//! # use futures_util::StreamExt;
//! # use edgecache_cache::{Store, StoreConfig, StoreWorker};
//! # fn demo(cfg: StoreConfig) -> Result<(), Box<dyn std::error::Error>> {
//! let store: Arc<Store> = Store::open(cfg)?; // once, shared by all workers
//! tokio_uring::start(async move {
//!     let w = StoreWorker::new(store.clone())?; // once per worker thread
//!     // Miss: tee the origin body into the store.
//!     let mut wr = w.begin_write(Bytes::from_static(b"GET example.com/a"), Bytes::new(),
//!                                Bytes::from_static(b"meta"), Some(5))?;
//!     wr.write(Bytes::from_static(b"hello")).await?;
//!     wr.finish().await?;
//!     // Hit: look up the variants, open one, stream its verified body.
//!     let r = &store.lookup(b"GET example.com/a")[0];
//!     let obj = w.open(r).await?;
//!     let mut body = std::pin::pin!(obj.body(None));
//!     while let Some(chunk) = body.next().await {
//!         let _bytes = chunk?; // an Err here means: abort the response
//!     }
//!     Ok::<_, Box<dyn std::error::Error>>(())
//! })
//! # }
//! ```

pub mod policy;

pub mod io;
pub mod store;

pub use io::{EngineKind, probe_uring};
pub use store::{
    DiskLocation, LatencyHistogram, ObjectRef, ObjectWriter, Source, Store, StoreConfig,
    StoreError, StoreStats, StoreWorker, StoredObject,
};

#[cfg(test)]
mod tests {
    #[test]
    fn store_is_shareable_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<crate::Store>();
        send_sync::<crate::StoreError>();
    }
}
