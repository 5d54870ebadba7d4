//! Who may talk to `spex serve`: every request carries the server's token, names a host the
//! server answers for, and (when it changes something) is JSON from the server's own origin.
//!
//! - **Token.** 32 random bytes, hex, kept per store in `<root>/serve.token` (created with mode
//!   0600, refused if anyone but its owner can read it) or read from `--token-file`. A request
//!   presents it once as `?token=<token>` (the URL `spex serve` prints), which answers with a
//!   cookie (HttpOnly, SameSite=Strict) so a browser needs the token in its address only once,
//!   as `Authorization: Bearer <token>`, or as that cookie. The URL's token wins over a cookie
//!   (a stale one from a rotated token). The cookie's name is the store's own
//!   (`spex_token_<digest of the root>`): cookies ignore ports, so two stores' servers on one
//!   machine keep theirs apart, and neither is sent the other's token. Compared in constant
//!   time. Missing or wrong: 401, and the connection is closed after the answer (a client that
//!   cannot authenticate holds no connection slot).
//! - **Host.** The `Host` header must be a loopback name with the server's port
//!   (`127.0.0.1`, `localhost`, `[::1]`) or the address it listens on: a page that rebinds a
//!   DNS name to 127.0.0.1 still sends its own name, and gets 403.
//! - **Requests that change something** (POST) need `Content-Type: application/json` (415
//!   otherwise: a form or `text/plain` body, which a foreign page can send without asking, is
//!   refused) and, when an `Origin` is present, the server's own origin (403).
//! - No CORS headers are ever sent, so no other origin can read an answer.

use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rand::TryRngCore as _;
use subtle::ConstantTimeEq as _;

/// The start of the name of the cookie that carries the token (a digest of the store's root
/// follows).
pub(crate) const COOKIE_PREFIX: &str = "spex_token_";
/// The token file of a store, under its root.
pub(crate) const TOKEN_FILE: &str = "serve.token";

/// The checks of one server.
#[derive(Debug)]
pub(crate) struct Guard {
    token: String,
    hosts: Vec<String>,
    /// The token cookie's name, the store's own.
    cookie: String,
}

/// What the guard decided about a request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Let it through; with `set_cookie`, the answer carries the token cookie.
    Allow { set_cookie: bool },
    /// Refuse it with this status and reason.
    Deny(u16, String),
}

/// The request as the guard sees it.
pub(crate) struct Incoming<'a> {
    pub(crate) method: &'a str,
    pub(crate) query: &'a str,
    /// A header's value by its (case-insensitive) name.
    pub(crate) header: &'a dyn Fn(&str) -> Option<String>,
}

impl Guard {
    /// The guard of a server listening on `addr` for the store at `root`: its token from
    /// `token_file`, else the store's own (created on first use).
    pub(crate) fn new(
        root: &Path,
        token_file: Option<&Path>,
        addr: SocketAddr,
    ) -> anyhow::Result<Guard> {
        let token = match token_file {
            Some(path) => crate::files::read_token(path)?,
            None => store_token(&root.join(TOKEN_FILE))?,
        };
        let port = addr.port();
        let mut hosts = vec![
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
            addr.to_string(),
        ];
        if port == 80 {
            hosts.extend(["127.0.0.1", "localhost", "[::1]"].map(str::to_owned));
        }
        Ok(Guard { token, hosts, cookie: cookie_name(root) })
    }

    /// The token (for the URL the server prints).
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// Decides about one request (see the module header).
    pub(crate) fn check(&self, request: &Incoming<'_>) -> Verdict {
        let host = (request.header)("host").unwrap_or_default();
        if !self.hosts.iter().any(|allowed| allowed.eq_ignore_ascii_case(&host)) {
            return Verdict::Deny(403, format!("host {host:?} is not this server"));
        }
        if let Some(origin) = (request.header)("origin")
            && !self
                .hosts
                .iter()
                .any(|allowed| origin.eq_ignore_ascii_case(&format!("http://{allowed}")))
        {
            return Verdict::Deny(403, format!("origin {origin:?} is not this server"));
        }
        let from_query = query_token(request.query);
        let presented = from_query
            .clone()
            .or_else(|| bearer((request.header)("authorization")))
            .or_else(|| cookie(&self.cookie, (request.header)("cookie")));
        let Some(presented) = presented else {
            return Verdict::Deny(
                401,
                "a token is required (the URL spex serve printed)".to_owned(),
            );
        };
        if !bool::from(presented.as_bytes().ct_eq(self.token.as_bytes())) {
            return Verdict::Deny(401, "wrong token".to_owned());
        }
        if request.method != "GET" && request.method != "HEAD" {
            let content_type = (request.header)("content-type").unwrap_or_default();
            let essence = content_type.split(';').next().unwrap_or_default().trim();
            if !essence.eq_ignore_ascii_case("application/json") {
                return Verdict::Deny(
                    415,
                    format!(
                        "a request that changes something must be application/json, not {content_type:?}"
                    ),
                );
            }
        }
        Verdict::Allow { set_cookie: from_query.is_some() }
    }

    /// The `Set-Cookie` value that carries the token.
    pub(crate) fn cookie(&self) -> String {
        format!("{}={}; HttpOnly; SameSite=Strict; Path=/", self.cookie, self.token)
    }
}

/// The token cookie's name for the store at `root`: the prefix and 16 hex digits of a digest of
/// its path.
fn cookie_name(root: &Path) -> String {
    use sha2::Digest as _;
    let root = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
    let digest = sha2::Sha256::digest(root.as_os_str().as_encoded_bytes());
    format!("{COOKIE_PREFIX}{}", &hex::encode(digest)[..16])
}

fn bearer(value: Option<String>) -> Option<String> {
    let value = value?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim().to_owned())
}

fn cookie(wanted: &str, value: Option<String>) -> Option<String> {
    value?.split(';').find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        (name == wanted).then(|| value.to_owned())
    })
}

fn query_token(query: &str) -> Option<String> {
    form_urlencoded::parse(query.as_bytes())
        .find(|(name, _)| name == "token")
        .map(|(_, value)| value.into_owned())
}

/// The store's token: read, or created (0600, exclusively) when there is none.
fn store_token(path: &PathBuf) -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.try_fill_bytes(&mut bytes).context("no randomness for the token")?;
    let token = hex::encode(bytes);
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
        Ok(mut file) => {
            file.write_all(format!("{token}\n").as_bytes())
                .and_then(|()| file.sync_all())
                .with_context(|| format!("token file {}", path.display()))?;
            Ok(token)
        }
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            crate::files::read_token(path)
        }
        Err(error) => Err(error).with_context(|| format!("token file {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> Guard {
        Guard {
            token: "t".repeat(64),
            hosts: vec!["127.0.0.1:7477".to_owned()],
            cookie: cookie_name(Path::new("/store")),
        }
    }

    fn check(method: &str, query: &str, headers: &[(&str, &str)]) -> Verdict {
        let header = |name: &str| {
            headers
                .iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(name))
                .map(|(_, v)| (*v).to_owned())
        };
        guard().check(&Incoming { method, query, header: &header })
    }

    #[test]
    fn every_rule_refuses_what_it_must() {
        let token = format!("Bearer {}", "t".repeat(64));
        let host = ("Host", "127.0.0.1:7477");
        let json = ("Content-Type", "application/json");
        assert_eq!(
            check("GET", "", &[host, ("Authorization", &token)]),
            Verdict::Allow { set_cookie: false }
        );
        assert!(matches!(check("GET", "", &[host]), Verdict::Deny(401, _)));
        assert!(matches!(
            check("GET", "", &[host, ("Authorization", "Bearer nope")]),
            Verdict::Deny(401, _)
        ));
        assert!(matches!(
            check("GET", "", &[("Host", "evil.example"), ("Authorization", &token)]),
            Verdict::Deny(403, _)
        ));
        let query = format!("token={}", "t".repeat(64));
        assert_eq!(check("GET", &query, &[host]), Verdict::Allow { set_cookie: true });
        let name = cookie_name(Path::new("/store"));
        let cookie = format!("a=b; {name}={}", "t".repeat(64));
        assert_eq!(
            check("GET", "", &[host, ("Cookie", &cookie)]),
            Verdict::Allow { set_cookie: false }
        );
        // Another store's cookie is not this one's; a stale cookie loses to the URL's token.
        let other = format!("{}={}", cookie_name(Path::new("/other")), "t".repeat(64));
        assert!(matches!(check("GET", "", &[host, ("Cookie", &other)]), Verdict::Deny(401, _)));
        let stale = format!("{name}={}", "s".repeat(64));
        assert_eq!(
            check("GET", &query, &[host, ("Cookie", &stale)]),
            Verdict::Allow { set_cookie: true }
        );
        assert!(matches!(
            check("POST", "", &[host, ("Authorization", &token), ("Content-Type", "text/plain")]),
            Verdict::Deny(415, _)
        ));
        assert!(matches!(
            check(
                "POST",
                "",
                &[host, ("Authorization", &token), json, ("Origin", "http://evil.example")]
            ),
            Verdict::Deny(403, _)
        ));
        assert_eq!(
            check(
                "POST",
                "",
                &[host, ("Authorization", &token), json, ("Origin", "http://127.0.0.1:7477")]
            ),
            Verdict::Allow { set_cookie: false }
        );
    }
}
