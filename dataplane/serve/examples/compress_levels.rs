//! The level sweep behind `policy::encoding::DEFAULT_LEVELS` (issue 33 §1, bench/BENCHMARKS.md
//! "Compression"): every file of a corpus compressed by the data plane's own encoder
//! (edgecache_serve::compress, so the crates, brotli's window and buffer, zstd's context
//! and the flushes are the ones a fill runs), fed in 64 KiB chunks as an origin read delivers
//! them, at each level of each coding; prints the total compressed size, the ratio and the
//! compression rate in MB of input per CPU second of the thread (its schedstat run time, so other
//! load on a shared machine does not lower it; pin with `taskset -c 1`).
//!
//! ```sh
//! cargo run --release -p edgecache-serve --example compress_levels -- DIR [--json] [--quick]
//! ```
//!
//! `--json`: one JSON object per line (bench/harness/compress.py records them); `--quick`: fewer
//! levels. Slow levels (brotli 10 and 11, zstd 16 and up) run on every 4th file only (`sample`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use std::sync::Arc;

use edgecache_host::memory::Share;
use edgecache_policy::encoding::{Coding, DEFAULT_LEVELS, Levels};
use edgecache_serve::compress::{Encoder, Running};

/// What an origin read hands the encoder at most.
const CHUNK: usize = 64 * 1024;

/// The run time of this thread so far, ns (`/proc/thread-self/schedstat`, first field).
fn cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn files(dir: &Path) -> std::io::Result<Vec<Vec<u8>>> {
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            if e.file_type()?.is_dir() {
                stack.push(e.path());
            } else if e.file_type()?.is_file() {
                paths.push(e.path());
            }
        }
    }
    paths.sort();
    paths.iter().map(std::fs::read).collect()
}

fn levels_of(coding: Coding, level: u32) -> Levels {
    let mut l = DEFAULT_LEVELS;
    match coding {
        Coding::Gzip => l.gzip = level,
        Coding::Br => l.br = level,
        Coding::Zstd => l.zstd = level,
        Coding::Identity => {}
    }
    l
}

struct Sweep {
    input: u64,
    output: u64,
    cpu_s: f64,
    wall_s: f64,
}

/// Every file through a fresh encoder, as a fill runs it.
fn sweep(corpus: &[&Vec<u8>], coding: Coding, level: u32) -> anyhow::Result<Sweep> {
    let levels = levels_of(coding, level);
    // The sweep measures rate and ratio, not the memory plan: room for every encoder.
    let running = Running::new(Arc::new(Share::new(u64::MAX)));
    let (mut input, mut output) = (0u64, 0u64);
    let c0 = cpu_ns();
    let t0 = Instant::now();
    for body in corpus {
        let mut e = Encoder::start(coding, &levels, &running)
            .map_err(|e| anyhow::anyhow!("encoder: {e:?}"))?;
        for chunk in body.chunks(CHUNK) {
            output += e.push(chunk)?.len() as u64;
        }
        output += e.finish()?.len() as u64;
        input += body.len() as u64;
    }
    let wall_s = t0.elapsed().as_secs_f64();
    let cpu_s = match (c0, cpu_ns()) {
        (Some(a), Some(b)) => (b - a) as f64 / 1e9,
        _ => wall_s,
    };
    Ok(Sweep {
        input,
        output,
        cpu_s,
        wall_s,
    })
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let quick = args.iter().any(|a| a == "--quick");
    let dir = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .ok_or_else(|| anyhow::anyhow!("usage: compress_levels DIR [--json] [--quick]"))?;
    let all = files(Path::new(dir))?;
    anyhow::ensure!(!all.is_empty(), "no files under {dir}");
    let total: u64 = all.iter().map(|f| f.len() as u64).sum();
    let plan: Vec<(Coding, Vec<u32>)> = if quick {
        vec![
            (Coding::Gzip, vec![1, 4, 6, 9]),
            (Coding::Br, vec![1, 4, 5, 6, 9]),
            (Coding::Zstd, vec![1, 3, 6, 9, 12]),
        ]
    } else {
        vec![
            (Coding::Gzip, (1..=9).collect()),
            (Coding::Br, (0..=11).collect()),
            (Coding::Zstd, vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 19]),
        ]
    };
    if !json {
        println!(
            "corpus: {} files, {:.1} MB; rates are MB of input per CPU second of one thread",
            all.len(),
            total as f64 / 1e6
        );
        println!(
            "{:<6} {:>5} {:>8} {:>12} {:>7} {:>9} {:>9}",
            "coding", "level", "sample", "out bytes", "ratio", "MB/s cpu", "MB/s wall"
        );
    }
    for (coding, levels) in plan {
        for level in levels {
            let slow = matches!((coding, level), (Coding::Br, 10..) | (Coding::Zstd, 16..));
            let step = if slow { 4 } else { 1 };
            let corpus: Vec<&Vec<u8>> = all.iter().step_by(step).collect();
            // The faster of two passes over the corpus (one for the slow levels).
            let mut best = sweep(&corpus, coding, level)?;
            if !slow {
                let again = sweep(&corpus, coding, level)?;
                if again.cpu_s < best.cpu_s {
                    best = again;
                }
            }
            let ratio = best.output as f64 / best.input as f64;
            let rate = best.input as f64 / 1e6 / best.cpu_s;
            let wall = best.input as f64 / 1e6 / best.wall_s;
            let is_default = DEFAULT_LEVELS.of(coding) == level;
            if json {
                println!(
                    "{{\"kind\":\"level\",\"coding\":\"{}\",\"level\":{level},\"sample\":{step},\
                     \"files\":{},\"input_bytes\":{},\"output_bytes\":{},\"ratio\":{ratio:.5},\
                     \"cpu_s\":{:.4},\"wall_s\":{:.4},\"mb_per_cpu_s\":{rate:.2},\
                     \"mb_per_wall_s\":{wall:.2},\"default\":{is_default}}}",
                    coding.as_str(),
                    corpus.len(),
                    best.input,
                    best.output,
                    best.cpu_s,
                    best.wall_s
                );
            } else {
                println!(
                    "{:<6} {:>5} {:>8} {:>12} {:>7.4} {:>9.1} {:>9.1}{}",
                    coding.as_str(),
                    level,
                    if step == 1 {
                        "all".to_string()
                    } else {
                        format!("1/{step}")
                    },
                    best.output,
                    ratio,
                    rate,
                    wall,
                    if is_default { "  <- default" } else { "" }
                );
            }
        }
    }
    Ok(())
}
