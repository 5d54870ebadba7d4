//! Session ids: validated before any path is built from one, so an id can never name a file
//! outside its session's directory. A leaf: it names nothing else of the engine (the engine's
//! error wraps [`InvalidId`]; the error type names ids, so ids cannot name it).

use std::fmt;

/// Longest session id.
pub const SESSION_ID_BYTES_MAX: usize = 128;

/// A session id that failed validation: the id as given (escaped) and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid session id {id:?}: {reason}")]
pub struct InvalidId {
    /// The id as given (escaped).
    pub id: String,
    /// Why it is invalid.
    pub reason: String,
}

/// A validated session id: 1 to 128 bytes of `[A-Za-z0-9._-]`, not starting with `.` or `-`.
/// Validated before any path is built from it, so it can never escape the store.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(String);

impl SessionId {
    /// Validates `id`.
    pub fn new(id: &str) -> Result<SessionId, InvalidId> {
        let invalid = |reason: &str| InvalidId {
            id: id.escape_debug().to_string(),
            reason: reason.to_owned(),
        };
        if id.is_empty() {
            return Err(invalid("empty"));
        }
        if id.len() > SESSION_ID_BYTES_MAX {
            return Err(invalid("longer than 128 bytes"));
        }
        if id.starts_with('.') || id.starts_with('-') {
            return Err(invalid("starts with '.' or '-'"));
        }
        if let Some(bad) =
            id.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(invalid(&format!(
                "contains {bad:?} (allowed: letters, digits, '.', '_', '-')"
            )));
        }
        let valid = SessionId(id.to_owned());
        assert!(
            (1..=SESSION_ID_BYTES_MAX).contains(&valid.0.len())
                && !valid.0.contains(['/', '\0'])
                && valid.0 != "."
                && valid.0 != "..",
            "a valid id is one path component inside its directory"
        );
        Ok(valid)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        debug_assert!(!self.0.is_empty(), "a session id is never empty: only `new` makes one");
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_assert!(!self.0.contains('/'), "a session id prints as one path name");
        f.pad(&self.0)
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_assert!(!self.0.is_empty(), "a session id is never empty: only `new` makes one");
        write!(f, "SessionId({})", self.0)
    }
}
