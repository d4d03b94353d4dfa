//! Compiles bpf/steer.bpf.c with clang into OUT_DIR/steer.bpf.o, which src/bpf.rs embeds.

use std::env;
use std::path::PathBuf;
use std::process::Command;

const SOURCE: &str = "bpf/steer.bpf.c";
const INSTALL: &str = "apt-get install -y clang-19 libbpf-dev";

fn main() {
    println!("cargo:rerun-if-changed={SOURCE}");
    println!("cargo:rerun-if-env-changed=CLANG");
    let Some(out_dir) = env::var_os("OUT_DIR").map(PathBuf::from) else {
        fail("OUT_DIR is not set (build.rs must run under cargo)");
    };
    let out = out_dir.join("steer.bpf.o");

    let candidates: Vec<String> = match env::var("CLANG") {
        Ok(c) if !c.is_empty() => vec![c],
        _ => vec!["clang-19".into(), "clang".into()],
    };
    let Some(clang) = candidates.iter().find(|c| {
        Command::new(c.as_str())
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }) else {
        fail(&format!(
            "no clang found (tried {}). The eBPF steering program is C compiled by clang; \
             install it with `{INSTALL}` (Debian/Ubuntu), or set CLANG=/path/to/clang",
            candidates.join(", ")
        ));
    };

    let mut cmd = Command::new(clang);
    cmd.args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"]);
    // Debian puts asm/types.h under the multiarch include directory.
    for dir in [
        "/usr/include/x86_64-linux-gnu",
        "/usr/include/aarch64-linux-gnu",
    ] {
        if std::path::Path::new(dir).is_dir() {
            cmd.arg(format!("-I{dir}"));
        }
    }
    cmd.arg("-c").arg(SOURCE).arg("-o").arg(&out);
    match cmd.output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            let stderr = String::from_utf8_lossy(&o.stderr);
            let hint = if stderr.contains("bpf/bpf_helpers.h") {
                format!(" (libbpf headers missing: `{INSTALL}`)")
            } else {
                String::new()
            };
            fail(&format!(
                "{clang} failed to compile {SOURCE}{hint}:\n{stderr}"
            ));
        }
        Err(e) => fail(&format!(
            "cannot run {clang}: {e}; install it with `{INSTALL}`"
        )),
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("error: edgecache-steering: {msg}");
    println!("cargo:warning=edgecache-steering: {msg}");
    std::process::exit(1);
}
