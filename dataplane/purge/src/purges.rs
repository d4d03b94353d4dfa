//! Purges by prefix, tag or everything, soft or hard, without scanning the store: each purge is
//! a rule (a Varnish ban) checked at lookup against the stored response's URL, tags and the
//! time it was received. A rule takes effect at once for every object it names, however many;
//! a hard rule's objects are removed from the store as lookups meet them, and a rule is dropped
//! once every segment that was being written when it came has been reclaimed (nothing older
//! than it is left on disk). Rules are kept in `purges.jsonl` in the cache directory (written
//! and fsynced before the call is answered), so a restart keeps them; a purge's id makes a
//! repeated call (the operator retrying) a no-op.
//!
//! A lookup reads an [`Index`] of the rules (URLs and tags in hash maps, prefixes in a radix
//! trie), so its cost does not grow with the number of rules, and never waits for a purge
//! being written: a purge writes the file under a lock of its own, then swaps the new index in.
//! The number of rules is bounded (`cache.maxPurgeRules`), and a rule's time is checked where it
//! enters: not ahead of this node's clock by more than [`MAX_CLOCK_SKEW`], not before the epoch.
//!
//! A URL purge removes that URL's variants at once (tombstones on disk); a soft URL purge is a
//! rule like the others. What is pure here ([`check_at`], [`parse_query`], [`Index`], checked
//! against a rule-by-rule scan) is unit-tested; the proxy asks [`Purges::verdict`] after it
//! selected a stored response.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use edgecache_policy::StoredResponse;
use serde::{Deserialize, Serialize};
use tracing::warn;

/// The file the rules are kept in, in the cache directory.
pub const FILE: &str = "purges.jsonl";
/// Response header fields that carry an object's tags (space or comma separated).
pub const TAG_FIELDS: [&str; 2] = ["surrogate-key", "cache-tag"];
/// How far ahead of this node's clock a purge's `at` may be: the operator's clock (it sends an
/// EdgeCachePurge's creation time) or another node's may run ahead of this one's. A hard rule
/// removes what is stored until its `at`, so a rule further ahead would turn caching off for
/// what it names until then.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(300);

/// What a rule names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind", content = "value")]
pub enum Selector {
    /// One URL, every variant: the cache key (`http://host/path?query`).
    Url(String),
    /// Every cache key that starts with this (`http://host/path`).
    Prefix(String),
    /// Every object whose Surrogate-Key or Cache-Tag lists this tag.
    Tag(String),
    /// Everything.
    All,
}

/// One purge rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// The purge's id (an EdgeCachePurge's uid, or the caller's).
    pub id: String,
    pub selector: Selector,
    /// Mark stale (revalidate) instead of removing.
    pub soft: bool,
    /// Objects received before this instant (Unix seconds) are purged; later ones are not.
    pub at: u64,
    /// The store's newest segment epoch when the rule came: it can go once the oldest
    /// segment holding data is newer.
    pub epoch: u64,
}

#[cfg(test)]
impl Rule {
    /// Whether the rule names an object stored under `key` with `stored`'s fields and times:
    /// rule by rule, the reference [`Index`] is tested against.
    pub fn matches(&self, key: &str, stored: &StoredResponse) -> bool {
        if secs(stored.response_time()) >= self.at {
            return false;
        }
        match &self.selector {
            Selector::All => true,
            Selector::Url(u) => key == u,
            Selector::Prefix(p) => key.starts_with(p.as_str()),
            Selector::Tag(t) => tags(stored).any(|x| x == t),
        }
    }
}

/// The tags a stored response lists in its Surrogate-Key and Cache-Tag fields.
fn tags(stored: &StoredResponse) -> impl Iterator<Item = &str> {
    TAG_FIELDS.iter().flat_map(move |f| {
        stored
            .headers()
            .get_all(*f)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split([' ', ',']).map(str::trim))
    })
}

/// What the rules say of a stored response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// No rule names it.
    Keep,
    /// A hard rule names it: it is gone (the caller removes it and goes to the origin).
    Remove,
    /// Only soft rules name it: stale from the earliest of them.
    Stale(SystemTime),
}

/// Whether a rule may have the time `at` when it enters at `now`: not ahead of `now` (to the
/// end of its second, as a rule made now is) by more than [`MAX_CLOCK_SKEW`], and a time its
/// verdict can be given at (after the epoch). The error says which.
pub fn check_at(at: u64, now: SystemTime) -> Result<(), String> {
    let latest = (secs(now) + 1).saturating_add(MAX_CLOCK_SKEW.as_secs());
    if at > latest {
        return Err(format!(
            "at: {at} is more than {}s ahead of this node's clock (now {}); the most is {latest}",
            MAX_CLOCK_SKEW.as_secs(),
            secs(now)
        ));
    }
    if stale_from(at).is_none() {
        return Err(format!(
            "at: {at} names no time after the epoch (1 or more)"
        ));
    }
    Ok(())
}

/// Rules cover the whole second they were made in (see [`Purges::apply`]): what a soft rule
/// names is stale from that second's start. `None` when there is no such time.
fn stale_from(at: u64) -> Option<SystemTime> {
    UNIX_EPOCH.checked_add(Duration::from_secs(at.checked_sub(1)?))
}

/// The verdict of `rules` on an object, rule by rule: the reference [`Index::verdict`] is
/// tested against (it answers the same in a time that does not depend on their number).
#[cfg(test)]
pub fn verdict<'a>(
    rules: impl IntoIterator<Item = &'a Rule>,
    key: &str,
    stored: &StoredResponse,
) -> Verdict {
    let mut met = Met::default();
    for r in rules {
        if r.matches(key, stored) {
            met.rule(r.soft, r.at);
        }
    }
    met.verdict()
}

/// What the rules met so far say.
#[derive(Debug, Default)]
struct Met {
    remove: bool,
    /// The earliest time of a soft rule met.
    stale: Option<u64>,
}

impl Met {
    fn rule(&mut self, soft: bool, at: u64) {
        if soft {
            self.stale = Some(self.stale.map_or(at, |s| s.min(at)));
        } else {
            self.remove = true;
        }
    }

    fn verdict(&self) -> Verdict {
        match (self.remove, self.stale) {
            (true, _) => Verdict::Remove,
            // Every rule in force was checked when it entered; were one not, stale since ever
            // is the side that serves no purged content.
            (false, Some(at)) => Verdict::Stale(stale_from(at).unwrap_or(UNIX_EPOCH)),
            (false, None) => Verdict::Keep,
        }
    }
}

/// The times of the rules that name one thing (a URL, a prefix, a tag, everything).
#[derive(Debug, Default)]
struct Times {
    /// The latest time of a hard rule; 0 without one (nothing is received before 0).
    hard: u64,
    /// The times of the soft rules.
    soft: BTreeSet<u64>,
}

impl Times {
    fn add(&mut self, r: &Rule) {
        if r.soft {
            self.soft.insert(r.at);
        } else {
            self.hard = self.hard.max(r.at);
        }
    }

    /// What these rules say of an object received at `received` (Unix seconds): a rule names
    /// what was received before its time.
    fn meet(&self, received: u64, met: &mut Met) {
        if received < self.hard {
            met.rule(false, self.hard);
        }
        if let Some(&at) = self.soft.range(received.saturating_add(1)..).next() {
            met.rule(true, at);
        }
    }
}

/// Byte strings in a radix trie: the entries of all the prefixes of a key are found in one walk
/// down it, in time bounded by the key's length, however many entries there are.
#[derive(Debug)]
struct Trie {
    /// `nodes[0]` is the root.
    nodes: Vec<TrieNode>,
}

#[derive(Debug, Default)]
struct TrieNode {
    /// Edges, each with a non-empty label; no two start with the same byte.
    edges: Vec<(Box<[u8]>, usize)>,
    times: Option<Times>,
}

impl Default for Trie {
    fn default() -> Self {
        Trie {
            nodes: vec![TrieNode::default()],
        }
    }
}

impl Trie {
    fn push(&mut self, node: TrieNode) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    /// The entry of `key`, made when there is none.
    fn entry(&mut self, key: &[u8]) -> &mut Times {
        let (mut n, mut rest) = (0, key);
        while let Some(&first) = rest.first() {
            // Every node index was pushed before it was stored: indexing is in range.
            let found = (self.nodes[n].edges.iter().enumerate())
                .find(|(_, (label, _))| label.first() == Some(&first))
                .map(|(i, (label, child))| (i, common_len(label, rest), label.len(), *child));
            match found {
                None => {
                    let child = self.push(TrieNode::default());
                    self.nodes[n].edges.push((rest.into(), child));
                    n = child;
                    rest = &[];
                }
                Some((_, common, len, child)) if common == len => {
                    n = child;
                    rest = &rest[common..];
                }
                Some((i, common, _, child)) => {
                    // Split the edge where the key leaves it.
                    let label = std::mem::take(&mut self.nodes[n].edges[i].0);
                    let mid = self.push(TrieNode {
                        edges: vec![(label[common..].into(), child)],
                        times: None,
                    });
                    self.nodes[n].edges[i] = (label[..common].into(), mid);
                    n = mid;
                    rest = &rest[common..];
                }
            }
        }
        self.nodes[n].times.get_or_insert_with(Times::default)
    }

    /// Each entry whose string is a prefix of `key` (the empty string included).
    fn each_prefix_of(&self, key: &[u8], mut f: impl FnMut(&Times)) {
        let (mut node, mut rest) = (self.nodes.first(), key);
        while let Some(n) = node {
            if let Some(t) = &n.times {
                f(t);
            }
            let next = rest.first().and_then(|first| {
                n.edges
                    .iter()
                    .find(|(label, _)| label.first() == Some(first))
            });
            node = match next {
                Some((label, child)) if rest.starts_with(label) => {
                    rest = &rest[label.len()..];
                    self.nodes.get(*child)
                }
                _ => None,
            };
        }
    }
}

fn common_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The rules in force, indexed by what they name: a lookup costs a hash of the key, a walk down
/// the prefix trie along it, and a hash per tag the object lists, whatever the number of rules.
#[derive(Debug, Default)]
pub struct Index {
    /// The rules, in the order they came (the file's order).
    rules: Vec<Rule>,
    ids: HashSet<String>,
    all: Times,
    urls: HashMap<String, Times>,
    prefixes: Trie,
    tags: HashMap<String, Times>,
}

impl Index {
    pub fn new(rules: Vec<Rule>) -> Index {
        let mut ix = Index::default();
        for r in &rules {
            ix.ids.insert(r.id.clone());
            let times = match &r.selector {
                Selector::All => &mut ix.all,
                Selector::Url(u) => ix.urls.entry(u.clone()).or_default(),
                Selector::Prefix(p) => ix.prefixes.entry(p.as_bytes()),
                Selector::Tag(t) => ix.tags.entry(t.clone()).or_default(),
            };
            times.add(r);
        }
        ix.rules = rules;
        ix
    }

    /// The verdict of the rules on an object: [`verdict`] over them all.
    pub fn verdict(&self, key: &str, stored: &StoredResponse) -> Verdict {
        if self.rules.is_empty() {
            return Verdict::Keep;
        }
        let received = secs(stored.response_time());
        let mut met = Met::default();
        self.all.meet(received, &mut met);
        if let Some(t) = self.urls.get(key) {
            t.meet(received, &mut met);
        }
        self.prefixes
            .each_prefix_of(key.as_bytes(), |t| t.meet(received, &mut met));
        if !self.tags.is_empty() {
            for tag in tags(stored) {
                if let Some(t) = self.tags.get(tag) {
                    t.meet(received, &mut met);
                }
            }
        }
        met.verdict()
    }
}

/// A purge call: `POST /purge?id=ID&url=U&prefix=P&tag=T&all&soft&at=SECS` (url, prefix and tag
/// repeatable; at least one selector).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Request {
    pub id: String,
    pub urls: Vec<String>,
    pub prefixes: Vec<String>,
    pub tags: Vec<String>,
    pub all: bool,
    pub soft: bool,
    /// Unix seconds; now when absent.
    pub at: Option<u64>,
}

/// Parse a purge call's query string; the error says what is wrong.
pub fn parse_query(q: &str) -> Result<Request, String> {
    let mut r = Request::default();
    for (k, v) in form_urlencoded::parse(q.as_bytes()) {
        let v = v.into_owned();
        match k.as_ref() {
            "id" => r.id = v,
            "url" => r.urls.push(v),
            "prefix" => r.prefixes.push(v),
            "tag" => r.tags.push(v),
            "all" => r.all = flag(&v)?,
            "soft" => r.soft = flag(&v)?,
            "at" => {
                r.at = Some(
                    v.parse()
                        .map_err(|_| format!("at: not Unix seconds: {v:?}"))?,
                )
            }
            other => return Err(format!("unknown parameter {other:?}")),
        }
    }
    if r.id.is_empty()
        || r.id.len() > 128
        || !r
            .id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err("id: 1 to 128 characters of A-Z a-z 0-9 - _ . are required".into());
    }
    if r.urls.is_empty() && r.prefixes.is_empty() && r.tags.is_empty() && !r.all {
        return Err("name what to purge: url=, prefix=, tag= or all".into());
    }
    for v in r.urls.iter().chain(&r.prefixes).chain(&r.tags) {
        if v.is_empty() || v.len() > 8192 {
            return Err(format!("{v:?}: a selector is 1 to 8192 bytes"));
        }
    }
    Ok(r)
}

fn flag(v: &str) -> Result<bool, String> {
    match v {
        "" | "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        _ => Err(format!("{v:?}: a flag is empty, 1, true, 0 or false")),
    }
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// What a purge call did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Applied {
    pub id: String,
    /// Rules added (0 when the id was seen before).
    pub rules: usize,
    /// Objects removed at once (hard URL purges).
    pub objects: usize,
    /// The id had been applied before: nothing was done again.
    pub repeated: bool,
}

/// Why a purge call was not applied.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The call names a time no rule may have ([`check_at`]).
    #[error("{0}")]
    At(String),
    /// It would take the rules in force past `cache.maxPurgeRules`.
    #[error(
        "{in_force} purge rules are in force and this purge adds {adding}: at most {max} may be \
         (cache.maxPurgeRules); a rule goes once the store has reclaimed what was stored before \
         it, or purge more at once with a prefix, a tag or all"
    )]
    Full {
        in_force: usize,
        adding: usize,
        max: usize,
    },
    /// The rules could not be kept on disk: nothing changed.
    #[error("cannot keep the purge rules: {0}")]
    Io(#[from] io::Error),
}

/// The rules in force, and their file.
pub struct Purges {
    path: PathBuf,
    max_rules: usize,
    /// What lookups read: replaced whole once a change is on disk, so a lookup never waits for
    /// a write, only for the swap of a pointer.
    index: RwLock<Arc<Index>>,
    /// Held by a change from the snapshot it starts from to its swap: changes are made,
    /// written and take effect one at a time, in order, none lost.
    changing: Mutex<()>,
}

impl std::fmt::Debug for Purges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Purges")
            .field("path", &self.path)
            .field("max_rules", &self.max_rules)
            .finish_non_exhaustive()
    }
}

impl Purges {
    /// Load the rules kept in `dir` (none when the file is missing), at most `max_rules` in
    /// force for new purges to be taken. A line that does not parse is an error naming it:
    /// dropping a purge silently could serve purged content. A rule whose time could not enter
    /// now ([`check_at`]: a file written before that check) is dropped with a log line.
    pub fn open(dir: &Path, max_rules: usize, now: SystemTime) -> io::Result<Purges> {
        let path = dir.join(FILE);
        let mut rules = Vec::new();
        match File::open(&path) {
            Ok(f) => {
                for (n, line) in io::BufReader::new(f).lines().enumerate() {
                    let line = line?;
                    if line.trim().is_empty() {
                        continue;
                    }
                    let rule: Rule = serde_json::from_str(&line).map_err(|e| {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("{}: line {}: {e}", path.display(), n + 1),
                        )
                    })?;
                    match check_at(rule.at, now) {
                        Ok(()) => rules.push(rule),
                        Err(why) => warn!(
                            id = rule.id,
                            line = n + 1,
                            "purge rule dropped at load: {why}"
                        ),
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        if rules.len() > max_rules {
            warn!(
                rules = rules.len(),
                max_rules,
                "more purge rules in force than cache.maxPurgeRules: all kept, new purges refused until they go"
            );
        }
        Ok(Purges {
            path,
            max_rules,
            index: RwLock::new(Arc::new(Index::new(rules))),
            changing: Mutex::new(()),
        })
    }

    /// The rules in force now.
    fn snapshot(&self) -> Arc<Index> {
        match self.index.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    fn swap(&self, next: Index) {
        let next = Arc::new(next);
        match self.index.write() {
            Ok(mut g) => *g = next,
            Err(p) => *p.into_inner() = next,
        }
    }

    fn changing(&self) -> MutexGuard<'_, ()> {
        match self.changing.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Rules in force.
    pub fn len(&self) -> usize {
        self.snapshot().rules.len()
    }

    /// Whether no rule is in force.
    pub fn is_empty(&self) -> bool {
        self.snapshot().rules.is_empty()
    }

    /// The verdict on a stored response (cheap when there are no rules).
    pub fn verdict(&self, key: &str, stored: &StoredResponse) -> Verdict {
        match self.index.read() {
            Ok(g) => g.verdict(key, stored),
            Err(p) => p.into_inner().verdict(key, stored),
        }
    }

    /// Whether the purge `id` was applied (and is still in force).
    #[cfg(test)]
    pub fn has(&self, id: &str) -> bool {
        self.snapshot().ids.contains(id)
    }

    /// Add the rules of `req` (at `now` unless it says when), keep them on disk first, and
    /// drop the rules `oldest_epoch` has outlived. `remove_url` removes a URL's variants at
    /// once and says how many it removed. A repeated id does nothing. Lookups go on meanwhile
    /// with the rules before this call, until they are on disk.
    pub fn apply(
        &self,
        req: &Request,
        now: SystemTime,
        epochs: (u64, u64),
        remove_url: impl Fn(&str) -> usize,
    ) -> Result<Applied, Refused> {
        let changing = self.changing();
        let current = self.snapshot();
        if current.ids.contains(&req.id) {
            return Ok(Applied {
                id: req.id.clone(),
                rules: 0,
                objects: 0,
                repeated: true,
            });
        }
        // Stored responses carry their receipt time in whole seconds: a rule covers the second
        // it was made in, so nothing received before it escapes (what the same second fetched
        // after it is fetched once more).
        let at = req.at.unwrap_or_else(|| secs(now) + 1);
        check_at(at, now).map_err(Refused::At)?;
        let mut new: Vec<Selector> = Vec::new();
        if req.all {
            new.push(Selector::All);
        }
        new.extend(req.prefixes.iter().cloned().map(Selector::Prefix));
        new.extend(req.tags.iter().cloned().map(Selector::Tag));
        // A hard URL purge is done at once; it is kept as a rule too, so that a copy a fill
        // in flight publishes later, or one the operator sends again, is still covered.
        new.extend(req.urls.iter().cloned().map(Selector::Url));
        let adding = new.len();
        // Kept: the rules still in force, then the new ones, written whole and renamed over the
        // old file, so a crash leaves the old set or the new one.
        let mut kept: Vec<Rule> = (current.rules.iter())
            .filter(|r| r.epoch >= epochs.0)
            .cloned()
            .collect();
        if kept.len() + adding > self.max_rules {
            return Err(Refused::Full {
                in_force: kept.len(),
                adding,
                max: self.max_rules,
            });
        }
        kept.extend(new.into_iter().map(|selector| Rule {
            id: req.id.clone(),
            selector,
            soft: req.soft,
            at,
            epoch: epochs.1,
        }));
        self.persist(&kept)?;
        self.swap(Index::new(kept));
        drop(changing);
        let objects = if req.soft {
            0
        } else {
            req.urls.iter().map(|u| remove_url(u)).sum()
        };
        Ok(Applied {
            id: req.id.clone(),
            rules: adding,
            objects,
            repeated: false,
        })
    }

    fn persist(&self, rules: &[Rule]) -> io::Result<()> {
        let tmp = self.path.with_extension("jsonl.tmp");
        {
            let mut f = io::BufWriter::new(
                OpenOptions::new()
                    .create(true)
                    .truncate(true)
                    .write(true)
                    .open(&tmp)?,
            );
            for r in rules {
                serde_json::to_writer(&mut f, r).map_err(io::Error::other)?;
                f.write_all(b"\n")?;
            }
            f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        }
        fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(received: u64, fields: &[(&str, &str)]) -> StoredResponse {
        let mut h = http::HeaderMap::new();
        for (k, v) in fields {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap_or(http::header::WARNING),
                http::HeaderValue::from_str(v).unwrap_or(http::HeaderValue::from_static("x")),
            );
        }
        let t = UNIX_EPOCH + Duration::from_secs(received);
        StoredResponse::from_fields(&http::HeaderMap::new(), http::StatusCode::OK, &h, t, t)
    }

    /// The rules in `dir`, opened a while after the tests' purges (at 1,000,000 s).
    fn open(dir: &Path) -> io::Result<Purges> {
        Purges::open(dir, 10_000, UNIX_EPOCH + Duration::from_secs(1_000_000))
    }

    fn rule(selector: Selector, soft: bool, at: u64) -> Rule {
        Rule {
            id: "p".into(),
            selector,
            soft,
            at,
            epoch: 1,
        }
    }

    #[test]
    fn each_kind_names_what_it_says_and_only_what_was_stored_before() {
        let s = stored(100, &[("surrogate-key", "a b"), ("cache-tag", "c,d")]);
        let k = "http://example.com/img/1.png";
        for (sel, want) in [
            (Selector::All, true),
            (Selector::Url(k.into()), true),
            (Selector::Url("http://example.com/img/1".into()), false),
            (Selector::Prefix("http://example.com/img/".into()), true),
            (Selector::Prefix("http://example.com/css/".into()), false),
            (Selector::Tag("b".into()), true),
            (Selector::Tag("d".into()), true),
            (Selector::Tag("e".into()), false),
        ] {
            assert_eq!(
                rule(sel.clone(), false, 200).matches(k, &s),
                want,
                "{sel:?}"
            );
            // Received after the purge: never named.
            assert!(!rule(sel, false, 100).matches(k, &s));
        }
    }

    #[test]
    fn a_hard_rule_wins_over_soft_ones_and_soft_ones_give_the_earliest_time() {
        let s = stored(100, &[]);
        let soft = [
            rule(Selector::All, true, 300),
            rule(Selector::All, true, 200),
        ];
        assert_eq!(
            verdict(soft.iter(), "k", &s),
            Verdict::Stale(UNIX_EPOCH + Duration::from_secs(199))
        );
        let mut all = soft.to_vec();
        all.push(rule(Selector::All, false, 250));
        assert_eq!(verdict(all.iter(), "k", &s), Verdict::Remove);
        assert_eq!(verdict([].iter(), "k", &s), Verdict::Keep);
    }

    #[test]
    fn calls_parse_or_say_what_is_wrong() {
        let r = parse_query("id=x1&prefix=http%3A%2F%2Fa%2Fb&tag=t&tag=u&soft&at=5").unwrap();
        assert_eq!(r.prefixes, ["http://a/b"]);
        assert_eq!(r.tags, ["t", "u"]);
        assert!(r.soft && !r.all);
        assert_eq!(r.at, Some(5));
        for bad in [
            "prefix=x",
            "id=x",
            "id=a%20b&all",
            "id=x&all&oops=1",
            "id=x&all=maybe",
            "id=x&url=",
        ] {
            assert!(parse_query(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rules_survive_a_reopen_repeats_are_no_ops_and_outlived_rules_go() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path()).unwrap();
        let now = UNIX_EPOCH + Duration::from_secs(1000);
        let req = parse_query("id=one&tag=t").unwrap();
        let a = p.apply(&req, now, (1, 5), |_| 0).unwrap();
        assert_eq!((a.rules, a.repeated), (1, false));
        assert!(p.apply(&req, now, (1, 5), |_| 0).unwrap().repeated);
        let p = open(dir.path()).unwrap();
        assert!(p.has("one"));
        let s = stored(999, &[("surrogate-key", "t")]);
        assert_eq!(p.verdict("k", &s), Verdict::Remove);
        // Every segment of epoch 5 or older reclaimed: the rule goes at the next call.
        let two = parse_query("id=two&url=http://a/x").unwrap();
        let a = p
            .apply(&two, now, (6, 9), |u| usize::from(u == "http://a/x"))
            .unwrap();
        assert_eq!((a.rules, a.objects), (1, 1));
        assert!(!p.has("one") && p.has("two"));
        assert_eq!(open(dir.path()).unwrap().len(), 1);
    }

    #[test]
    fn a_torn_rules_file_is_an_error_not_an_empty_set() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(FILE), "{\"id\":\"x\"\n").unwrap();
        let e = open(dir.path()).unwrap_err();
        assert!(e.to_string().contains("line 1"), "{e}");
    }

    #[test]
    fn an_at_out_of_range_is_refused_where_the_rule_enters() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path()).unwrap();
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        for at in ["18446744073709551615", "1003601", "0"] {
            let req = parse_query(&format!("id=x{at}&all&soft&at={at}")).unwrap();
            assert!(p.apply(&req, now, (1, 5), |_| 0).is_err(), "at={at}");
        }
        assert_eq!(p.len(), 0);
        // Up to five minutes ahead of this clock (another node's, the operator's) is fine.
        let req = parse_query("id=skew&all&soft&at=1000301").unwrap();
        assert!(p.apply(&req, now, (1, 5), |_| 0).is_ok());
    }

    #[test]
    fn a_kept_rule_that_cannot_be_evaluated_is_dropped_at_load_not_a_panic_at_a_hit() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join(FILE),
            "{\"id\":\"far\",\"selector\":{\"kind\":\"all\"},\"soft\":true,\
             \"at\":18446744073709551615,\"epoch\":1}\n\
             {\"id\":\"ok\",\"selector\":{\"kind\":\"tag\",\"value\":\"t\"},\"soft\":true,\
             \"at\":1000,\"epoch\":1}\n",
        )
        .unwrap();
        let p = open(dir.path()).unwrap();
        assert!(p.has("ok") && !p.has("far"));
        let s = stored(999, &[("surrogate-key", "t")]);
        assert_eq!(
            p.verdict("k", &s),
            Verdict::Stale(UNIX_EPOCH + Duration::from_secs(999))
        );
        assert_eq!(p.verdict("k", &stored(999, &[])), Verdict::Keep);
    }

    #[test]
    fn a_purge_past_the_rule_cap_is_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path()).unwrap();
        let now = UNIX_EPOCH + Duration::from_secs(1000);
        let mut q = "id=many".to_string();
        for i in 0..10_001 {
            q.push_str(&format!("&tag=t{i}"));
        }
        let e = p
            .apply(&parse_query(&q).unwrap(), now, (1, 5), |_| 0)
            .unwrap_err();
        assert!(e.to_string().contains("10000"), "{e}");
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn a_lookup_is_not_blocked_while_the_rules_are_persisted() {
        use std::io::Read;
        use std::sync::{Arc, mpsc};
        let dir = tempfile::tempdir().unwrap();
        let p = Arc::new(open(dir.path()).unwrap());
        let now = UNIX_EPOCH + Duration::from_secs(1000);
        p.apply(&parse_query("id=one&tag=t").unwrap(), now, (1, 5), |_| 0)
            .unwrap();
        // The next persist's temporary file is a FIFO: opening it to write blocks until a
        // reader comes, as a disk whose fsync takes seconds would.
        let tmp = dir.path().join("purges.jsonl.tmp");
        let made = std::process::Command::new("mkfifo").arg(&tmp).status();
        assert!(made.is_ok_and(|s| s.success()));
        let writer = {
            let p = p.clone();
            std::thread::spawn(move || {
                let _ = p.apply(&parse_query("id=two&all").unwrap(), now, (1, 5), |_| 0);
            })
        };
        std::thread::sleep(Duration::from_millis(200));
        let (tx, rx) = mpsc::channel();
        let reader = {
            let p = p.clone();
            std::thread::spawn(move || {
                let _ = tx.send(p.verdict("k", &stored(999, &[("surrogate-key", "t")])));
            })
        };
        let during = rx.recv_timeout(Duration::from_secs(2));
        // Let the persist go on.
        let mut drained = Vec::new();
        File::open(&tmp).unwrap().read_to_end(&mut drained).unwrap();
        writer.join().unwrap();
        reader.join().unwrap();
        assert_eq!(
            during,
            Ok(Verdict::Remove),
            "the lookup waited for the persist"
        );
    }

    /// A small xorshift generator: the same rules and objects on every run.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }

        /// A short string over a small alphabet, so that rules and keys meet often.
        fn word(&mut self, max: u64) -> String {
            let n = self.below(max + 1);
            (0..n)
                .map(|_| char::from(b"ab/"[self.below(3) as usize]))
                .collect()
        }
    }

    #[test]
    fn the_index_answers_as_the_rule_by_rule_scan_on_random_rules() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..200 {
            let rules: Vec<Rule> = (0..rng.below(40))
                .map(|i| Rule {
                    id: format!("r{i}"),
                    selector: match rng.below(7) {
                        0 => Selector::All,
                        1 | 2 => Selector::Url(format!("k{}", rng.word(4))),
                        3 | 4 => Selector::Prefix(format!("k{}", rng.word(4))),
                        _ => Selector::Tag(rng.word(2)),
                    },
                    soft: rng.below(2) == 0,
                    at: 1 + rng.below(20),
                    epoch: 1,
                })
                .collect();
            let index = Index::new(rules.clone());
            for _ in 0..100 {
                let key = format!("k{}", rng.word(6));
                let tags = format!("{} {},{}", rng.word(2), rng.word(2), rng.word(2));
                let s = stored(rng.below(22), &[("cache-tag", &tags)]);
                assert_eq!(
                    index.verdict(&key, &s),
                    verdict(rules.iter(), &key, &s),
                    "round {round}, key {key:?}, tags {tags:?}, rules {rules:?}"
                );
            }
        }
    }

    #[test]
    fn the_prefix_trie_finds_every_prefix_of_a_key_and_nothing_else() {
        let mut t = Trie::default();
        for (i, p) in ["", "ab", "abc", "abd", "b", "abcdef"].iter().enumerate() {
            t.entry(p.as_bytes()).hard = i as u64 + 1;
        }
        let found = |key: &str| {
            let mut v = Vec::new();
            t.each_prefix_of(key.as_bytes(), |x| v.push(x.hard));
            v
        };
        assert_eq!(found("abcde"), [1, 2, 3]);
        assert_eq!(found("abcdefg"), [1, 2, 3, 6]);
        assert_eq!(found("abd"), [1, 2, 4]);
        assert_eq!(found("a"), [1]);
        assert_eq!(found("ba"), [1, 5]);
        assert_eq!(found(""), [1]);
    }

    #[test]
    fn concurrent_purges_lose_no_rule_and_the_file_keeps_them_all() {
        let dir = tempfile::tempdir().unwrap();
        let p = std::sync::Arc::new(open(dir.path()).unwrap());
        let now = UNIX_EPOCH + Duration::from_secs(1000);
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let p = p.clone();
                std::thread::spawn(move || {
                    for i in 0..10 {
                        let q = format!("id=t{t}-{i}&tag=t{t}-{i}");
                        p.apply(&parse_query(&q).unwrap(), now, (1, 5), |_| 0)
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(p.len(), 80);
        let again = open(dir.path()).unwrap();
        assert_eq!(again.len(), 80);
        assert!((0..8).all(|t| (0..10).all(|i| again.has(&format!("t{t}-{i}")))));
    }
}
