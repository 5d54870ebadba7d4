//! `spex completions SHELL` and `spex man`: shell completion scripts and man pages, generated
//! from the command line's own definition (so they never drift from it).
//!
//! Session ids are not completed: the scripts are static, and a dynamic completer would run
//! `spex` against the store on every Tab press.

use std::path::PathBuf;

use anyhow::Context as _;

use crate::exit::Code;
use crate::render::out;

/// Arguments of `spex completions`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The shell.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// Arguments of `spex man`.
#[derive(Debug, clap::Args)]
pub(crate) struct ManArgs {
    /// Write spex.1 and one page per command (spex-session-send.1, ...) into this directory
    /// (default: print spex.1 on stdout).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

pub(crate) fn run(args: &Args, command: &mut clap::Command) -> anyhow::Result<Code> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, command, "spex", &mut script);
    out!("{}", String::from_utf8_lossy(&script))?;
    Ok(Code::Ok)
}

pub(crate) fn man(args: &ManArgs, command: &clap::Command) -> anyhow::Result<Code> {
    let Some(dir) = &args.out else {
        let mut page = Vec::new();
        clap_mangen::Man::new(command.clone()).render(&mut page)?;
        page.extend_from_slice(shared_sections().as_bytes());
        out!("{}", String::from_utf8_lossy(&page))?;
        return Ok(Code::Ok);
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = 0;
    let mut pending = vec![(command.clone(), "spex".to_owned())];
    while let Some((command, name)) = pending.pop() {
        if command.is_hide_set() {
            continue;
        }
        for sub in command.get_subcommands() {
            pending.push((sub.clone(), format!("{name}-{}", sub.get_name())));
        }
        let command = command.name(name.clone()).bin_name(name.replace('-', " "));
        let mut page = Vec::new();
        clap_mangen::Man::new(command).render(&mut page)?;
        page.extend_from_slice(shared_sections().as_bytes());
        let path = dir.join(format!("{name}.1"));
        std::fs::write(&path, page).with_context(|| format!("cannot write {}", path.display()))?;
        written += 1;
    }
    eprintln!("spex: wrote {written} man pages into {}", dir.display());
    Ok(Code::Ok)
}

/// The sections every page ends with: EXIT STATUS (one table for every command) and
/// ENVIRONMENT, in roff, from the tables the code uses.
fn shared_sections() -> String {
    let mut roff = String::from(".SH \"EXIT STATUS\"\n");
    for (code, meaning) in crate::exit::MEANINGS {
        roff.push_str(&format!(".TP\n\\fB{}\\fR\n{}\n", code as u8, roff_text(meaning)));
    }
    roff.push_str(".SH ENVIRONMENT\n");
    for (name, meaning) in crate::args::ENVIRONMENT {
        roff.push_str(&format!(".TP\n\\fB{}\\fR\n{}\n", roff_text(name), roff_text(meaning)));
    }
    roff
}

/// `text` as roff running text: backslashes and hyphens escaped, no line starting a request.
fn roff_text(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with(['.', '\'']) { format!("\\&{escaped}") } else { escaped }
}
