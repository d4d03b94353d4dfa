//! Helpers shared by the store test suites: runtimes per engine, deterministic content, put/get.
#![allow(dead_code)]

use std::future::Future;
use std::path::Path;
use std::pin::pin;
use std::sync::Arc;

use bytes::Bytes;
use edgecache_store::EngineChoice;
use edgecache_store::{ObjectRef, Store, StoreConfig, StoreError, StoreWorker, StoredObject};
use futures_util::StreamExt;

pub mod counting;
pub mod disk;

pub const MIB: u64 = 1 << 20;

/// Run `f` in the runtime a worker of this engine uses: `tokio_uring::start` for uring, a tokio
/// current-thread runtime with a LocalSet for threads.
pub fn run<F: Future>(engine: EngineChoice, f: F) -> F::Output {
    edgecache_store::io::block_on_worker(engine, f).unwrap()
}

pub fn cfg(dir: &Path, size: u64, engine: EngineChoice) -> StoreConfig {
    StoreConfig {
        dir: dir.to_path_buf(),
        size,
        size_auto: false,
        direct_io_threshold: 64 * 1024,
        max_object_size: 512 * MIB,
        ram_tier_bytes: 0,
        engine,
        reads_in_flight: 16,
        verify_every_read: false,
        max_variants_per_key: 32,
        index_bytes: 0,
        admission: edgecache_store::Admission::All,
        reinsertion: false,
    }
}

pub fn open(dir: &Path, size: u64, engine: EngineChoice) -> Arc<Store> {
    let s = Store::open(cfg(dir, size, engine)).unwrap();
    let want = match engine {
        EngineChoice::Uring => "uring",
        _ => "threads",
    };
    assert_eq!(s.engine().as_str(), want);
    s
}

/// Deterministic bytes derived from a key and a seed (xorshift stream).
pub fn content(key: &str, seed: u64, len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ seed.wrapping_mul(0x2545_F491_4F6C_DD1D);
    for b in key.bytes() {
        x = (x ^ u64::from(b)).wrapping_mul(0x100_0000_01B3);
    }
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Store `body` under (key, variant) in chunks of `chunk` bytes.
pub async fn put(
    w: &StoreWorker,
    key: &str,
    variant: &str,
    meta: &str,
    body: &[u8],
    known_length: bool,
    chunk: usize,
) -> Result<(), StoreError> {
    let cl = known_length.then_some(body.len() as u64);
    let mut wr = w.begin_write(
        Bytes::copy_from_slice(key.as_bytes()),
        Bytes::copy_from_slice(variant.as_bytes()),
        Bytes::copy_from_slice(meta.as_bytes()),
        cl,
    )?;
    for c in body.chunks(chunk.max(1)) {
        wr.write(Bytes::copy_from_slice(c)).await?;
    }
    wr.finish().await
}

pub async fn collect(
    obj: StoredObject,
    range: Option<std::ops::Range<u64>>,
) -> std::io::Result<Vec<u8>> {
    let mut s = pin!(obj.body(range));
    let mut out = Vec::new();
    while let Some(c) = s.next().await {
        out.extend_from_slice(&c?);
    }
    Ok(out)
}

/// The complete refs of a key's stored objects (each candidate opened; those that are not the
/// key's, or gone, left out), newest first.
pub async fn refs(w: &StoreWorker, key: &str) -> Vec<ObjectRef> {
    let mut out = Vec::new();
    for r in w.store().lookup(key.as_bytes()) {
        if let Ok(o) = w.open(&r).await {
            out.push(o.object_ref);
        }
    }
    out
}

/// The complete ref of `key`'s object with the variant key `variant` (panics when none).
pub async fn variant_ref(w: &StoreWorker, key: &str, variant: &str) -> ObjectRef {
    refs(w, key)
        .await
        .into_iter()
        .find(|r| r.variant == variant)
        .unwrap_or_else(|| panic!("no {key} variant {variant:?}"))
}

/// The complete ref of the newest object of `key` (panics when there is none).
pub async fn opened(w: &StoreWorker, key: &str) -> ObjectRef {
    refs(w, key)
        .await
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("{key} is not stored"))
}

/// Open the newest object of `key` and read it whole: (meta, body).
pub async fn get(w: &StoreWorker, key: &str) -> Option<(Bytes, Vec<u8>)> {
    for r in w.store().lookup(key.as_bytes()) {
        let Ok(obj) = w.open(&r).await else {
            continue;
        };
        let meta = obj.meta.clone();
        let body = collect(obj, None).await.ok()?;
        return Some((meta, body));
    }
    None
}

/// Store `n` objects of 100 bytes (one 4 KiB packed record each) under `{prefix}{i}`, with
/// `writers` tasks at once on this worker, as a busy worker's misses.
pub async fn fill_small(w: &std::rc::Rc<StoreWorker>, prefix: &str, n: u64, writers: u64) {
    let tasks: Vec<_> = (0..writers)
        .map(|t| {
            let (w, prefix) = (w.clone(), prefix.to_string());
            tokio::task::spawn_local(async move {
                for i in (t..n).step_by(writers as usize) {
                    put(&w, &format!("{prefix}{i}"), "", "m", &[7u8; 100], true, 100)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}
