//! `spex session ls`: the sessions of the index, narrowed, as a table or JSON.

use serde_json::json;

use crate::args::{Global, SortArg, status_parser};
use crate::exit::{BadInput, Code};
use crate::render::{self, Paint, print_json};

#[derive(Debug, clap::Args)]
pub(super) struct LsArgs {
    /// Include archived sessions.
    #[arg(long)]
    pub(super) all: bool,
    /// Order: by last activity (human sends and declared moves; see the README), or created.
    #[arg(long, value_enum, default_value_t = SortArg::Activity)]
    pub(super) sort: SortArg,
    /// Only sessions in this status (stored name, e.g. awaiting, or display word, e.g. review).
    #[arg(long, value_name = "STATUS", value_parser = status_parser())]
    pub(super) status: Option<String>,
    /// Only sessions active (else created) since this time: RFC 3339, a local date or time, or a
    /// duration back from now (90m, 2h, 7days).
    #[arg(long, value_name = "WHEN")]
    pub(super) since: Option<String>,
    /// At most this many sessions (the first in the listing's order).
    #[arg(long, value_name = "N")]
    pub(super) limit: Option<usize>,
    /// Only sessions whose worktree is DIR or under it.
    #[arg(long, value_name = "DIR")]
    pub(super) project: Option<std::path::PathBuf>,
    /// Only sessions a harness runs: claude or codex.
    #[arg(long, value_parser = crate::args::parse_harness)]
    pub(super) harness: Option<spex_history::Harness>,
}

pub(super) fn ls(args: &LsArgs, global: &Global) -> anyhow::Result<Code> {
    let Some(store) = global.existing_store()? else {
        if global.json {
            print_json(json!({ "sessions": [] }))?;
        } else if !global.quiet {
            eprintln!(
                "spex: no sessions: there is no store at {} yet (`spex where` says how it was chosen)",
                global.root()?.path.display()
            );
        }
        return Ok(Code::Ok);
    };
    let index = crate::args::open_index(&store)?;
    let narrowing = narrowing_of(args)?;
    let rows = crate::ops::list::sessions(&store, &index, &narrowing)?;
    if global.json {
        print_json(crate::ops::list::to_json(&rows))?;
        return Ok(Code::Ok);
    }
    if rows.is_empty() {
        if !global.quiet {
            let narrowed = narrowing.narrowed();
            let which = match &args.status {
                Some(status) => format!(" in status {status}"),
                None if narrowed => {
                    " match (drop --since, --project or --harness to see more)".to_owned()
                }
                None if args.all => String::new(),
                None => " (archived ones are hidden: --all shows them)".to_owned(),
            };
            eprintln!("spex: no sessions{which} in {}", store.layout().root().display());
        }
        return Ok(Code::Ok);
    }
    global.page();
    let table: Vec<render::SessionRow> = rows.into_iter().map(table_row).collect();
    // Prefixes are told apart from every session of the store, not only the rows shown.
    let every = store.session_ids()?;
    let every: Vec<&str> = every.iter().map(|id| id.as_str()).collect();
    render::out!(
        "{}",
        render::session_table(
            &table,
            &every,
            jiff::Timestamp::now(),
            &crate::when::zone(false),
            Paint::for_stdout(global.color),
            render::terminal_columns(),
        )
    )?;
    Ok(Code::Ok)
}

/// What a listing is narrowed to, as its arguments ask.
fn narrowing_of(args: &LsArgs) -> anyhow::Result<crate::ops::list::Narrowing> {
    Ok(crate::ops::list::Narrowing {
        filter: spex_index::Filter {
            sort: match args.sort {
                SortArg::Activity => spex_index::Sort::Activity,
                SortArg::Created => spex_index::Sort::Created,
            },
            status: args.status.clone(),
            all: args.all,
        },
        since: crate::when::since_now(args.since.as_deref(), &crate::when::zone(false))
            .map_err(BadInput::from)?,
        project: args
            .project
            .as_ref()
            .map(|dir| std::path::absolute(dir).unwrap_or_else(|_| dir.clone())),
        harness: args.harness,
        limit: args.limit,
    })
}

/// A listed session as the table shows it; a damaged one shows the reason, which names the
/// damaged file (`spex doctor` says what a repair does).
fn table_row(
    crate::ops::list::Listed { row, agent }: crate::ops::list::Listed,
) -> render::SessionRow {
    render::SessionRow {
        agent,
        id: row.id.clone(),
        display: row.display.clone(),
        when: row.last_activity.clone().or_else(|| row.created_at.clone()),
        owed: row.owed.map(|owed| owed as usize),
        preview: if row.status == spex_index::RowStatus::Corrupt {
            render::first_line(row.note.as_deref().unwrap_or("damaged"))
        } else {
            render::first_line(row.preview.as_deref().or(row.note.as_deref()).unwrap_or(""))
        },
        archived: row.archived,
        title: row.title.clone(),
    }
}
