//! `spex session send`: a message to a session, through the operation every surface shares.

use std::io::Read as _;

use anyhow::Context as _;
use faultfs::RealFs;
use spex_engine::{Key, SessionId, Store};

use crate::args::{Global, ReplyArg, session_id};
use crate::exit::{BadInput, Code};
use crate::render::{outln, print_json};

/// The operation of a keyed send from the command line (when `--operation` is not given).
pub(crate) const CLI_OPERATION: &str = "cli-send";

#[derive(Debug, clap::Args)]
pub(super) struct SendArgs {
    /// The receiving session (its id or a unique prefix).
    pub(super) id: String,
    /// The message; `-` reads it from stdin (UTF-8; one trailing newline is dropped).
    pub(super) text: String,
    /// The sending session (default: a human).
    #[arg(long, value_parser = session_id)]
    pub(super) from: Option<SessionId>,
    /// Where the agent should reply: note (a declaration) or terminal.
    #[arg(long, value_enum)]
    pub(super) reply_via: Option<ReplyArg>,
    /// An idempotency key: resending with the same key returns the original mid.
    #[arg(long)]
    pub(super) key: Option<String>,
    /// The operation the key belongs to.
    #[arg(long, requires = "key", default_value = CLI_OPERATION)]
    pub(super) operation: String,
}

/// Reads a message argument: the text itself, or stdin for `-`.
pub(crate) fn message_text(arg: &str) -> anyhow::Result<String> {
    if arg != "-" {
        return Ok(arg.to_owned());
    }
    // Bounded: a message longer than the limit (plus its one trailing newline) is refused
    // without reading the rest.
    let bound = spex_engine::layout::TEXT_BYTES_MAX + 1;
    let mut bytes = Vec::new();
    std::io::stdin()
        .take(bound as u64 + 1)
        .read_to_end(&mut bytes)
        .context("cannot read the message from stdin")?;
    if bytes.len() > bound || (bytes.len() == bound && !bytes.ends_with(b"\n")) {
        return Err(BadInput(format!(
            "the message on stdin is too long (the limit is {} bytes); the rest was not read and nothing was sent",
            spex_engine::layout::TEXT_BYTES_MAX
        ))
        .into());
    }
    let mut text = String::from_utf8(bytes).map_err(|error| {
        BadInput(format!(
            "the message on stdin is not valid UTF-8 (first invalid byte at offset {})",
            error.utf8_error().valid_up_to()
        ))
    })?;
    if text.ends_with('\n') {
        text.pop();
    }
    Ok(text)
}

pub(super) fn send(
    store: &Store<RealFs>,
    id: &SessionId,
    args: &SendArgs,
    global: &Global,
) -> anyhow::Result<Code> {
    let message = crate::ops::send::Message {
        to: id.clone(),
        text: message_text(&args.text)?,
        from: args.from.clone(),
        reply_via: args.reply_via.map(ReplyArg::channel),
        key: args
            .key
            .as_ref()
            .map(|key| Key { operation: args.operation.clone(), key: key.clone() }),
    };
    let sent = crate::ops::send::send(store, message)?;
    // An archived session is hidden from listings: say where the message went.
    if !global.quiet && sent.archived {
        eprintln!(
            "spex: note: {id} is archived (hidden from `session ls`); the message is owed all the same and waits for a drain"
        );
    }
    if global.json {
        print_json(sent.to_json())?;
    } else if sent.replayed {
        let restored = if sent.restored { " (restored to the queue)" } else { "" };
        outln!("{} replayed{restored}", sent.mid)?;
    } else {
        outln!("{} sent", sent.mid)?;
    }
    Ok(Code::Ok)
}
