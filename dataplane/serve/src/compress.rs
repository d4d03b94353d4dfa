//! The cache's own compression (issue 33 §1): a fill whose response `policy::encoding` finds
//! eligible is compressed once, as it arrives, into the coding of the client's Accept-Encoding
//! bucket, and stored that way; later clients of the bucket are hits on the compressed
//! variant. Which coding, which fields and which validators are `policy::encoding`'s to
//! decide; this module only runs the encoders and keeps their number bounded.
//!
//! Compression never slows hits or blows the memory plan: each worker compresses at most
//! [`MAX_PER_WORKER`] bodies at once, and every encoder's state ([`footprint`]) is taken from the
//! plan's `encoders` part (`memory_bytes{part="encoders"}`) before it starts. A fill past either
//! waits for room up to [`WAIT`] ([`Encoder::start_within`]), and past that is answered identity and
//! not stored (the next request for the bucket compresses it).

use std::cell::Cell;
use std::io::{self, Write};
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use edgecache_host::memory::Share;
use edgecache_policy::encoding::{Coding, Levels};

/// Bodies a worker compresses at once. Compression runs on the worker between its other work,
/// chunk by chunk (an origin read, at most 64 KiB, at a time): a few streams keep its CPU
/// share bounded while still compressing every fill of a normal miss rate.
pub const MAX_PER_WORKER: usize = 4;

/// How long a fill waits for an encoder before it is answered identity: a few encoders' turns
/// at the default levels (each compresses a typical asset in a millisecond or two), well within
/// a miss's own time to the origin.
pub const WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// A streaming encoder of one coding. Output is taken after each input chunk, so a client
/// receives compressed bytes as the origin's arrive (what an encoder holds back until its
/// block fills is sent with a later chunk or at the end).
pub struct Encoder {
    kind: Kind,
    /// Input taken since the encoder last gave output.
    held: usize,
    _slot: Slot,
}

/// Input an encoder may hold without giving output before it is flushed: on a body that
/// compresses very well, brotli and zstd emit nothing for hundreds of kilobytes, and the client
/// would wait for the origin's whole body. A flush costs a few bytes of ratio.
const FLUSH_AFTER: usize = 256 * 1024;

enum Kind {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Br(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

/// The encoders' windows: 2^18 bytes (256 KiB). Text assets repeat within a few kilobytes, and a
/// larger window costs memory per stream (brotli at level 5: 4 MiB with this window, 10 MiB with
/// 2^20, 34 MiB with its default 2^22) for a few percent of ratio on the largest bundles only.
const WINDOW_LOG: u32 = 18;
/// Brotli's input buffer.
const BR_BUFFER: usize = 64 * 1024;

/// The most memory an encoder of `coding` at `level` holds (its windows, hash tables and
/// buffers, with this module's window), in bytes: measured on this machine (peak allocations and
/// resident growth compressing 2 MiB of JavaScript, the larger of the two, plus 1 MiB), the
/// figures in bench/BENCHMARKS.md "Compression".
pub fn footprint(coding: Coding, level: u32) -> u64 {
    const BR: [u64; 12] = [2, 2, 3, 3, 5, 6, 7, 13, 21, 39, 16, 25];
    const ZSTD: [u64; 20] = [
        2, 2, 3, 3, 4, 5, 5, 7, 7, 12, 23, 43, 43, 66, 66, 66, 83, 83, 83, 83,
    ];
    let mib = match coding {
        Coding::Gzip => 1,
        Coding::Br => BR[level.min(11) as usize],
        Coding::Zstd => ZSTD[level.clamp(1, 19) as usize],
        Coding::Identity => 0,
    };
    mib << 20
}

/// The compressions running on this worker, and the plan's share for their state.
#[derive(Debug)]
pub struct Running {
    count: Rc<Cell<usize>>,
    share: Arc<Share>,
    /// Told when one of this worker's encoders ends.
    freed: Rc<tokio::sync::Notify>,
}

/// One of [`Running`]'s places and its bytes of the share, given back when its encoder is
/// dropped.
struct Slot {
    count: Rc<Cell<usize>>,
    share: Arc<Share>,
    freed: Rc<tokio::sync::Notify>,
    bytes: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.count.set(self.count.get().saturating_sub(1));
        self.share.give_back(self.bytes);
        self.freed.notify_one();
    }
}

impl Running {
    /// No compression running yet; encoders' state is taken from `share`.
    pub fn new(share: Arc<Share>) -> Self {
        Running {
            count: Rc::default(),
            share,
            freed: Rc::default(),
        }
    }

    /// A place for one more compression holding `bytes`, unless [`MAX_PER_WORKER`] run already
    /// or the share has no room.
    fn take(&self, bytes: u64) -> Option<Slot> {
        let n = self.count.get();
        if n >= MAX_PER_WORKER || !self.share.try_take(bytes) {
            return None;
        }
        self.count.set(n + 1);
        Some(Slot {
            count: self.count.clone(),
            share: self.share.clone(),
            freed: self.freed.clone(),
            bytes,
        })
    }
}

/// Warn at start of each site's coding whose encoder can never start: its state is larger
/// than the memory plan's whole `encoders` part (`bound`), so its clients always get identity.
pub fn warn_unplanned(sites: &[Arc<crate::sites::Site>], bound: u64) {
    for site in sites {
        let Some(cfg) = &site.compression else {
            continue;
        };
        for coding in edgecache_policy::encoding::PREFERENCE {
            let need = footprint(coding, cfg.levels.of(coding));
            if need > bound {
                tracing::warn!(
                    site = %site.name,
                    "{} level {} needs {} MiB per stream, more than the memory plan's {} MiB for \
                     encoders: its clients get identity (lower the level or raise the memory limit)",
                    coding.as_str(),
                    cfg.levels.of(coding),
                    need >> 20,
                    bound >> 20
                );
            }
        }
    }
}

/// Why no encoder was started.
#[derive(Debug)]
pub enum NotStarted {
    /// The worker compresses as many bodies as it may.
    Busy,
    /// The encoder could not be made (zstd's context allocation).
    Failed(io::Error),
}

impl Encoder {
    /// An encoder of `coding` (not identity) at `levels`' level, if this worker has room for
    /// one more in `running`.
    pub fn start(coding: Coding, levels: &Levels, running: &Running) -> Result<Self, NotStarted> {
        let level = levels.of(coding);
        let slot = running
            .take(footprint(coding, level))
            .ok_or(NotStarted::Busy)?;
        let kind = match coding {
            Coding::Gzip => Kind::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(level.min(9)),
            )),
            Coding::Br => Kind::Br(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                BR_BUFFER,
                level.min(11),
                WINDOW_LOG,
            ))),
            Coding::Zstd => {
                let mut e =
                    zstd::stream::write::Encoder::new(Vec::new(), level.clamp(1, 19) as i32)
                        .map_err(NotStarted::Failed)?;
                e.window_log(WINDOW_LOG).map_err(NotStarted::Failed)?;
                Kind::Zstd(e)
            }
            Coding::Identity => {
                return Err(NotStarted::Failed(io::Error::other(
                    "identity is no coding to compress into",
                )));
            }
        };
        Ok(Encoder {
            kind,
            held: 0,
            _slot: slot,
        })
    }

    /// [`Encoder::start`], waiting at most `within` for room when the worker compresses as many
    /// bodies as it may or the plan's share is taken: a burst of cold misses queues for a few
    /// milliseconds each instead of going out uncompressed and unstored (and back to the origin
    /// for the next client). An encoder larger than the whole share does not wait.
    pub async fn start_within(
        coding: Coding,
        levels: &Levels,
        running: &Running,
        within: std::time::Duration,
    ) -> Result<Self, NotStarted> {
        let deadline = tokio::time::Instant::now() + within;
        let never_fits = footprint(coding, levels.of(coding)) > running.share.bound();
        loop {
            match Self::start(coding, levels, running) {
                Err(NotStarted::Busy) if !never_fits => {
                    let now = tokio::time::Instant::now();
                    if now >= deadline {
                        return Err(NotStarted::Busy);
                    }
                    // Freed on this worker, or the share freed by another worker's encoder
                    // (which does not tell this one): look again at the latest in 10 ms.
                    let next = deadline.min(now + std::time::Duration::from_millis(10));
                    let _ = tokio::time::timeout_at(next, running.freed.notified()).await;
                }
                other => return other,
            }
        }
    }

    /// Compress `input`; returns the output ready so far (may be empty).
    pub fn push(&mut self, input: &[u8]) -> io::Result<Bytes> {
        self.writer().write_all(input)?;
        self.held += input.len();
        if self.output().is_empty() && self.held >= FLUSH_AFTER {
            self.writer().flush()?;
        }
        let out = std::mem::take(self.output());
        if !out.is_empty() {
            self.held = 0;
        }
        Ok(Bytes::from(out))
    }

    /// The encoder, as what it is fed through.
    fn writer(&mut self) -> &mut dyn Write {
        match &mut self.kind {
            Kind::Gzip(e) => e,
            Kind::Br(e) => e.as_mut(),
            Kind::Zstd(e) => e,
        }
    }

    /// What the encoder has written so far and nobody took.
    fn output(&mut self) -> &mut Vec<u8> {
        match &mut self.kind {
            Kind::Gzip(e) => e.get_mut(),
            Kind::Br(e) => e.get_mut(),
            Kind::Zstd(e) => e.get_mut(),
        }
    }

    /// End the stream; returns the rest of the output (the coding's trailer included).
    pub fn finish(self) -> io::Result<Bytes> {
        let out = match self.kind {
            Kind::Gzip(e) => e.finish()?,
            // `into_inner` finishes the brotli stream.
            Kind::Br(e) => e.into_inner(),
            Kind::Zstd(e) => e.finish()?,
        };
        Ok(Bytes::from(out))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::Read;

    use super::*;
    use edgecache_policy::encoding::DEFAULT_LEVELS;

    fn corpus() -> Vec<u8> {
        let mut v = Vec::new();
        for i in 0..20_000 {
            v.extend_from_slice(format!("function f{i}(x) {{ return x * {i}; }}\n").as_bytes());
        }
        v
    }

    fn decode(coding: Coding, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match coding {
            Coding::Gzip => {
                flate2::read::GzDecoder::new(data)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Br => {
                brotli::Decompressor::new(data, 4096)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Zstd => {
                out = zstd::stream::decode_all(data).unwrap();
            }
            Coding::Identity => out = data.to_vec(),
        }
        out
    }

    #[test]
    fn each_coding_streams_what_decodes_to_the_input() {
        let input = corpus();
        let share = Arc::new(Share::new(64 << 20));
        let running = Running::new(share.clone());
        for coding in [Coding::Gzip, Coding::Br, Coding::Zstd] {
            let mut e = Encoder::start(coding, &DEFAULT_LEVELS, &running).unwrap();
            let mut out = Vec::new();
            let mut early = 0;
            for chunk in input.chunks(16 * 1024) {
                let b = e.push(chunk).unwrap();
                early += b.len();
                out.extend_from_slice(&b);
            }
            out.extend_from_slice(&e.finish().unwrap());
            assert_eq!(decode(coding, &out), input, "{coding:?}");
            assert!(
                out.len() * 5 < input.len(),
                "{coding:?}: {} bytes",
                out.len()
            );
            assert!(early > 0, "{coding:?} sent nothing before its end");
        }
        assert_eq!(running.count.get(), 0, "every place is given back");
        assert_eq!(share.held(), 0, "and every byte of the share");
    }

    #[test]
    fn a_worker_runs_at_most_its_share_at_once() {
        let running = Running::new(Arc::new(Share::new(u64::MAX)));
        let held: Vec<_> = (0..MAX_PER_WORKER)
            .map(|_| Encoder::start(Coding::Gzip, &DEFAULT_LEVELS, &running).unwrap())
            .collect();
        assert!(matches!(
            Encoder::start(Coding::Gzip, &DEFAULT_LEVELS, &running),
            Err(NotStarted::Busy)
        ));
        drop(held);
        assert!(Encoder::start(Coding::Br, &DEFAULT_LEVELS, &running).is_ok());
    }

    #[test]
    fn a_fill_waits_a_little_for_a_place_and_then_goes_without() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async {
            let running = Rc::new(Running::new(Arc::new(Share::new(u64::MAX))));
            let mut held: Vec<_> = (0..MAX_PER_WORKER)
                .map(|_| Encoder::start(Coding::Gzip, &DEFAULT_LEVELS, &running).unwrap())
                .collect();
            let short = std::time::Duration::from_millis(30);
            let t = std::time::Instant::now();
            assert!(matches!(
                Encoder::start_within(Coding::Gzip, &DEFAULT_LEVELS, &running, short).await,
                Err(NotStarted::Busy)
            ));
            assert!(t.elapsed() >= short, "it waited");
            // One ends while another fill waits: that one starts.
            let last = held.pop().unwrap();
            tokio::task::spawn_local(async move {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                drop(last);
            });
            let long = std::time::Duration::from_secs(10);
            let t = std::time::Instant::now();
            let got = Encoder::start_within(Coding::Br, &DEFAULT_LEVELS, &running, long).await;
            assert!(got.is_ok());
            assert!(t.elapsed() < long / 2, "started when a place was freed");
            // One whose state is larger than the whole share does not wait.
            let small = Running::new(Arc::new(Share::new(1 << 20)));
            let t = std::time::Instant::now();
            assert!(matches!(
                Encoder::start_within(Coding::Br, &DEFAULT_LEVELS, &small, long).await,
                Err(NotStarted::Busy)
            ));
            assert!(t.elapsed() < long / 2);
        });
    }

    #[test]
    fn an_encoder_starts_only_with_room_for_its_state_in_the_plan() {
        let br = footprint(Coding::Br, DEFAULT_LEVELS.br);
        let share = Arc::new(Share::new(br + footprint(Coding::Gzip, 6)));
        let running = Running::new(share.clone());
        let first = Encoder::start(Coding::Br, &DEFAULT_LEVELS, &running).unwrap();
        assert_eq!(share.held(), br);
        assert!(matches!(
            Encoder::start(Coding::Br, &DEFAULT_LEVELS, &running),
            Err(NotStarted::Busy)
        ));
        // A smaller one still fits.
        let gzip = Encoder::start(Coding::Gzip, &DEFAULT_LEVELS, &running).unwrap();
        drop((first, gzip));
        assert_eq!(share.held(), 0);
        // The highest levels hold tens of MiB each.
        assert!(footprint(Coding::Zstd, 19) >= 80 << 20);
        assert!(footprint(Coding::Br, 9) >= 37 << 20);
    }
}
