//! The store's error type.

use std::io;

/// Why a store operation failed. For a write, every variant means "just proxy, do not store".
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The response cannot be stored (keys or meta too large, unknown length over the buffer cap).
    #[error("not storable: {0}")]
    NotStorable(&'static str),
    /// The body is larger than the largest storable object.
    #[error("object too large: {size} bytes, limit {limit}")]
    TooLarge { size: u64, limit: u64 },
    /// An unknown-length body would take the unknown-length share of the memory plan past its
    /// bound ([`Store::unknown_length_bodies`](super::Store::unknown_length_bodies)).
    #[error("unknown-length bodies are at their memory bound")]
    MemoryBound,
    /// The admission policy keeps this fill off the disk (`StoreConfig::admission`): its key
    /// was not missed recently.
    #[error("not admitted: first miss of the key")]
    NotAdmitted,
    /// No segment can take the record right now (every candidate has writers in flight).
    #[error("no space in the store")]
    NoSpace,
    /// The body written does not match the announced Content-Length.
    #[error("length mismatch: announced {expected} bytes, got {got}")]
    LengthMismatch { expected: u64, got: u64 },
    /// The object was evicted, purged or replaced since it was looked up.
    #[error("object missing or replaced")]
    MissingOrReplaced,
    /// The record failed its checksum; it was dropped from the index.
    #[error("corrupt record: {0}")]
    Corrupt(&'static str),
    /// The new meta blob does not fit into the header's reserved space.
    #[error("meta does not fit in the record header ({need} > {have} bytes)")]
    MetaTooLarge { need: usize, have: usize },
    /// A worker was created outside a suitable runtime, or the engine is unavailable.
    #[error("engine: {0}")]
    Engine(String),
    /// Another process has this cache directory open.
    #[error("cache directory {0} is in use by another process")]
    Locked(std::path::PathBuf),
    /// The directory holds files the store did not create, and it was never claimed: the
    /// store refuses to use (and so to delete anything in) a directory that may be someone
    /// else's.
    #[error(
        "refusing to use {dir} as the cache directory: it holds files EdgeCache did not create \
         ({names}); point storage.dir at an empty directory or one EdgeCache created"
    )]
    NotOurs {
        dir: std::path::PathBuf,
        names: String,
    },
    /// The configured size does not fit in the cache directory's filesystem, or `size_auto`
    /// finds too little room (see `space`).
    #[error("{0}")]
    NoRoom(String),
    /// A disk error (ENOSPC, EIO, ...).
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

impl StoreError {
    /// A bounded label for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::NotStorable(_) => "not_storable",
            StoreError::TooLarge { .. } => "too_large",
            StoreError::MemoryBound => "memory_bound",
            StoreError::NotAdmitted => "not_admitted",
            StoreError::NoSpace => "no_space",
            StoreError::LengthMismatch { .. } => "length_mismatch",
            StoreError::MissingOrReplaced => "missing_or_replaced",
            StoreError::Corrupt(_) => "corrupt",
            StoreError::MetaTooLarge { .. } => "meta_too_large",
            StoreError::Engine(_) => "engine",
            StoreError::Locked(_) => "locked",
            StoreError::NotOurs { .. } => "not_ours",
            StoreError::NoRoom(_) => "no_room",
            StoreError::Io(_) => "io",
        }
    }

    /// Same as [`kind`](Self::kind).
    pub fn as_str(&self) -> &'static str {
        self.kind()
    }
}

impl From<StoreError> for io::Error {
    fn from(e: StoreError) -> io::Error {
        match e {
            StoreError::Io(e) => e,
            StoreError::Corrupt(_) => io::Error::new(io::ErrorKind::InvalidData, e),
            other => io::Error::other(other),
        }
    }
}
