//! Replay tokens: where a violation was found, as the one line `spex verify replay` takes.

use std::fmt;
use std::str::FromStr;

use faultfs::CrashMode;

/// Where a violation was found; its text form is what `spex verify replay` takes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Token {
    /// The scenario.
    pub scenario: String,
    /// The seed.
    pub seed: u64,
    /// The first crash's mode.
    pub mode: CrashMode,
    /// The first crash point (before op `k`).
    pub k: u64,
    /// Which image of that crash (a kill has one: the restarted machine).
    pub image: usize,
    /// A second crash inside the phase that followed: (mode, op of the phase, image).
    pub second: Option<(CrashMode, u64, usize)>,
    /// A power loss after the (last) phase ran to its end: which of its images.
    pub then_power: Option<usize>,
    /// After a kill, the next process's first command (its index among `first_commands`) and
    /// the power-loss image right after it (`usize::MAX`: the command's own answer is judged).
    pub first: Option<(usize, usize)>,
    /// After a kill, the next process's first command (its index among `first_commands`)
    /// crashed in its takeover of the dead holder's lock: (command, mode, op of the command,
    /// image).
    pub first_crash: Option<(usize, CrashMode, u64, usize)>,
    /// An injected I/O fault at op `k` instead of a crash (`image` then names the power-loss
    /// image taken after the failure, or is `usize::MAX` for the reopened process).
    pub fault: Option<faultfs::Fault>,
    /// The medium the machine ran on.
    pub media: faultfs::Media,
}

fn mode_name(mode: CrashMode) -> &'static str {
    mode.name()
}

pub(crate) fn parse_mode(text: &str) -> Result<CrashMode, String> {
    match text {
        "kill" => Ok(CrashMode::ProcessKill),
        "power" => Ok(CrashMode::PowerLoss),
        other => Err(format!("unknown crash mode {other:?} (expected kill or power)")),
    }
}

/// The image number as tokens spell it (`reopen` for the process that goes on after a fault).
fn image_text(image: usize) -> String {
    if image == usize::MAX { "reopen".to_owned() } else { image.to_string() }
}

impl fmt::Display for Token {
    /// `v2:<scenario>:<seed>:<mode>:<k>:<image>[:in:<mode>:<j>:<image>][:then:<image>]
    /// [:first:<n>:<image>][:first-in:<n>:<mode>:<j>:<image>][:stale-tails][:<fault>]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "v2:{}:{}:{}:{}:{}",
            self.scenario,
            self.seed,
            mode_name(self.mode),
            self.k,
            image_text(self.image)
        )?;
        if let Some((mode, j, image)) = self.second {
            write!(f, ":in:{}:{j}:{image}", mode_name(mode))?;
        }
        if let Some(image) = self.then_power {
            write!(f, ":then:{image}")?;
        }
        if let Some((n, image)) = self.first {
            write!(f, ":first:{n}:{}", image_text(image))?;
        }
        if let Some((n, mode, j, image)) = self.first_crash {
            write!(f, ":first-in:{n}:{}:{j}:{image}", mode_name(mode))?;
        }
        if self.media == faultfs::Media::StaleTails {
            write!(f, ":stale-tails")?;
        }
        if let Some(fault) = self.fault {
            write!(f, ":{fault}")?;
        }
        Ok(())
    }
}

impl FromStr for Token {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split(':').collect();
        let bad = |what: &str| format!("replay token {s:?}: {what}");
        if parts.first() != Some(&"v2") || parts.len() < 6 {
            return Err(bad(
                "expected v2:<scenario>:<seed>:<mode>:<k>:<image>[:in:<mode>:<j>:<image>][:then:<image>][:first:<n>:<image>][:first-in:<n>:<mode>:<j>:<image>][:<fault>]",
            ));
        }
        let number =
            |text: &str| text.parse::<u64>().map_err(|_| bad(&format!("{text:?} is not a number")));
        let image = |text: &str| {
            if text == "reopen" { Ok(usize::MAX) } else { number(text).map(|n| n as usize) }
        };
        let mut token = Token {
            scenario: parts[1].to_owned(),
            seed: number(parts[2])?,
            mode: parse_mode(parts[3])?,
            k: number(parts[4])?,
            image: image(parts[5])?,
            second: None,
            then_power: None,
            first: None,
            first_crash: None,
            fault: None,
            media: faultfs::Media::ZeroTails,
        };
        let mut rest = &parts[6..];
        while let Some((&tag, tail)) = rest.split_first() {
            match (tag, tail) {
                ("in", [mode, j, index, more @ ..]) => {
                    token.second = Some((parse_mode(mode)?, number(j)?, image(index)?));
                    rest = more;
                }
                ("then", [index, more @ ..]) => {
                    token.then_power = Some(image(index)?);
                    rest = more;
                }
                ("first", [n, index, more @ ..]) => {
                    token.first = Some((number(n)? as usize, image(index)?));
                    rest = more;
                }
                ("first-in", [n, mode, j, index, more @ ..]) => {
                    token.first_crash =
                        Some((number(n)? as usize, parse_mode(mode)?, number(j)?, image(index)?));
                    rest = more;
                }
                ("stale-tails", more) => {
                    token.media = faultfs::Media::StaleTails;
                    rest = more;
                }
                (fault, []) => {
                    token.fault = Some(fault.parse::<faultfs::Fault>().map_err(|e| bad(&e))?);
                    rest = &[];
                }
                (other, _) => return Err(bad(&format!("unexpected {other:?}"))),
            }
        }
        Ok(token)
    }
}
