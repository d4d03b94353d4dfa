//! The markdown of EdgeCache's generated reference pages (`docs/reference/*.md`), shared by the
//! binaries that own the data: each binary walks its own types and registries
//! (`edgecache-dataplane reference ...`, `edgecache-operator reference ...`) and this crate only
//! formats what they hand it, so a page cannot say anything the code does not.
//!
//! - [`schema`]: a JSON schema (the data-plane config's, a CRD's) as a table of fields.
//! - [`cli`]: a clap command and its subcommands as their `--help` texts.
//! - [`metrics`]: a Prometheus text exposition as a table of metric families.
//! - [`page`]: the generated-page header and the drift check's message.
//! - [`shell_blocks`]: the shell blocks of a markdown page, for the test that runs them.

pub mod cli;
pub mod metrics;
pub mod page;
pub mod schema;
pub mod shell_blocks;
