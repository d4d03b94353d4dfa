//! The runtime stage of a Dockerfile, normalised so the shipped multi-stage build and the local
//! (no-pull) build can be compared instruction by instruction.

/// One instruction with its continuation lines joined, comments dropped.
fn instructions(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let t = line.trim();
        if cur.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if let Some(body) = t.strip_suffix('\\') {
            cur.push_str(body.trim_end());
            cur.push(' ');
        } else {
            cur.push_str(t);
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The runtime stage: the instructions after the last `FROM`, with `COPY --from=STAGE /dir/BIN`
/// and `COPY BIN` both written `COPY BIN`, and whitespace collapsed.
pub fn runtime_stage(text: &str) -> Vec<String> {
    let all = instructions(text);
    let start = all
        .iter()
        .rposition(|i| i.to_ascii_uppercase().starts_with("FROM "))
        .map_or(0, |p| p + 1);
    all[start..]
        .iter()
        .map(|i| {
            let words: Vec<&str> = i.split_whitespace().collect();
            if words
                .first()
                .is_some_and(|w| w.eq_ignore_ascii_case("COPY"))
            {
                let rest: Vec<String> = words[1..]
                    .iter()
                    .filter(|w| !w.starts_with("--from="))
                    .enumerate()
                    .map(|(n, w)| {
                        if n == 0 {
                            w.rsplit('/').next().unwrap_or(w).to_string()
                        } else {
                            (*w).to_string()
                        }
                    })
                    .collect();
                format!("COPY {}", rest.join(" "))
            } else {
                words.join(" ")
            }
        })
        .collect()
}

/// The image of the last `FROM`.
pub fn runtime_base(text: &str) -> Option<String> {
    instructions(text)
        .into_iter()
        .rfind(|i| i.to_ascii_uppercase().starts_with("FROM "))
        .and_then(|i| i.split_whitespace().nth(1).map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_from_a_stage_and_from_the_context_normalise_alike() {
        let a = "FROM x AS b\nRUN y\nFROM base\n# c\nCOPY --from=b /out/bin /usr/bin/bin\nUSER 1 \\\n  # x\n";
        let b = "ARG BASE=z\nFROM ${BASE}\nCOPY bin /usr/bin/bin\nUSER 1\n";
        assert_eq!(runtime_stage(a)[0], runtime_stage(b)[0]);
        assert_eq!(runtime_base(a).as_deref(), Some("base"));
        assert_eq!(runtime_base(b).as_deref(), Some("${BASE}"));
    }
}
