//! Redaction for every render: credential-shaped values and local identity become labelled
//! placeholders. It fails closed: what cannot be scanned (a text over [`SCAN_BYTES_MAX`], a
//! private-key block without its end) is withheld, not shown.
//!
//! The credential shapes are the gitleaks default rule set (`rules/gitleaks.toml`, kept as
//! published: its regexes, secret groups, entropy floors, keywords and allowlists), plus a few
//! rules of spex's own ([`OWN_RULES`]) for shapes it does not name (a password assigned under
//! any name, an unterminated or PGP key block, a bearer header, a JSON secret field).
//!
//! Every rule is matched against the whole text before anything is replaced, and every span a
//! rule claims is replaced at once: a text is redacted whole, and only then may a caller cut a
//! window from it (a snippet, a title). Cutting first would leave the rest of a key without the
//! prefix the rules anchor on.

use std::sync::{LazyLock, OnceLock};

use aho_corasick::AhoCorasick;
use regex::{Regex, RegexBuilder};
use serde::Deserialize;

/// The longest text scanned; a longer one is withheld whole.
pub const SCAN_BYTES_MAX: usize = 4 << 20;

/// The largest compiled form one rule's regex may take (the default of the regex crate is too
/// small for a few of the published rules).
const REGEX_BYTES_MAX: usize = 64 << 20;

/// The published rule set.
const GITLEAKS: &str = include_str!("../rules/gitleaks.toml");

/// spex's own rules, for shapes the published set leaves to its entropy floors or does not name:
/// `(id, regex, keywords)`; the first capture group, when there is one, is the secret.
const OWN_RULES: [(&str, &str, &[&str]); 8] = [
    (
        // A value assigned to any name that says it is secret: `DB_PASSWORD=`, `SECRET_KEY:`,
        // `"client_secret": "..."`, `.npmrc`'s `_authToken=`, `"SecretAccessKey": "..."`,
        // `MY_API_TOKEN=`, whatever precedes the name.
        "secret-assignment",
        r#"(?i)[A-Za-z0-9_.-]*(?:api[_-]?key|secret|password|passwd|pwd|token|credentials?|private[_-]?key|access[_-]?key)[A-Za-z0-9_.-]*["']?\s*(?:=|:|=>)\s*["']?([^\s"',;()]{8,})"#,
        &["key", "secret", "passw", "pwd", "token", "credential"],
    ),
    ("bearer-token", r"(?i)\bbearer\s+([A-Za-z0-9._~+/-]{16,}=*)", &["bearer"]),
    (
        // Key blocks of any kind (PEM, OpenSSH, PGP), whole.
        "private-key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----",
        &["private key"],
    ),
    ("anthropic-api-key", r"\bsk-ant-[A-Za-z0-9_-]{20,}", &["sk-ant-"]),
    ("openai-api-key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{32,}", &["sk-"]),
    (
        "github-token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})",
        &["gh", "github_pat_"],
    ),
    (
        "aws-access-token",
        r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b",
        &["akia", "asia", "abia", "acca"],
    ),
    ("google-api-key", r"\bAIza[0-9A-Za-z_-]{35}", &["aiza"]),
];

/// A password in a URL (`scheme://user:password@host`): the password alone is replaced.
static URL_PASSWORD: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\b([a-z][a-z0-9+.-]*://[^/\s:@]+:)[^@\s/]+@").ok());

/// An e-mail address (with a dotted domain).
static EMAIL: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b").ok()
});

/// The start of a private-key block (to withhold one whose end is missing).
const KEY_BEGIN: &str = "-----BEGIN ";

// ---- the rule set ---------------------------------------------------------------------------

/// The published file, as far as redaction reads it.
#[derive(Debug, Deserialize)]
struct File {
    allowlist: Option<AllowFile>,
    #[serde(default)]
    rules: Vec<RuleFile>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RuleFile {
    id: String,
    regex: Option<String>,
    secret_group: Option<usize>,
    entropy: Option<f64>,
    #[serde(default)]
    keywords: Vec<String>,
    #[serde(default)]
    allowlists: Vec<AllowFile>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AllowFile {
    condition: Option<String>,
    regex_target: Option<String>,
    #[serde(default)]
    regexes: Vec<String>,
    #[serde(default)]
    stopwords: Vec<String>,
    #[serde(default)]
    paths: Vec<String>,
}

/// What an allowlist regex is matched against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Secret,
    Match,
    Line,
}

/// Findings an allowlist lets through.
#[derive(Debug)]
struct Allow {
    target: Target,
    regexes: Vec<Regex>,
    /// Lowercase words: a secret holding one is allowed.
    stopwords: Vec<String>,
}

impl Allow {
    /// The allowlist, or `None` when it can never apply to a text (one that names file paths:
    /// a text has none).
    fn of(file: &AllowFile) -> Option<Allow> {
        if !file.paths.is_empty()
            && (file.condition.as_deref() == Some("AND")
                || (file.regexes.is_empty() && file.stopwords.is_empty()))
        {
            return None;
        }
        let target = match file.regex_target.as_deref() {
            Some("match") => Target::Match,
            Some("line") => Target::Line,
            _ => Target::Secret,
        };
        Some(Allow {
            target,
            regexes: file.regexes.iter().filter_map(|pattern| compile(pattern)).collect(),
            stopwords: file.stopwords.iter().map(|word| word.to_lowercase()).collect(),
        })
    }

    fn allows(&self, secret: &str, matched: &str, line: &str) -> bool {
        let target = match self.target {
            Target::Secret => secret,
            Target::Match => matched,
            Target::Line => line,
        };
        if self.regexes.iter().any(|regex| regex.is_match(target)) {
            return true;
        }
        if self.stopwords.is_empty() {
            return false;
        }
        let lower = secret.to_lowercase();
        self.stopwords.iter().any(|word| lower.contains(word.as_str()))
    }
}

/// One rule: compiled the first time its keywords are seen.
#[derive(Debug)]
struct Rule {
    id: String,
    pattern: String,
    regex: OnceLock<Option<Regex>>,
    secret_group: Option<usize>,
    entropy: Option<f64>,
    allow: Vec<Allow>,
    /// One of spex's own rules: the published allowlists do not apply (their stopwords would
    /// let a sample-like password through); [`placeholder`] does.
    own: bool,
}

impl Rule {
    fn regex(&self) -> Option<&Regex> {
        self.regex.get_or_init(|| compile(&self.pattern)).as_ref()
    }
}

/// Every rule, the keyword automaton that says which may match a text, and the global allowlist.
#[derive(Debug)]
struct Rules {
    rules: Vec<Rule>,
    /// Lowercase keywords; `keyword_rules[k]` are the rules keyword `k` wakes.
    keywords: Option<AhoCorasick>,
    keyword_rules: Vec<Vec<usize>>,
    /// Rules without keywords (run on every text).
    always: Vec<usize>,
    global: Vec<Allow>,
}

fn compile(pattern: &str) -> Option<Regex> {
    RegexBuilder::new(pattern).size_limit(REGEX_BYTES_MAX).build().ok()
}

static RULES: LazyLock<Rules> = LazyLock::new(|| {
    // The file is part of the build; a parse failure is a broken build, caught by the tests
    // (`the_published_rules_all_load`), and leaves spex's own rules in force.
    let file: File =
        toml::from_str(GITLEAKS).unwrap_or(File { allowlist: None, rules: Vec::new() });
    let mut rules = Vec::new();
    let mut keyword_of: Vec<(String, usize)> = Vec::new();
    let mut always = Vec::new();
    let mut add =
        |rule: Rule, keywords: Vec<String>, rules: &mut Vec<Rule>, always: &mut Vec<usize>| {
            let at = rules.len();
            if keywords.is_empty() {
                always.push(at);
            }
            keyword_of.extend(keywords.into_iter().map(|keyword| (keyword.to_lowercase(), at)));
            rules.push(rule);
        };
    for rule in file.rules {
        let Some(pattern) = rule.regex else { continue };
        let allow = rule.allowlists.iter().filter_map(Allow::of).collect();
        let compiled = Rule {
            id: rule.id,
            pattern,
            regex: OnceLock::new(),
            secret_group: rule.secret_group,
            entropy: rule.entropy,
            allow,
            own: false,
        };
        add(compiled, rule.keywords, &mut rules, &mut always);
    }
    for (id, pattern, keywords) in OWN_RULES {
        let rule = Rule {
            id: id.to_owned(),
            pattern: pattern.to_owned(),
            regex: OnceLock::new(),
            secret_group: None,
            entropy: None,
            allow: Vec::new(),
            own: true,
        };
        add(
            rule,
            keywords.iter().map(|word| (*word).to_owned()).collect(),
            &mut rules,
            &mut always,
        );
    }
    let mut words: Vec<String> = keyword_of.iter().map(|(word, _)| word.clone()).collect();
    words.sort();
    words.dedup();
    let mut keyword_rules = vec![Vec::new(); words.len()];
    for (word, rule) in keyword_of {
        if let Ok(at) = words.binary_search(&word) {
            keyword_rules[at].push(rule);
        }
    }
    // Without the automaton (it cannot fail on plain words) every rule runs on every text.
    let keywords = AhoCorasick::new(&words).ok();
    if keywords.is_none() {
        always = (0..rules.len()).collect();
    }
    let global = file.allowlist.as_ref().and_then(Allow::of).into_iter().collect();
    Rules { rules, keywords, keyword_rules, always, global }
});

/// How many rules are in force, and how many of them failed to compile (for the tests).
pub fn rule_counts() -> (usize, usize) {
    let rules = &RULES.rules;
    (rules.len(), rules.iter().filter(|rule| rule.regex().is_none()).count())
}

/// A value that only names where a secret comes from: a variable (`$PASSWORD`, `%TOKEN%`,
/// `${{ secrets.X }}`, `<token>`), or a call (`env::var(...)`, `os.getenv(...)`).
fn placeholder(secret: &str, after: &str) -> bool {
    secret.starts_with(['$', '%', '<', '{']) || after.starts_with('(')
}

/// Shannon entropy of `text`, in bits per character (as the published rules' floors are).
fn entropy(text: &str) -> f64 {
    let mut counts = std::collections::HashMap::new();
    let mut total = 0usize;
    for c in text.chars() {
        *counts.entry(c).or_insert(0usize) += 1;
        total += 1;
    }
    if total == 0 {
        return 0.0;
    }
    counts
        .values()
        .map(|&n| {
            let p = n as f64 / total as f64;
            -p * p.log2()
        })
        .sum()
}

/// The byte spans of `text` that hold a credential, each with its rule's id; overlapping spans
/// merged (the earlier rule's id kept).
fn credential_spans(text: &str) -> Vec<(usize, usize, &'static str)> {
    let rules: &'static Rules = &RULES;
    let lower = text.to_ascii_lowercase();
    let mut woken = vec![false; rules.rules.len()];
    for &at in &rules.always {
        woken[at] = true;
    }
    if let Some(keywords) = &rules.keywords {
        for found in keywords.find_overlapping_iter(&lower) {
            for &at in &rules.keyword_rules[found.pattern().as_usize()] {
                woken[at] = true;
            }
        }
    }
    let mut spans: Vec<(usize, usize, &'static str)> = Vec::new();
    for (at, rule) in rules.rules.iter().enumerate() {
        if !woken[at] {
            continue;
        }
        let Some(regex) = rule.regex() else { continue };
        for captures in regex.captures_iter(text) {
            let Some(whole) = captures.get(0) else { continue };
            // The secret: the named group, else the first group that matched, else the match.
            let secret = match rule.secret_group {
                Some(group) => captures.get(group),
                None => captures.iter().skip(1).flatten().next(),
            }
            .unwrap_or(whole);
            if secret.as_str().is_empty() {
                continue;
            }
            if rule.entropy.is_some_and(|floor| entropy(secret.as_str()) < floor) {
                continue;
            }
            let line_start = text[..whole.start()].rfind('\n').map_or(0, |at| at + 1);
            let line_end = text[whole.end()..].find('\n').map_or(text.len(), |at| whole.end() + at);
            let line = &text[line_start..line_end];
            let allowed = if rule.own {
                placeholder(secret.as_str(), &text[secret.end()..])
            } else {
                rules
                    .global
                    .iter()
                    .chain(&rule.allow)
                    .any(|allow| allow.allows(secret.as_str(), whole.as_str(), line))
            };
            if !allowed {
                // A rule of a fixed length may stop inside a longer token: the rest of it goes too.
                let rest = text[secret.end()..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || "_-+/=".contains(c)))
                    .unwrap_or(text.len() - secret.end());
                spans.push((secret.start(), secret.end() + rest, rule.id.as_str()));
            }
        }
    }
    spans.sort_by_key(|&(start, end, _)| (start, std::cmp::Reverse(end)));
    let mut merged: Vec<(usize, usize, &'static str)> = Vec::new();
    for span in spans {
        match merged.last_mut() {
            Some(last) if span.0 < last.1 => last.1 = last.1.max(span.1),
            _ => merged.push(span),
        }
    }
    merged
}

// ---- identity -------------------------------------------------------------------------------

/// Who and where the text must not reveal: the home directory (shown as `~`), and the user and
/// host names as whole words (shown as `[user]` and `[host]`; names shorter than three
/// characters are left alone, they are parts of ordinary words). The patterns are built once.
#[derive(Clone, Debug, Default)]
pub struct Identity {
    home: Option<String>,
    user: Option<Regex>,
    host: Option<Regex>,
}

impl Identity {
    /// An identity of these names.
    pub fn new(home: Option<&str>, user: Option<&str>, host: Option<&str>) -> Identity {
        let word = |name: Option<&str>| {
            name.filter(|name| name.len() >= 3)
                .and_then(|name| Regex::new(&format!(r"\b{}\b", regex::escape(name))).ok())
        };
        Identity {
            home: home
                .filter(|home| home.len() > 1)
                .map(|home| home.trim_end_matches('/').to_owned()),
            user: word(user),
            host: word(host),
        }
    }

    /// This machine's: `HOME`, `USER` (else `LOGNAME`), and the host name.
    pub fn of_this_machine() -> Identity {
        let var = |name| std::env::var(name).ok().filter(|value: &String| !value.is_empty());
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|name| name.trim().to_owned())
            .filter(|name| !name.is_empty())
            .or_else(|| var("HOSTNAME"));
        let user = var("USER").or_else(|| var("LOGNAME"));
        Identity::new(var("HOME").as_deref(), user.as_deref(), host.as_deref())
    }
}

/// `text` with every credential-shaped value and the local identity replaced by placeholders
/// (`[redacted:openai-api-key]`, `~`, `[user]`, `[host]`, `[email]`), or withheld whole when it
/// cannot be scanned. `Identity::default()` redacts credentials only (what an index stores).
pub fn redact(text: &str, identity: &Identity) -> String {
    if text.len() > SCAN_BYTES_MAX {
        return format!("[withheld: {} bytes, too long to scan for secrets]", text.len());
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end, label) in credential_spans(text) {
        out.push_str(&text[at..start]);
        out.push_str("[redacted:");
        out.push_str(label);
        out.push(']');
        at = end;
    }
    out.push_str(&text[at..]);
    // A key block whose end is missing (cut off, or still being written): everything from its
    // start is withheld.
    if let Some(at) = out.find(KEY_BEGIN)
        && out[at..].contains("PRIVATE KEY")
    {
        out.truncate(at);
        out.push_str("[withheld: a private-key block without its end]");
    }
    if let Some(regex) = URL_PASSWORD.as_ref() {
        out = regex.replace_all(&out, "${1}[redacted:password]@").into_owned();
    }
    if let Some(regex) = EMAIL.as_ref() {
        out = regex.replace_all(&out, "[email]").into_owned();
    }
    if let Some(home) = &identity.home {
        out = out.replace(home.as_str(), "~");
    }
    for (regex, placeholder) in [(&identity.user, "[user]"), (&identity.host, "[host]")] {
        if let Some(regex) = regex {
            out = regex.replace_all(&out, placeholder).into_owned();
        }
    }
    out
}

/// A window of at most `bytes` bytes of `text`, cut after redacting it whole (never before: a
/// cut inside a key would leave its rest without the prefix the rules anchor on).
pub fn redacted_prefix(text: &str, bytes: usize, identity: &Identity) -> String {
    let mut shown = redact(text, identity);
    let mut end = shown.len().min(bytes);
    while !shown.is_char_boundary(end) {
        end -= 1;
    }
    shown.truncate(end);
    shown
}
