//! `spex session timeline`: a session's conversation, once or followed, optionally with its
//! harness transcript interleaved.

use std::time::Duration;

use faultfs::RealFs;
use serde_json::json;
use spex_engine::{Cursor, Error, Event, SessionId, Store};

use super::show::Link;
use crate::args::Global;
use crate::exit::Code;
use crate::ops::timeline::{PageRequest, event_json, owed_mids};
use crate::render::{self, Conversation, Paint, outln, print_json};

/// How often `--follow` and `--watch` look for new work.
pub(super) const POLL_INTERVAL: Duration = Duration::from_millis(200);

#[derive(Debug, clap::Args)]
pub(super) struct TimelineArgs {
    /// The session (its id or a unique prefix).
    pub(super) id: String,
    /// Print at most the last N events.
    #[arg(long, default_value_t = 500)]
    pub(super) limit: usize,
    /// Keep printing new events as they arrive (NDJSON with --json).
    #[arg(long)]
    pub(super) follow: bool,
    /// Times in UTC (default: local time).
    #[arg(long)]
    pub(super) utc: bool,
    /// Interleave the messages of the session's harness transcript (what it was asked there
    /// and what it answered), by time, labelled by side; redacted.
    #[arg(long, conflicts_with = "follow")]
    pub(super) with_transcript: bool,
}

pub(super) fn timeline(
    store: &Store<RealFs>,
    id: &SessionId,
    args: &TimelineArgs,
    global: &Global,
) -> anyhow::Result<Code> {
    let mut owed = owed_mids(store, id);
    let mut conversation = Conversation::new(
        Paint::for_stdout(global.color),
        crate::when::zone(args.utc),
        id.as_str(),
        owed.clone(),
    );
    if args.with_transcript {
        return with_transcript(store, id, args, global, &mut conversation);
    }
    if !args.follow {
        let request = PageRequest { session: id.clone(), limit: args.limit, before: None };
        let marked = crate::ops::timeline::page(store, &request)?;
        let events = &marked.events;
        if global.json {
            print_json(marked.to_json())?;
        } else {
            global.page();
            for event in events {
                render::out!("{}", conversation.event(event))?;
            }
            if events.is_empty() && !global.quiet {
                eprintln!("spex: {id} has no events yet");
            }
        }
        return Ok(Code::Ok);
    }
    // Following starts from the whole log once (to know the cursor), then reads only growth.
    let (events, mut cursor) = store.follow(id, Cursor::START)?;
    let skip = events.len().saturating_sub(args.limit);
    print_events(&events[skip..], global.json.then_some(&owed), &mut conversation)?;
    loop {
        std::thread::sleep(POLL_INTERVAL);
        match store.follow(id, cursor) {
            Ok((events, next)) => {
                if !events.is_empty() {
                    owed = owed_mids(store, id);
                    conversation.set_owed(owed.clone());
                }
                print_events(&events, global.json.then_some(&owed), &mut conversation)?;
                cursor = next;
            }
            Err(Error::NoSuchSession { .. }) => {
                if !global.quiet {
                    eprintln!("spex: session {id} was closed");
                }
                return Ok(Code::Ok);
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// The timeline with the linked transcript's messages interleaved by time.
pub(super) fn with_transcript(
    store: &Store<RealFs>,
    id: &SessionId,
    args: &TimelineArgs,
    global: &Global,
    conversation: &mut Conversation,
) -> anyhow::Result<Code> {
    let record = store.record(id)?;
    let link = Link::of(&record, global)?;
    let events = store.tail(id, args.limit)?;
    let transcript = transcript_of(id, link.as_ref(), global)?;
    let transcript: Vec<&spex_history::Event> = transcript
        .iter()
        .filter(|event| {
            matches!(
                event.kind,
                spex_history::Kind::User { .. } | spex_history::Kind::Assistant { .. }
            )
        })
        .collect();
    let identity = spex_history::Identity::of_this_machine();
    let shown = |text: &str| spex_history::redact(text, &identity);
    // Merge by instant; an event without a readable time keeps its place after the ones before.
    let instant = |ts: Option<&str>| ts.and_then(crate::when::parse_ts);
    let mut merged: Vec<(Option<jiff::Timestamp>, Result<&Event, &spex_history::Event>)> = events
        .iter()
        .map(|event| (instant(Some(event.ts())), Ok(event)))
        .chain(transcript.iter().map(|event| (instant(event.ts.as_deref()), Err(*event))))
        .collect();
    merged.sort_by_key(|(at, _)| *at);
    if global.json {
        let side = link.as_ref().map(|link| link.harness.as_str());
        let events: Vec<serde_json::Value> =
            merged.iter().map(|(_, event)| merged_json(event, side, &shown)).collect();
        print_json(json!({ "session": id.as_str(), "events": events }))?;
        return Ok(Code::Ok);
    }
    let harness = link.as_ref().map_or("transcript", |link| link.harness.as_str());
    for (_, event) in &merged {
        match event {
            Ok(event) => render::out!("{}", conversation.event(event))?,
            Err(event) => {
                render::out!("{}", conversation.transcript_event(harness, event, &shown))?
            }
        }
    }
    Ok(Code::Ok)
}

/// The events of session `id`'s harness transcript, when its link finds one on this machine;
/// none otherwise (and why, unless quiet).
fn transcript_of(
    id: &SessionId,
    link: Option<&Link>,
    global: &Global,
) -> anyhow::Result<Vec<spex_history::Event>> {
    if let Some(found) = link.and_then(|link| link.found.as_ref()) {
        return Ok(spex_history::summarize(found)?.1);
    }
    let why = match link {
        Some(link) => format!("its {} transcript {} is not on this machine", link.harness, link.id),
        None => "its record names no harness session (harness_session_id)".to_owned(),
    };
    if !global.quiet {
        eprintln!("spex: {id} has no transcript to interleave: {why}");
    }
    Ok(Vec::new())
}

/// One event of the merged conversation as JSON: spex's own, or the transcript's (redacted by
/// `shown`, its `side` the harness).
fn merged_json(
    event: &Result<&Event, &spex_history::Event>,
    side: Option<&str>,
    shown: &dyn Fn(&str) -> String,
) -> serde_json::Value {
    match event {
        Ok(event) => {
            let mut value = event.to_public_json();
            if let Some(map) = value.as_object_mut() {
                map.insert("side".to_owned(), "spex".into());
            }
            value
        }
        Err(event) => {
            let (kind, text) = match &event.kind {
                spex_history::Kind::User { text } => ("prompt", text.as_str()),
                spex_history::Kind::Assistant { text } => ("answer", text.as_str()),
                _ => ("other", ""),
            };
            json!({
                "ts": event.ts, "kind": kind, "text": shown(text),
                "side": side,
                "line": event.line,
            })
        }
    }
}

/// Prints `events`: as JSON lines (with `json`, the owed mids), else as the conversation.
pub(super) fn print_events(
    events: &[Event],
    json: Option<&std::collections::HashSet<String>>,
    conversation: &mut Conversation,
) -> anyhow::Result<()> {
    for event in events {
        if let Some(owed) = json {
            outln!("{}", event_json(event, owed))?;
        } else {
            render::out!("{}", conversation.event(event))?;
        }
    }
    Ok(())
}
