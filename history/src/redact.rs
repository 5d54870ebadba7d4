//! Redaction for every render: credential-shaped values and local identity become labelled
//! placeholders. It fails closed: what cannot be scanned (a text over [`SCAN_BYTES_MAX`], a
//! private-key block without its end) is withheld, not shown.

use std::sync::LazyLock;

use regex::Regex;

/// The longest text scanned; a longer one is withheld whole.
pub const SCAN_BYTES_MAX: usize = 4 << 20;

/// Credential shapes, each with its label. Anchored on word boundaries or on their own prefixes,
/// so that text that only resembles them (a `task-` name, a git hash, a UUID) survives.
static CREDENTIALS: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    let rules: [(&str, &str); 13] = [
        (
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----",
            "private-key",
        ),
        (r"\bsk-ant-[A-Za-z0-9_-]{20,}", "anthropic-key"),
        (r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{32,}", "openai-key"),
        (r"\bgh[pousr]_[A-Za-z0-9]{36,}\b", "github-token"),
        (r"\bgithub_pat_[A-Za-z0-9_]{40,}\b", "github-token"),
        (r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", "aws-access-key"),
        (
            r#"(?i)\baws_secret_access_key\b["']?\s*[:=]\s*["']?[A-Za-z0-9/+=]{40}"#,
            "aws-secret-key",
        ),
        (r"\bAIza[0-9A-Za-z_-]{35}\b", "google-api-key"),
        (r"\bxox[abposr]-[0-9A-Za-z-]{10,}", "slack-token"),
        (r"\b[rs]k_live_[0-9A-Za-z]{20,}\b", "stripe-key"),
        (r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", "jwt"),
        (r"(?i)\bbearer\s+[A-Za-z0-9._~+/-]{20,}=*", "bearer-token"),
        (
            r"(?i)\b(?:api[_-]?key|secret|password|passwd|token)\b[\x22\x27]?\s*[:=]\s*[\x22\x27]?[^\s\x22\x27]{8,}",
            "secret-assignment",
        ),
    ];
    rules
        .into_iter()
        .filter_map(|(pattern, label)| Regex::new(pattern).ok().map(|regex| (regex, label)))
        .collect()
});

/// A password in a URL (`scheme://user:password@host`): the password alone is replaced.
static URL_PASSWORD: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\b([a-z][a-z0-9+.-]*://[^/\s:@]+:)[^@\s/]+@").ok());

/// An e-mail address (with a dotted domain).
static EMAIL: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b").ok()
});

/// The start of a private-key block (to withhold one whose end is missing).
const KEY_BEGIN: &str = "-----BEGIN ";

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
/// (`[redacted:openai-key]`, `~`, `[user]`, `[host]`, `[email]`), or withheld whole when it
/// cannot be scanned.
pub fn redact(text: &str, identity: &Identity) -> String {
    if text.len() > SCAN_BYTES_MAX {
        return format!("[withheld: {} bytes, too long to scan for secrets]", text.len());
    }
    let mut out = text.to_owned();
    for (regex, label) in CREDENTIALS.iter() {
        if regex.is_match(&out) {
            out = regex.replace_all(&out, format!("[redacted:{label}]").as_str()).into_owned();
        }
    }
    // A key block whose end is missing (cut off, or still being written): everything from its
    // start is withheld.
    if let Some(at) = out.find(KEY_BEGIN)
        && out[at..].contains("PRIVATE KEY-----")
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
