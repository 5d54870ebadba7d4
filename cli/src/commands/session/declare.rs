//! `spex session done`, `park`, `ask`: a worker's declaration, one lifecycle write by the
//! declaring session.

use spex_engine::Lifecycle;

use crate::args::{Declarer, Global, ProposalArg};
use crate::exit::Code;
use crate::render;

#[derive(Debug, clap::Args)]
pub(super) struct DoneArgs {
    /// What to do with the work.
    #[arg(long, value_enum)]
    pub(super) propose: ProposalArg,
    /// The complete reply or summary.
    #[arg(long, value_parser = crate::args::non_empty)]
    pub(super) note: Option<String>,
    #[command(flatten)]
    pub(super) declarer: Declarer,
}

#[derive(Debug, clap::Args)]
pub(super) struct NoteArgs {
    /// The complete reply or question.
    #[arg(long, value_parser = crate::args::non_empty)]
    pub(super) note: String,
    #[command(flatten)]
    pub(super) declarer: Declarer,
}

/// A worker's declaration: one lifecycle write by the declaring session.
pub(super) fn declare(
    global: &Global,
    declarer: &Declarer,
    write: &Lifecycle,
) -> anyhow::Result<Code> {
    let id = declarer.id()?;
    let applied = global.open_store()?.append(&id, write)?;
    render::applied(&id, &applied, global.json)?;
    Ok(Code::Ok)
}
