//! Purges by prefix, tag or everything, soft or hard, without scanning the store: each purge is
//! a rule (a Varnish ban) checked at lookup against the stored response's URL, tags and the
//! time it was received. A rule takes effect at once for every object it names, however many;
//! a hard rule's objects are removed from the store as lookups meet them, and a rule is dropped
//! once every segment that was being written when it came has been reclaimed (nothing older
//! than it is left on disk). Rules are kept in `purges.jsonl` in the cache directory (written
//! and fsynced before the call is answered), so a restart keeps them; a purge's id makes a
//! repeated call (the operator retrying) a no-op.
//!
//! A URL purge removes that URL's variants at once (tombstones on disk); a soft URL purge is a
//! rule like the others. What is pure here ([`Rule::matches`], [`verdict`], [`parse_query`]) is
//! unit-tested; the proxy asks [`Purges::verdict`] after it selected a stored response.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use edgecache_policy::StoredResponse;
use serde::{Deserialize, Serialize};

/// The file the rules are kept in, in the cache directory.
pub const FILE: &str = "purges.jsonl";
/// Response header fields that carry an object's tags (space or comma separated).
pub const TAG_FIELDS: [&str; 2] = ["surrogate-key", "cache-tag"];

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

impl Rule {
    /// Whether the rule names an object stored under `key` with `stored`'s fields and times.
    pub fn matches(&self, key: &str, stored: &StoredResponse) -> bool {
        if secs(stored.response_time) >= self.at {
            return false;
        }
        match &self.selector {
            Selector::All => true,
            Selector::Url(u) => key == u,
            Selector::Prefix(p) => key.starts_with(p.as_str()),
            Selector::Tag(t) => TAG_FIELDS.iter().any(|f| {
                stored.headers.get_all(*f).iter().any(|v| {
                    v.to_str()
                        .is_ok_and(|v| v.split([' ', ',']).any(|x| x.trim() == t))
                })
            }),
        }
    }
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

/// The verdict of `rules` on an object.
pub fn verdict<'a>(
    rules: impl IntoIterator<Item = &'a Rule>,
    key: &str,
    stored: &StoredResponse,
) -> Verdict {
    let mut stale: Option<u64> = None;
    for r in rules {
        if r.matches(key, stored) {
            if !r.soft {
                return Verdict::Remove;
            }
            stale = Some(stale.map_or(r.at, |s| s.min(r.at)));
        }
    }
    // Rules cover the whole second they were made in (see [`Purges::apply`]): stale from its
    // start.
    match stale {
        Some(at) => Verdict::Stale(UNIX_EPOCH + Duration::from_secs(at.saturating_sub(1))),
        None => Verdict::Keep,
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

/// The rules in force, and their file.
pub struct Purges {
    path: PathBuf,
    rules: RwLock<Vec<Rule>>,
}

impl std::fmt::Debug for Purges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Purges")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Purges {
    /// Load the rules kept in `dir` (none when the file is missing). A line that does not parse
    /// is an error naming it: dropping a purge silently could serve purged content.
    pub fn open(dir: &Path) -> io::Result<Purges> {
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
                    rules.push(rule);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(Purges {
            path,
            rules: RwLock::new(rules),
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Rule>> {
        match self.rules.read() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Vec<Rule>> {
        match self.rules.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Rules in force.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// The verdict on a stored response (cheap when there are no rules).
    pub fn verdict(&self, key: &str, stored: &StoredResponse) -> Verdict {
        let rules = self.read();
        if rules.is_empty() {
            return Verdict::Keep;
        }
        verdict(rules.iter(), key, stored)
    }

    /// Whether the purge `id` was applied (and is still in force).
    #[cfg(test)]
    pub fn has(&self, id: &str) -> bool {
        self.read().iter().any(|r| r.id == id)
    }

    /// Add the rules of `req` (at `now` unless it says when), keep them on disk first, and
    /// drop the rules `oldest_epoch` has outlived. `remove_url` removes a URL's variants at
    /// once and says how many it removed. A repeated id does nothing.
    pub fn apply(
        &self,
        req: &Request,
        now: SystemTime,
        epochs: (u64, u64),
        remove_url: impl Fn(&str) -> usize,
    ) -> io::Result<Applied> {
        let mut rules = self.write();
        if rules.iter().any(|r| r.id == req.id) {
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
        let mut new: Vec<Selector> = Vec::new();
        if req.all {
            new.push(Selector::All);
        }
        new.extend(req.prefixes.iter().cloned().map(Selector::Prefix));
        new.extend(req.tags.iter().cloned().map(Selector::Tag));
        // A hard URL purge is done at once; it is kept as a rule too, so that a copy a fill
        // in flight publishes later, or one the operator sends again, is still covered.
        new.extend(req.urls.iter().cloned().map(Selector::Url));
        let added: Vec<Rule> = new
            .into_iter()
            .map(|selector| Rule {
                id: req.id.clone(),
                selector,
                soft: req.soft,
                at,
                epoch: epochs.1,
            })
            .collect();
        // Kept: the rules still in force, then the new ones, written whole and renamed over the
        // old file, so a crash leaves the old set or the new one.
        let mut kept: Vec<Rule> = rules
            .iter()
            .filter(|r| r.epoch >= epochs.0)
            .cloned()
            .collect();
        kept.extend(added.iter().cloned());
        self.persist(&kept)?;
        *rules = kept;
        drop(rules);
        let objects = if req.soft {
            0
        } else {
            req.urls.iter().map(|u| remove_url(u)).sum()
        };
        Ok(Applied {
            id: req.id.clone(),
            rules: added.len(),
            objects,
            repeated: false,
        })
    }

    fn persist(&self, rules: &[Rule]) -> io::Result<()> {
        let tmp = self.path.with_extension("jsonl.tmp");
        {
            let mut f = OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .open(&tmp)?;
            for r in rules {
                let line = serde_json::to_string(r).map_err(io::Error::other)?;
                writeln!(f, "{line}")?;
            }
            f.sync_all()?;
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
        let p = Purges::open(dir.path()).unwrap();
        let now = UNIX_EPOCH + Duration::from_secs(1000);
        let req = parse_query("id=one&tag=t").unwrap();
        let a = p.apply(&req, now, (1, 5), |_| 0).unwrap();
        assert_eq!((a.rules, a.repeated), (1, false));
        assert!(p.apply(&req, now, (1, 5), |_| 0).unwrap().repeated);
        let p = Purges::open(dir.path()).unwrap();
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
        assert_eq!(Purges::open(dir.path()).unwrap().len(), 1);
    }

    #[test]
    fn a_torn_rules_file_is_an_error_not_an_empty_set() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(FILE), "{\"id\":\"x\"\n").unwrap();
        let e = Purges::open(dir.path()).unwrap_err();
        assert!(e.to_string().contains("line 1"), "{e}");
    }
}
