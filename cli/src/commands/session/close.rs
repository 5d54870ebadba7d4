//! `spex session close`: what a close deletes, said and asked on a terminal first.

use faultfs::RealFs;
use spex_engine::{SessionId, Store};

use crate::render;

#[derive(Debug, clap::Args)]
pub(super) struct CloseArgs {
    /// The session (its id or a unique prefix).
    pub(super) id: String,
    /// Close without asking (a close asks only when stdin and stderr are a terminal).
    #[arg(long, short = 'y')]
    pub(super) yes: bool,
}

/// Says on stderr what closing `id` deletes and asks; true on `y`/`yes`. What cannot be read
/// (a damaged record or queue) is said so: a close does not need it.
pub(super) fn confirm_close(store: &Store<RealFs>, id: &SessionId) -> anyhow::Result<bool> {
    let events = store.events(id).ok();
    let first_said = events.iter().flatten().find_map(|event| match event {
        spex_engine::Event::Sent(sent) => Some(sent.text.clone()),
        spex_engine::Event::Status(_) => None,
    });
    let what = match store.record(id) {
        Ok(record) => match record.title().map(str::to_owned).or(first_said) {
            Some(title) => {
                format!("session {id} \"{}\"", render::truncate(&render::first_line(&title), 60))
            }
            None => format!("session {id}"),
        },
        Err(_) => format!("session {id} (its record cannot be read)"),
    };
    let events = events.map_or_else(|| "?".to_owned(), |events| events.len().to_string());
    let owed = store.queue(id).map_or_else(|_| "?".to_owned(), |queue| queue.len().to_string());
    eprintln!(
        "spex: closing deletes {what}: its record, its timeline ({events} events) and its queue ({owed} owed)."
    );
    eprintln!("spex: `spex session archive {id}` keeps them instead.");
    eprint!("Close {id}? [y/N] ");
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    Ok(matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes"))
}
