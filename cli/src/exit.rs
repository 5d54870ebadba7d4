//! The exit codes of `spex`, one table for every command.
//!
//! | code | meaning                                                                  |
//! |------|--------------------------------------------------------------------------|
//! | 0    | ok                                                                       |
//! | 1    | failed (an error was reported on stderr; e.g. no such session, a drain   |
//! |      | stopped with messages still owed, an I/O error)                          |
//! | 2    | usage (bad arguments or bad input: invalid id, oversized or non-UTF-8    |
//! |      | text, a key conflict, a refused lifecycle write)                         |
//! | 3    | busy (a lock is held by another process and the bounded wait ran out)    |
//! | 4    | corrupt (a store file is damaged; the error names the file and offset)   |
//! | 5    | violation found (a crash check failed)                                   |

use spex_engine::Error;

/// An exit code from the table above.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Code {
    Ok = 0,
    Failed = 1,
    Usage = 2,
    Busy = 3,
    Corrupt = 4,
    Violation = 5,
}

impl From<Code> for std::process::ExitCode {
    fn from(code: Code) -> Self {
        std::process::ExitCode::from(code as u8)
    }
}

/// Every exit code with its meaning, for the man pages (the table above, as data).
pub(crate) const MEANINGS: [(Code, &str); 6] = [
    (Code::Ok, "ok"),
    (
        Code::Failed,
        "failed: an error was reported on stderr (no such session, a drain stopped with messages still owed, an I/O error, a close not confirmed)",
    ),
    (
        Code::Usage,
        "usage: bad arguments or bad input (an invalid id, oversized or non-UTF-8 text, a key conflict, a refused lifecycle write)",
    ),
    (Code::Busy, "busy: a lock is held by another process and the bounded wait ran out"),
    (Code::Corrupt, "corrupt: a store file is damaged; the error names the file and offset"),
    (Code::Violation, "violation found: a crash check failed"),
];

/// Bad input found by the CLI itself (not by the engine): exits with [`Code::Usage`].
#[derive(Debug)]
pub(crate) struct BadInput(pub(crate) String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

impl From<crate::when::NotATime> for BadInput {
    fn from(error: crate::when::NotATime) -> Self {
        BadInput(error.0)
    }
}

/// The exit code of a failed command: the first engine error or bad input in its chain decides.
pub(crate) fn code_for(error: &anyhow::Error) -> Code {
    for cause in error.chain() {
        if cause.is::<BadInput>() || cause.is::<spex_engine::InvalidId>() {
            return Code::Usage;
        }
        if cause.downcast_ref::<spex_index::Error>().is_some_and(spex_index::Error::is_busy) {
            // Another process holds the index past the wait.
            return Code::Busy;
        }
        if let Some(error) = cause.downcast_ref::<Error>() {
            return match error {
                Error::Locked { .. } => Code::Busy,
                Error::Corrupt { .. } => Code::Corrupt,
                Error::TooLarge { .. }
                | Error::InvalidId(_)
                | Error::InvalidInput { .. }
                | Error::InvalidConfig { .. }
                | Error::InvalidCursor { .. }
                | Error::KeyConflict { .. }
                | Error::Refused { .. }
                | Error::Retired { .. }
                | Error::Revoked { .. }
                | Error::SessionExists { .. } => Code::Usage,
                _ => Code::Failed,
            };
        }
    }
    Code::Failed
}

impl Code {
    /// The code's name in a JSON error.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Code::Ok => "ok",
            Code::Failed => "failed",
            Code::Usage => "usage",
            Code::Busy => "busy",
            Code::Corrupt => "corrupt",
            Code::Violation => "violation",
        }
    }
}

/// An error as the JSON document `--json` prints on stdout:
/// `{"error":{"code":"usage","exit":2,"message":"..."}}`.
pub(crate) fn error_json(code: Code, message: &str) -> serde_json::Value {
    serde_json::json!({
        "error": { "code": code.name(), "exit": code as u8, "message": message },
    })
}

/// What to do next, for the errors where a person needs a pointer (empty otherwise).
pub(crate) fn hint(error: &anyhow::Error) -> String {
    for cause in error.chain() {
        match cause.downcast_ref::<Error>() {
            Some(Error::NoSuchSession { .. }) => {
                return " (`spex session ls --all` lists the sessions; `spex where` names the store)"
                    .to_owned();
            }
            Some(Error::Locked { holder, .. }) => return busy_hint(*holder),
            _ => {}
        }
    }
    String::new()
}

/// What holds a lock and what to do: the holder's command line when it can be read (a drain
/// watching the session, a send, the server), else only that another process does.
fn busy_hint(holder: Option<u32>) -> String {
    let command = holder.and_then(|pid| {
        let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let words: Vec<String> = bytes
            .split(|byte| *byte == 0)
            .filter(|word| !word.is_empty())
            .map(|word| String::from_utf8_lossy(word).into_owned())
            .collect();
        (!words.is_empty()).then(|| words.join(" "))
    });
    match (holder, command) {
        (Some(pid), Some(command)) => format!(
            " (held by `{}`, pid {pid}: try again when it is done, or stop it; a drain with --watch holds the delivery lock while it runs)",
            crate::render::literal(&command)
        ),
        (Some(pid), None) => {
            format!(
                " (held by pid {pid}, which is gone or not ours: try again; a dead holder's lock is taken over)"
            )
        }
        (None, _) => " (another process is writing: try again)".to_owned(),
    }
}
