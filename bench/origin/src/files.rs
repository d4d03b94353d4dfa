//! `--dir PATH`: a directory's files under `/files/<relative path>`, read into memory at start,
//! served uncompressed with a Content-Type by extension and a strong ETag (the compression
//! benchmark's corpus, bench/harness/compress.py). Only paths of `[A-Za-z0-9._@+/-]` are served.

use bytes::Bytes;
use std::collections::HashMap;
use std::io;
use std::path::Path;

/// One file: its body, media type and strong ETag.
pub(crate) struct File {
    pub body: Bytes,
    pub content_type: &'static str,
    pub etag: String,
}

/// The files of a directory, by URL path (`/files/a/b.js`).
#[derive(Default)]
pub(crate) struct Files(HashMap<String, File>);

/// The prefix of every file's URL path.
pub(crate) const PREFIX: &str = "/files/";

/// The media type of a file name's extension (what a static file server sends).
fn content_type(name: &str) -> &'static str {
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "js" | "mjs" | "cjs" => "application/javascript",
        "css" => "text/css",
        "json" | "map" => "application/json",
        "svg" => "image/svg+xml",
        "html" | "htm" => "text/html; charset=utf-8",
        "xml" => "application/xml",
        "txt" | "md" => "text/plain; charset=utf-8",
        "wasm" => "application/wasm",
        _ => "application/octet-stream",
    }
}

fn servable(rel: &str) -> bool {
    !rel.is_empty()
        && rel
            .split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..")
        && rel.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'@' | b'+' | b'/' | b'-')
        })
}

/// FNV-1a, 64 bits: the ETag's content hash.
fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Files {
    /// Every regular file under `dir` whose relative path is servable.
    pub(crate) fn load(dir: &Path) -> io::Result<Files> {
        let mut out = HashMap::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d)? {
                let entry = entry?;
                let path = entry.path();
                let kind = entry.file_type()?;
                if kind.is_dir() {
                    stack.push(path);
                    continue;
                }
                if !kind.is_file() {
                    continue;
                }
                let Some(rel) = path
                    .strip_prefix(dir)
                    .ok()
                    .and_then(|r| r.to_str())
                    .map(str::to_owned)
                else {
                    continue;
                };
                if !servable(&rel) {
                    continue;
                }
                let body = std::fs::read(&path)?;
                let etag = format!("\"{:x}-{:016x}\"", body.len(), fnv(&body));
                out.insert(
                    format!("{PREFIX}{rel}"),
                    File {
                        content_type: content_type(&rel),
                        etag,
                        body: Bytes::from(body),
                    },
                );
            }
        }
        Ok(Files(out))
    }

    pub(crate) fn get(&self, path: &str) -> Option<&File> {
        self.0.get(path)
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn types_and_paths() {
        assert_eq!(content_type("a/b.min.js"), "application/javascript");
        assert_eq!(content_type("x.CSS"), "text/css");
        assert_eq!(content_type("noext"), "application/octet-stream");
        assert!(servable("react-dom@19.0.0/cjs/react-dom.development.js"));
        assert!(!servable("a/../b.js"));
        assert!(!servable("a b.js"));
        assert!(!servable("/a.js"));
    }
}
