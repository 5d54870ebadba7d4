//! `spex fleet add|ls|rm`: the other devices whose `spex serve` this store asks for their
//! history (`history ls --fleet`, `search --fleet`, `history show DEVICE:ID`). The list is the
//! store's `fleet.json`, written whole or not at all; each device's token stays in its own file.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use crate::args::Global;
use crate::exit::{BadInput, Code};
use crate::ops::fleet::{self, Fleet, Member};
use crate::render::{self, outln, print_json};

/// Arguments of `spex fleet`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Add another device's server: a name for it, its URL and the file holding its token.
    #[command(after_help = "Examples:
  ssh -L 7478:127.0.0.1:7477 laptop                       the laptop's spex serve, here
  spex fleet add laptop http://127.0.0.1:7478 --token-file ~/.config/spex/laptop.token")]
    Add {
        /// What to call it (letters, digits, - and _): typed as NAME:ID.
        name: String,
        /// Its server's base URL, http://HOST:PORT.
        url: String,
        /// The file holding its server's token (its `serve.token`), readable by its owner only.
        #[arg(long, value_name = "FILE")]
        token_file: PathBuf,
    },
    /// Every device of the fleet, and whether it answers.
    Ls {
        /// How long each device may take to answer.
        #[arg(long, default_value = "5s", value_parser = crate::when::parse_duration)]
        timeout: Duration,
    },
    /// Remove a device from the fleet (nothing on it is touched).
    Rm {
        /// Its name.
        name: String,
    },
}

pub(crate) fn run(args: &Args, global: &Global) -> anyhow::Result<Code> {
    let root = global.root()?.path;
    match &args.command {
        Command::Add { name, url, token_file } => add(global, &root, name, url, token_file),
        Command::Ls { timeout } => ls(global, &root, *timeout),
        Command::Rm { name } => rm(global, &root, name),
    }
}

/// `fleet add`: checked, then listed (whole), then asked once (a device that does not answer
/// yet is still added, and said so).
fn add(
    global: &Global,
    root: &std::path::Path,
    name: &str,
    url: &str,
    token_file: &std::path::Path,
) -> anyhow::Result<Code> {
    fleet::check_name(name)?;
    let url = fleet::check_url(url)?;
    let token_file = std::path::absolute(token_file)
        .map_err(|error| BadInput(format!("{}: {error}", token_file.display())))?;
    crate::files::read_token(&token_file).map_err(|error| BadInput(format!("{error:#}")))?;
    // The store (and its root) exists from here on.
    global.open_store()?;
    let mut fleet = Fleet::read(root)?;
    if let Some(there) = fleet.member(name) {
        return Err(BadInput(format!(
            "{name} is already in the fleet ({}); spex fleet rm {name} first",
            there.url
        ))
        .into());
    }
    let member = Member { name: name.to_owned(), url, token_file };
    fleet.devices.push(member.clone());
    fleet.write(root)?;
    let answer = fleet::ask(&member, "/api/sessions", fleet::ANSWER_WITHIN);
    if global.json {
        print_json(json!({ "added": member, "reachable": answer.is_ok() }))?;
    } else {
        outln!("added {} ({})", member.name, member.url)?;
        if let Err(why) = answer {
            eprintln!("spex: {} does not answer yet: {why}", member.name);
        }
    }
    Ok(Code::Ok)
}

/// `fleet ls`: every device, asked at once within `timeout`.
fn ls(global: &Global, root: &std::path::Path, timeout: Duration) -> anyhow::Result<Code> {
    let fleet = Fleet::read(root)?;
    let answers = fleet::ask_all(&fleet, "/api/sessions", timeout);
    if global.json {
        let devices: Vec<_> = answers
            .iter()
            .map(|answer| {
                let mut device = answer.to_json();
                device["tokenFile"] = json!(answer.member.token_file);
                device
            })
            .collect();
        print_json(json!({ "devices": devices }))?;
        return Ok(Code::Ok);
    }
    if answers.is_empty() {
        if !global.quiet {
            eprintln!("spex: no devices in the fleet (spex fleet add NAME URL --token-file FILE)");
        }
        return Ok(Code::Ok);
    }
    let header: Vec<String> =
        ["NAME", "URL", "ANSWERS", "TOKEN FILE"].iter().map(|h| (*h).to_owned()).collect();
    let rows: Vec<Vec<String>> = answers
        .iter()
        .map(|answer| {
            vec![
                answer.member.name.clone(),
                answer.member.url.clone(),
                match &answer.body {
                    Ok(_) => "yes".to_owned(),
                    Err(why) => format!("no: {why}"),
                },
                answer.member.token_file.display().to_string(),
            ]
        })
        .collect();
    render::out!("{}", render::table(&header, &rows, render::terminal_columns()))?;
    Ok(Code::Ok)
}

/// `fleet rm`: the device leaves the list (nothing on it is touched).
fn rm(global: &Global, root: &std::path::Path, name: &str) -> anyhow::Result<Code> {
    let mut fleet = Fleet::read(root)?;
    let before = fleet.devices.len();
    fleet.devices.retain(|member| member.name != name);
    if fleet.devices.len() == before {
        return Err(BadInput(format!("{name} is not in the fleet")).into());
    }
    fleet.write(root)?;
    if global.json {
        print_json(json!({ "removed": name }))?;
    } else {
        outln!("removed {name}")?;
    }
    Ok(Code::Ok)
}
