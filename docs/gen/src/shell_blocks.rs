//! The fenced blocks of a markdown page and what the HTML comment on the line before each says
//! about testing it. For the shell blocks (fences tagged `sh`, `bash` or `shell`):
//!
//! - `<!-- test: run -->`: cheap and self-contained, the docs test runs it;
//! - `<!-- needs: WHAT -->` (a cluster, root, a running origin, ...): the test checks its syntax
//!   with `bash -n` only;
//! - nothing: the docs test fails, naming the block, until one of the two is added.
//!
//! Other blocks may carry `<!-- test: WHAT -->` too (a YAML block: `check-config`, `render`, or
//! `in FILE` for a copy of part of a file).

/// What the comment before a block says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marker {
    /// `<!-- test: WHAT -->`.
    Test(String),
    /// `<!-- needs: WHAT -->`.
    Needs(String),
    Unmarked,
}

/// One fenced block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// 1-based line of the opening fence.
    pub line: usize,
    /// The fence's info string (`sh`, `yaml`, empty).
    pub lang: String,
    pub marker: Marker,
    pub script: String,
}

impl Block {
    /// A block a newcomer would paste into a shell.
    pub fn is_shell(&self) -> bool {
        matches!(self.lang.as_str(), "sh" | "bash" | "shell")
    }
}

/// Every shell block of `markdown`, in order.
pub fn shell_blocks(markdown: &str) -> Vec<Block> {
    blocks(markdown)
        .into_iter()
        .filter(Block::is_shell)
        .collect()
}

/// Every fenced block of `markdown`, in order.
pub fn blocks(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines = markdown.lines().enumerate().peekable();
    let mut previous = "";
    while let Some((i, line)) = lines.next() {
        let trimmed = line.trim_start();
        let Some(info) = trimmed.strip_prefix("```") else {
            if !trimmed.is_empty() {
                previous = trimmed;
            }
            continue;
        };
        let indent = line.len() - trimmed.len();
        let mut script = String::new();
        for (_, body) in lines.by_ref() {
            if body.trim_start().starts_with("```") {
                break;
            }
            script.push_str(body.get(indent..).unwrap_or(body.trim_start()));
            script.push('\n');
        }
        blocks.push(Block {
            line: i + 1,
            lang: info.trim().to_string(),
            marker: marker(previous),
            script,
        });
        previous = "";
    }
    blocks
}

fn marker(line: &str) -> Marker {
    let Some(inner) = line
        .strip_prefix("<!--")
        .and_then(|l| l.strip_suffix("-->"))
        .map(str::trim)
    else {
        return Marker::Unmarked;
    };
    let what = |prefix: &str| {
        inner
            .strip_prefix(prefix)
            .map(str::trim)
            .filter(|w| !w.is_empty())
            .map(str::to_string)
    };
    match (what("test:"), what("needs:")) {
        (Some(test), _) => Marker::Test(test),
        (None, Some(needs)) => Marker::Needs(needs),
        (None, None) => Marker::Unmarked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_carry_the_marker_of_the_comment_before_them() {
        let md = "# T\n\n<!-- test: run -->\n```sh\necho a\n```\n\ntext\n\n```bash\necho b\n```\n\
                  <!-- needs: cluster -->\n\n1. Step\n\n   ```sh\n   kubectl get ec\n   ```\n\
                  ```yaml\na: 1\n```\n";
        let got = shell_blocks(md);
        assert_eq!(
            got,
            [
                Block {
                    line: 4,
                    lang: "sh".into(),
                    marker: Marker::Test("run".into()),
                    script: "echo a\n".into()
                },
                Block {
                    line: 10,
                    lang: "bash".into(),
                    marker: Marker::Unmarked,
                    script: "echo b\n".into()
                },
                Block {
                    line: 17,
                    lang: "sh".into(),
                    marker: Marker::Unmarked,
                    script: "kubectl get ec\n".into()
                },
            ]
        );
        let md =
            "<!-- needs: a cluster -->\n```sh\nx\n```\n<!-- test: render -->\n```yaml\na: 1\n```\n";
        assert_eq!(
            shell_blocks(md)[0].marker,
            Marker::Needs("a cluster".into())
        );
        let all = blocks(md);
        assert_eq!(
            (all[1].lang.as_str(), &all[1].marker),
            ("yaml", &Marker::Test("render".into()))
        );
    }
}
