//! The cache's own compression (issue 33 §1): a fill whose response `policy::encoding` finds
//! eligible is compressed once, as it arrives, into the coding of the client's Accept-Encoding
//! bucket, and stored that way; later clients of the bucket are hits on the compressed
//! variant. Which coding, which fields and which validators are `policy::encoding`'s to
//! decide; this module only runs the encoders and keeps their number bounded.
//!
//! Under CPU pressure the node serves identity rather than slow its hits: each worker
//! compresses at most [`MAX_PER_WORKER`] bodies at once, and a fill past that is answered
//! identity and not stored (the next request for the bucket compresses it).

use std::cell::Cell;
use std::io::{self, Write};
use std::rc::Rc;

use bytes::Bytes;
use edgecache_policy::encoding::{Coding, Levels};

/// Bodies a worker compresses at once. Compression runs on the worker between its other work,
/// chunk by chunk (an origin read, at most 64 KiB, at a time): a few streams keep its CPU
/// share bounded while still compressing every fill of a normal miss rate.
pub const MAX_PER_WORKER: usize = 4;

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

/// Brotli's window: 2^22 bytes (4 MiB), its default for streams; its input buffer.
const BR_LGWIN: u32 = 22;
const BR_BUFFER: usize = 64 * 1024;

/// The compressions running on this worker.
#[derive(Debug, Default)]
pub struct Running(Rc<Cell<usize>>);

/// One of [`Running`]'s places, given back when its encoder is dropped.
struct Slot(Rc<Cell<usize>>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.set(self.0.get().saturating_sub(1));
    }
}

impl Running {
    /// A place for one more compression, unless [`MAX_PER_WORKER`] run already.
    fn take(&self) -> Option<Slot> {
        let n = self.0.get();
        if n >= MAX_PER_WORKER {
            return None;
        }
        self.0.set(n + 1);
        Some(Slot(self.0.clone()))
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
        let slot = running.take().ok_or(NotStarted::Busy)?;
        let level = levels.of(coding);
        let kind = match coding {
            Coding::Gzip => Kind::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(level.min(9)),
            )),
            Coding::Br => Kind::Br(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                BR_BUFFER,
                level.min(11),
                BR_LGWIN,
            ))),
            Coding::Zstd => Kind::Zstd(
                zstd::stream::write::Encoder::new(Vec::new(), level.clamp(1, 19) as i32)
                    .map_err(NotStarted::Failed)?,
            ),
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

    /// Compress `input`; returns the output ready so far (may be empty).
    pub fn push(&mut self, input: &[u8]) -> io::Result<Bytes> {
        let w: &mut dyn Write = match &mut self.kind {
            Kind::Gzip(e) => e,
            Kind::Br(e) => e.as_mut(),
            Kind::Zstd(e) => e,
        };
        w.write_all(input)?;
        self.held += input.len();
        if self.output().is_empty() && self.held >= FLUSH_AFTER {
            let w: &mut dyn Write = match &mut self.kind {
                Kind::Gzip(e) => e,
                Kind::Br(e) => e.as_mut(),
                Kind::Zstd(e) => e,
            };
            w.flush()?;
        }
        let out = std::mem::take(self.output());
        if !out.is_empty() {
            self.held = 0;
        }
        Ok(Bytes::from(out))
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
        let running = Running::default();
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
        assert_eq!(running.0.get(), 0, "every place is given back");
    }

    #[test]
    fn a_worker_runs_at_most_its_share_at_once() {
        let running = Running::default();
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
}
