//! `module-graph [--edges] [DIR ...]`: the module graph of each crate in DIR (a crate's
//! directory, or a directory of crates; default: the repository's dataplane/), its circles, and
//! the graph of the crates. `--edges` lists every edge between top-level modules too.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut edges = false;
    let mut dirs = Vec::new();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--edges" => edges = true,
            "-h" | "--help" => {
                println!("module-graph [--edges] [DIR ...]  (default: dataplane/)");
                return ExitCode::SUCCESS;
            }
            _ => dirs.push(PathBuf::from(arg)),
        }
    }
    if dirs.is_empty() {
        dirs.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../dataplane"));
    }
    let mut crates = Vec::new();
    for dir in &dirs {
        match edgecache_module_graph::crates_under(dir) {
            Ok(found) => crates.extend(found),
            Err(e) => {
                eprintln!("module-graph: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    print!("{}", edgecache_module_graph::report(&crates, edges));
    ExitCode::SUCCESS
}
