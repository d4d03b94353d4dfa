//! The module graph of a crate, read from its source as text: the modules are the files its
//! `mod NAME;` declarations reach from `src/lib.rs` or `src/main.rs`; an edge goes from one module
//! to another when its code names a path into it (`crate::a::b`, `super::x`, `self::y`, `use`
//! trees, or a child module by its name), comments and string literals left out. A circle is a
//! strongly connected component of more than one module: modules that all reach each other.
//!
//! Two views: [`Target::files`] has a node per file module (`handler::fill`), and
//! [`Target::top`] folds each into its top-level module (`handler`), the view of the check
//! (tests/circles.rs): a child module naming its parent's items (`use super::*`) is one piece of
//! code, not a circle worth a crate boundary.
//!
//! The crates' own graph comes from their Cargo.toml: `[dependencies]`, `[dev-dependencies]`
//! and `[build-dependencies]` on other crates read here (cargo refuses a circle of normal
//! dependencies, not one closed by a dev-dependency).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A module's path from its crate's root: empty for the root itself.
pub type ModPath = Vec<String>;

/// Edges between named nodes.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// One crate read from its directory.
#[derive(Debug)]
pub struct Crate {
    /// Its package name.
    pub name: String,
    pub dir: PathBuf,
    /// The other crates it depends on (normal, dev and build), by package name.
    pub deps: BTreeSet<String>,
    /// Its library and its binary (`src/lib.rs`, `src/main.rs`), those it has.
    pub targets: Vec<Target>,
}

/// The module graph of one target of a crate.
#[derive(Debug)]
pub struct Target {
    /// The root file, relative to the crate's directory (`src/main.rs`).
    pub root: PathBuf,
    /// A node per file module (`handler::fill`; the root is `crate`).
    pub files: Graph,
    /// A node per top-level module (the root is `crate`).
    pub top: Graph,
}

/// The name of a module in a graph.
pub fn node_name(path: &[String]) -> String {
    if path.is_empty() {
        "crate".to_string()
    } else {
        path.join("::")
    }
}

/// Every edge of `graph`.
pub fn edge_count(graph: &Graph) -> usize {
    graph.values().map(BTreeSet::len).sum()
}

/// The circles of `graph` (strongly connected components of two nodes or more), the largest
/// first, each sorted by name.
pub fn circles(graph: &Graph) -> Vec<Vec<String>> {
    struct Tarjan<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.out.push(component);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
    t.out
}

/// The crates under `dir`: `dir` itself when it has a Cargo.toml with a package, else each of
/// its subdirectories that has one (sorted by name).
pub fn crates_under(dir: &Path) -> Result<Vec<Crate>, String> {
    if is_package(dir) {
        return Ok(vec![read_crate(dir)?]);
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_package(p))
        .collect();
    dirs.sort();
    dirs.iter().map(|d| read_crate(d)).collect()
}

fn is_package(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|t| t.contains("[package]"))
}

/// One crate: its manifest and the module graph of each of its targets.
pub fn read_crate(dir: &Path) -> Result<Crate, String> {
    let manifest_path = dir.join("Cargo.toml");
    let manifest = std::fs::read_to_string(&manifest_path)
        .map_err(|e| format!("{}: {e}", manifest_path.display()))?;
    let (name, deps) = manifest_deps(&manifest);
    let name = name.ok_or_else(|| format!("{}: no package name", manifest_path.display()))?;
    let mut targets = Vec::new();
    for root in ["src/lib.rs", "src/main.rs"] {
        if dir.join(root).is_file() {
            targets.push(read_target(dir, Path::new(root))?);
        }
    }
    Ok(Crate {
        name,
        dir: dir.to_path_buf(),
        deps,
        targets,
    })
}

/// The package name of a manifest and the names of its dependencies (every kind).
pub fn manifest_deps(manifest: &str) -> (Option<String>, BTreeSet<String>) {
    let mut name = None;
    let mut deps = BTreeSet::new();
    let mut section = String::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some(s) = line.strip_prefix('[') {
            section = s.trim_end_matches(']').trim().to_string();
            // `[dependencies.NAME]`
            for kind in ["dependencies.", "dev-dependencies.", "build-dependencies."] {
                if let Some(dep) = section_after(&section, kind) {
                    deps.insert(dep.trim_matches('"').to_string());
                }
            }
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if section == "package" && key == "name" {
            name = Some(value.trim().trim_matches('"').to_string());
        }
        let is_deps = ["dependencies", "dev-dependencies", "build-dependencies"]
            .iter()
            .any(|k| section == *k || section.ends_with(&format!(".{k}")));
        if is_deps {
            let dep = key
                .split('.')
                .next()
                .unwrap_or(key)
                .trim()
                .trim_matches('"');
            deps.insert(dep.to_string());
        }
    }
    (name, deps)
}

fn section_after<'a>(section: &'a str, kind: &str) -> Option<&'a str> {
    let at = section.find(kind)?;
    let before = &section[..at];
    (before.is_empty() || before.ends_with('.')).then(|| &section[at + kind.len()..])
}

/// The crate graph of `crates`: each one's dependencies among them.
pub fn crate_graph(crates: &[Crate]) -> Graph {
    let names: BTreeSet<&str> = crates.iter().map(|c| c.name.as_str()).collect();
    crates
        .iter()
        .map(|c| {
            let deps = c
                .deps
                .iter()
                .filter(|d| names.contains(d.as_str()) && **d != c.name)
                .cloned()
                .collect();
            (c.name.clone(), deps)
        })
        .collect()
}

/// The module graph of the target whose root file is `root` (relative to `dir`).
pub fn read_target(dir: &Path, root: &Path) -> Result<Target, String> {
    // The file modules, from the `mod NAME;` declarations.
    let mut modules: BTreeMap<ModPath, PathBuf> = BTreeMap::new();
    let mut sources: BTreeMap<ModPath, Vec<Tok>> = BTreeMap::new();
    let mut todo = vec![(ModPath::new(), dir.join(root), true)];
    while let Some((path, file, owns_dir)) = todo.pop() {
        let text =
            std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let toks = tokens(&text);
        // A root or mod.rs file's children are beside it; a.rs's are in a/.
        let base = if owns_dir {
            file.parent().map(Path::to_path_buf).unwrap_or_default()
        } else {
            file.with_extension("")
        };
        for (inline, child) in declared_children(&toks) {
            let mut child_path = path.clone();
            child_path.extend(inline.iter().cloned());
            child_path.push(child.clone());
            let mut child_dir = base.clone();
            child_dir.extend(inline.iter());
            let flat = child_dir.join(format!("{child}.rs"));
            let nested = child_dir.join(&child).join("mod.rs");
            if flat.is_file() {
                todo.push((child_path, flat, false));
            } else if nested.is_file() {
                todo.push((child_path, nested, true));
            }
        }
        let rel = file.strip_prefix(dir).unwrap_or(&file).to_path_buf();
        modules.insert(path.clone(), rel);
        sources.insert(path, toks);
    }
    // The root's imports first: `crate::NAME` may name a module through them.
    let mut aliases: BTreeMap<String, Option<ModPath>> = BTreeMap::new();
    let mut root_refs = Vec::new();
    if let Some(toks) = sources.get(&ModPath::new()) {
        root_refs = references(
            &ModPath::new(),
            toks,
            &modules,
            &BTreeMap::new(),
            &mut aliases,
        );
    }
    let mut files = Graph::new();
    let mut top = Graph::new();
    for path in modules.keys() {
        files.entry(node_name(path)).or_default();
        top.entry(node_name(&path[..path.len().min(1)]))
            .or_default();
    }
    for (path, toks) in &sources {
        let refs = if path.is_empty() {
            std::mem::take(&mut root_refs)
        } else {
            references(path, toks, &modules, &aliases, &mut BTreeMap::new())
        };
        for target in refs {
            let to = owning_module(&target, &modules);
            if to != *path {
                files
                    .entry(node_name(path))
                    .or_default()
                    .insert(node_name(&to));
            }
            let (from_top, to_top) = (&path[..path.len().min(1)], &to[..to.len().min(1)]);
            if from_top != to_top {
                top.entry(node_name(from_top))
                    .or_default()
                    .insert(node_name(to_top));
            }
        }
    }
    Ok(Target {
        root: root.to_path_buf(),
        files,
        top,
    })
}

/// The file module an absolute path leads into: its longest prefix that is one.
fn owning_module(target: &[String], modules: &BTreeMap<ModPath, PathBuf>) -> ModPath {
    (0..=target.len())
        .rev()
        .map(|n| target[..n].to_vec())
        .find(|p| modules.contains_key(p))
        .unwrap_or_default()
}

/// A token of Rust source, as much as the graph needs: comments, literals and lifetimes are
/// left out.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
}

fn tokens(src: &str) -> Vec<Tok> {
    let b: Vec<char> = src.chars().collect();
    let at = |i: usize| b.get(i).copied().unwrap_or('\0');
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' {
            i = skip_string(&b, i);
        } else if c == '\'' {
            if at(i + 1) == '\\' {
                // '\n', '\'', '\u{..}': past the escaped character, then to the closing quote
                i += 3;
                while i < b.len() && b[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                // a lifetime or a label: its name is read as an identifier
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
                i += 1;
            }
            let word: String = b[start..i].iter().collect();
            if matches!(word.as_str(), "r" | "br" | "cr") && matches!(at(i), '"' | '#') {
                let mut hashes = 0;
                let mut j = i;
                while at(j) == '#' {
                    hashes += 1;
                    j += 1;
                }
                if at(j) == '"' {
                    j += 1;
                    while j < b.len() {
                        if b[j] == '"' && (0..hashes).all(|k| at(j + 1 + k) == '#') {
                            j += 1 + hashes;
                            break;
                        }
                        j += 1;
                    }
                    i = j;
                    continue;
                }
            }
            if matches!(word.as_str(), "b" | "c") && at(i) == '"' {
                i = skip_string(&b, i);
                continue;
            }
            out.push(Tok::Ident(word));
        } else if c.is_ascii_digit() {
            while i < b.len()
                && (b[i].is_alphanumeric()
                    || b[i] == '_'
                    || (b[i] == '.' && at(i + 1).is_ascii_digit()))
            {
                i += 1;
            }
        } else if c == ':' && at(i + 1) == ':' {
            out.push(Tok::PathSep);
            i += 2;
        } else {
            out.push(Tok::Punct(c));
            i += 1;
        }
    }
    out
}

/// Past the string literal that opens at `i`.
fn skip_string(b: &[char], mut i: usize) -> usize {
    i += 1;
    while i < b.len() {
        match b[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

fn ident(t: Option<&Tok>) -> Option<&str> {
    match t {
        Some(Tok::Ident(s)) => Some(s),
        _ => None,
    }
}

/// Tracks the inline modules (`mod tests { .. }`) a position is in.
#[derive(Default)]
struct Nesting {
    depth: usize,
    /// Each open inline module and the depth inside it.
    open: Vec<(String, usize)>,
    /// An inline module whose `{` comes next.
    pending: Option<String>,
}

impl Nesting {
    /// Takes token `i` into account.
    fn step(&mut self, toks: &[Tok], i: usize) {
        match &toks[i] {
            Tok::Ident(w)
                if w == "mod"
                    && toks.get(i + 2) == Some(&Tok::Punct('{'))
                    && ident(toks.get(i + 1)).is_some() =>
            {
                self.pending = ident(toks.get(i + 1)).map(str::to_string);
            }
            Tok::Punct('{') => {
                self.depth += 1;
                if let Some(name) = self.pending.take() {
                    self.open.push((name, self.depth));
                }
            }
            Tok::Punct('}') => {
                if self.open.last().is_some_and(|(_, d)| *d == self.depth) {
                    self.open.pop();
                }
                self.depth = self.depth.saturating_sub(1);
            }
            _ => {}
        }
    }

    fn names(&self) -> Vec<String> {
        self.open.iter().map(|(n, _)| n.clone()).collect()
    }
}

/// The `mod NAME;` declarations of a file, each with the inline modules it is in.
fn declared_children(toks: &[Tok]) -> Vec<(Vec<String>, String)> {
    let mut nesting = Nesting::default();
    let mut out = Vec::new();
    for i in 0..toks.len() {
        if toks[i] == Tok::Ident("mod".into())
            && toks.get(i + 2) == Some(&Tok::Punct(';'))
            && let Some(name) = ident(toks.get(i + 1))
        {
            out.push((nesting.names(), name.to_string()));
        }
        nesting.step(toks, i);
    }
    out
}

/// The absolute paths a file (module `path`) names in its crate. `aliases` are the root's
/// imports (`None`: from another crate); in the root file they are collected into
/// `root_aliases` instead.
fn references(
    path: &ModPath,
    toks: &[Tok],
    modules: &BTreeMap<ModPath, PathBuf>,
    aliases: &BTreeMap<String, Option<ModPath>>,
    root_aliases: &mut BTreeMap<String, Option<ModPath>>,
) -> Vec<ModPath> {
    let mut out = Vec::new();
    let mut nesting = Nesting::default();
    let mut i = 0;
    while i < toks.len() {
        let mut here = path.clone();
        here.extend(nesting.names());
        let prev = i.checked_sub(1).map(|p| &toks[p]);
        let after_path = matches!(prev, Some(Tok::PathSep | Tok::Punct('$' | '.')));
        let resolve = |raw: &[String]| resolve(&here, raw, modules, aliases);
        match &toks[i] {
            Tok::Ident(w) if w == "use" && !after_path => {
                let mut leaves = Vec::new();
                let end = use_tree(toks, i + 1, &mut Vec::new(), &mut leaves);
                for (raw, bound) in leaves {
                    match resolve(&raw) {
                        Some(abs) => {
                            if path.is_empty() && nesting.depth == 0 {
                                root_aliases.insert(bound, Some(abs.clone()));
                            }
                            out.push(abs);
                        }
                        None => {
                            let local = matches!(raw[0].as_str(), "crate" | "self" | "super");
                            if path.is_empty() && nesting.depth == 0 && !local {
                                root_aliases.insert(bound, None);
                            }
                        }
                    }
                }
                for j in i..end.min(toks.len()) {
                    nesting.step(toks, j);
                }
                i = end;
                continue;
            }
            Tok::Ident(w) if !after_path && toks.get(i + 1) == Some(&Tok::PathSep) => {
                let starts = matches!(w.as_str(), "crate" | "self" | "super") || {
                    let mut child = here.clone();
                    child.push(w.clone());
                    modules.contains_key(&child)
                };
                if starts {
                    let mut raw = vec![w.clone()];
                    let mut j = i + 1;
                    while toks.get(j) == Some(&Tok::PathSep)
                        && let Some(seg) = ident(toks.get(j + 1))
                    {
                        raw.push(seg.to_string());
                        j += 2;
                    }
                    if let Some(abs) = resolve(&raw) {
                        out.push(abs);
                    }
                }
            }
            _ => {}
        }
        nesting.step(toks, i);
        i += 1;
    }
    out
}

/// Reads the use tree at `i` (after `use`, or inside braces), adding each leaf (its segments
/// from the tree's start, and the name it binds); returns the position after the tree.
fn use_tree(
    toks: &[Tok],
    mut i: usize,
    prefix: &mut Vec<String>,
    leaves: &mut Vec<(Vec<String>, String)>,
) -> usize {
    let start_len = prefix.len();
    if toks.get(i) == Some(&Tok::PathSep) {
        // `use ::name`: another crate's
        prefix.push("::".into());
        i += 1;
    }
    loop {
        match toks.get(i) {
            Some(Tok::Ident(seg)) => {
                let seg = seg.clone();
                i += 1;
                if toks.get(i) == Some(&Tok::PathSep) {
                    prefix.push(seg);
                    i += 1;
                    continue;
                }
                let mut bound = seg.clone();
                if ident(toks.get(i)) == Some("as") {
                    bound = ident(toks.get(i + 1)).unwrap_or("_").to_string();
                    i += 2;
                }
                let mut path = prefix.clone();
                if seg != "self" {
                    path.push(seg);
                } else if let Some(last) = prefix.last() {
                    bound = last.clone();
                }
                if !path.is_empty() {
                    leaves.push((path, bound));
                }
                break;
            }
            Some(Tok::Punct('*')) => {
                i += 1;
                if !prefix.is_empty() {
                    leaves.push((prefix.clone(), "*".into()));
                }
                break;
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                loop {
                    match toks.get(i) {
                        Some(Tok::Punct('}')) => {
                            i += 1;
                            break;
                        }
                        Some(Tok::Punct(',')) => i += 1,
                        None => break,
                        Some(_) => {
                            let next = use_tree(toks, i, prefix, leaves);
                            i = next.max(i + 1);
                        }
                    }
                }
                break;
            }
            _ => break,
        }
    }
    prefix.truncate(start_len);
    // The end of the statement, for the outermost tree.
    if start_len == 0 && toks.get(i) == Some(&Tok::Punct(';')) {
        i += 1;
    }
    i
}

/// The absolute path a path written in module `here` names in its crate, if it is one of the
/// crate's own.
fn resolve(
    here: &ModPath,
    raw: &[String],
    modules: &BTreeMap<ModPath, PathBuf>,
    aliases: &BTreeMap<String, Option<ModPath>>,
) -> Option<ModPath> {
    let first = raw.first()?;
    let mut abs: ModPath;
    let mut rest = &raw[1..];
    match first.as_str() {
        "crate" => {
            abs = Vec::new();
            // `crate::NAME` where NAME is one of the root's imports
            if let Some(name) = rest.first()
                && !modules.contains_key(std::slice::from_ref(name))
                && let Some(alias) = aliases.get(name)
            {
                abs = alias.clone()?;
                rest = &rest[1..];
            }
        }
        "self" => abs = here.clone(),
        "super" => {
            abs = here.clone();
            abs.pop();
            while rest.first().is_some_and(|s| s == "super") {
                abs.pop();
                rest = &rest[1..];
            }
        }
        name => {
            let mut child = here.clone();
            child.push(name.to_string());
            if !modules.contains_key(&child) {
                return None;
            }
            abs = child;
        }
    }
    abs.extend(rest.iter().cloned());
    Some(abs)
}

/// A report of crates: each target's modules, edges and circles, and the crates' graph.
pub fn report(crates: &[Crate], with_edges: bool) -> String {
    let mut s = String::new();
    for c in crates {
        for t in &c.targets {
            let modules = t.top.len().saturating_sub(1);
            let _ = writeln!(
                s,
                "{} ({}, {}): {} top-level modules ({} files), {} edges between them",
                c.name,
                c.dir.display(),
                t.root.display(),
                modules,
                t.files.len(),
                edge_count(&t.top),
            );
            let found = circles(&t.top);
            if found.is_empty() {
                let _ = writeln!(s, "  no circle");
            }
            for circle in found {
                let _ = writeln!(s, "  circle of {}: {}", circle.len(), circle.join(" "));
            }
            let file_circles = circles(&t.files);
            if let Some(biggest) = file_circles.first() {
                let _ = writeln!(
                    s,
                    "  (file modules: {} edges, biggest circle {})",
                    edge_count(&t.files),
                    biggest.len()
                );
            }
            if with_edges {
                for (from, to) in &t.top {
                    let to: Vec<&str> = to.iter().map(String::as_str).collect();
                    let _ = writeln!(s, "    {from} -> {}", to.join(" "));
                }
            }
        }
    }
    let graph = crate_graph(crates);
    let _ = writeln!(s, "crates:");
    for (from, to) in &graph {
        let to: Vec<&str> = to.iter().map(String::as_str).collect();
        let _ = writeln!(s, "  {from} -> {}", to.join(" "));
    }
    let found = circles(&graph);
    if found.is_empty() {
        let _ = writeln!(s, "  no circle between crates");
    }
    for circle in found {
        let _ = writeln!(s, "  crate circle: {}", circle.join(" "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idents(src: &str) -> Vec<String> {
        tokens(src)
            .into_iter()
            .filter_map(|t| match t {
                Tok::Ident(s) => Some(s),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn comments_strings_and_chars_are_not_code() {
        let src = r###"// crate::one
/* crate::two /* nested */ crate::three */
let s = "crate::four \" crate::five"; let r = r#"crate::six " "#; let c = '"'; let q = '\'';
fn f<'a>(x: &'a str) {} let u = '\u{1F600}'; let b = b"crate::seven"; crate::eight"###;
        let ids = idents(src);
        assert!(ids.contains(&"eight".to_string()), "{ids:?}");
        assert!(ids.contains(&"c".to_string()), "{ids:?}");
        for hidden in ["one", "two", "three", "four", "five", "six", "seven"] {
            assert!(!ids.contains(&hidden.to_string()), "{hidden} in {ids:?}");
        }
    }

    #[test]
    fn use_trees_and_paths() {
        let mut modules = BTreeMap::new();
        for m in [&[][..], &["a"], &["b"], &["b", "c"], &["d"]] {
            let p: ModPath = m.iter().map(|s| s.to_string()).collect();
            modules.insert(p, PathBuf::new());
        }
        let here: ModPath = vec!["b".into()];
        let toks = tokens(
            "use crate::{a::X, d::{self, Y as Z}}; use super::a; fn f() { c::g(); self::c::h(); x.c::<u8>(); }",
        );
        let refs = references(
            &here,
            &toks,
            &modules,
            &BTreeMap::new(),
            &mut BTreeMap::new(),
        );
        let names: Vec<String> = refs.iter().map(|r| node_name(r)).collect();
        assert_eq!(names, ["a::X", "d", "d::Y", "a", "b::c::g", "b::c::h"]);
    }

    #[test]
    fn root_imports_of_other_crates_are_not_edges() {
        let modules: BTreeMap<ModPath, PathBuf> = [
            (vec![], PathBuf::new()),
            (vec!["m".to_string()], PathBuf::new()),
        ]
        .into();
        let mut aliases = BTreeMap::new();
        references(
            &vec![],
            &tokens("use other::metrics; use m::Item;"),
            &modules,
            &BTreeMap::new(),
            &mut aliases,
        );
        assert_eq!(aliases["metrics"], None);
        let m = vec!["m".to_string()];
        let refs = references(
            &m,
            &tokens("fn f() { crate::metrics::x(); crate::Item::new(); }"),
            &modules,
            &aliases,
            &mut BTreeMap::new(),
        );
        assert_eq!(refs, [vec!["m".to_string(), "Item".into(), "new".into()]]);
    }

    #[test]
    fn circles_are_strongly_connected_components() {
        let mut g = Graph::new();
        for (a, b) in [
            ("a", "b"),
            ("b", "c"),
            ("c", "a"),
            ("c", "d"),
            ("d", "e"),
            ("e", "d"),
        ] {
            g.entry(a.into()).or_default().insert(b.into());
            g.entry(b.into()).or_default();
        }
        assert_eq!(circles(&g), [vec!["a", "b", "c"], vec!["d", "e"]]);
    }

    #[test]
    fn manifests() {
        let (name, deps) = manifest_deps(
            "[package]\nname = \"x\"\n[dependencies]\na.workspace = true\nb = { path = \"b\" }\n\
             [dev-dependencies]\nc = \"1\"\n[target.'cfg(unix)'.dependencies]\nd = \"1\"\n\
             [dependencies.e]\nversion = \"1\"\n[lints]\nworkspace = true\n",
        );
        assert_eq!(name.as_deref(), Some("x"));
        assert_eq!(
            deps.into_iter().collect::<Vec<_>>(),
            ["a", "b", "c", "d", "e"]
        );
    }
}
