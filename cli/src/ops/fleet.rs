//! The fleet: other devices' `spex serve`, named in this store's `fleet.json`, asked over HTTP
//! for their indexed metadata (history sessions, search hits) and for a conversation's detail,
//! each redacted by the device that owns it. Nothing remote is ever presented as a local file:
//! every remote row names its device, and no remote path is shown as one of this machine's.
//!
//! A device is asked with its token (read from the token file at each use, refused when others
//! can read it) and within a bound: every device is asked at once, and one that has not answered
//! within the bound (or answered with an error) is reported unreachable, with why, while the
//! others' answers are used.
//!
//! Crash story: `fleet.json` is written whole or not at all (`crate::files`); nothing else here
//! writes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::exit::BadInput;

/// The fleet's file, under the store's root.
pub(crate) const FLEET_FILE: &str = "fleet.json";

/// How long a device may take to answer, by default.
pub(crate) const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// The largest answer read from a device.
const ANSWER_BYTES_MAX: u64 = 64 << 20;

/// Another device's server.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Member {
    /// What this store calls it (`laptop`): letters, digits, `-` and `_`.
    pub(crate) name: String,
    /// Its server's base URL (`http://127.0.0.1:7478`).
    pub(crate) url: String,
    /// The file holding its server's token (readable by its owner only).
    pub(crate) token_file: PathBuf,
}

/// Every device of the fleet, as `fleet.json` lists them.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Fleet {
    pub(crate) devices: Vec<Member>,
}

impl Fleet {
    /// The fleet of the store at `root` (none listed when it has no file).
    pub(crate) fn read(root: &Path) -> anyhow::Result<Fleet> {
        let path = root.join(FLEET_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text)
                .with_context(|| format!("{} is not a fleet file", path.display())),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Fleet::default()),
            Err(error) => Err(error).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// Writes the fleet of the store at `root`, whole or not at all.
    pub(crate) fn write(&self, root: &Path) -> anyhow::Result<()> {
        let mut text = serde_json::to_string_pretty(self).context("the fleet as JSON")?;
        text.push('\n');
        crate::files::place(&root.join(FLEET_FILE), text.as_bytes())
    }

    /// The device named `name`.
    pub(crate) fn member(&self, name: &str) -> Option<&Member> {
        self.devices.iter().find(|member| member.name == name)
    }
}

/// Checks a device's name: 1 to 32 letters, digits, `-` and `_`.
pub(crate) fn check_name(name: &str) -> Result<(), BadInput> {
    let fits = (1..=32).contains(&name.len())
        && name.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_');
    if fits {
        Ok(())
    } else {
        Err(BadInput(format!(
            "device name {name:?}: use 1 to 32 letters, digits, - and _ (it is typed as NAME:ID)"
        )))
    }
}

/// Checks a server's URL: `http://HOST:PORT` with nothing after it (a trailing `/` is dropped).
pub(crate) fn check_url(url: &str) -> Result<String, BadInput> {
    let url = url.trim_end_matches('/');
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        BadInput(format!(
            "{url:?}: give the server's http://HOST:PORT (spex serve listens on loopback; reach \
             another machine's through a tunnel, e.g. ssh -L 7478:127.0.0.1:7477 HOST)"
        ))
    })?;
    let plain = !rest.is_empty() && !rest.contains(['/', '?', '#', '@', ' ']);
    if plain {
        Ok(url.to_owned())
    } else {
        Err(BadInput(format!("{url:?} is not http://HOST:PORT")))
    }
}

/// What one device answered.
#[derive(Debug)]
pub(crate) struct Answer<'a> {
    pub(crate) member: &'a Member,
    /// Its JSON, or why there is none (unreachable, too slow, refused, not JSON).
    pub(crate) body: Result<Value, String>,
}

impl Answer<'_> {
    /// The device and whether it answered (and why not), as every fleet listing says it.
    pub(crate) fn to_json(&self) -> Value {
        serde_json::json!({
            "name": self.member.name,
            "url": self.member.url,
            "reachable": self.body.is_ok(),
            "error": self.body.as_ref().err(),
        })
    }

    /// The items of its answer under `key` (`history`, `hits`), each naming this device
    /// (`"device": {"name", "here": false}`) and carrying no path: a remote file is never shown
    /// as one of this machine's. None when it did not answer.
    pub(crate) fn items(&self, key: &str) -> Vec<Value> {
        let Ok(body) = &self.body else { return Vec::new() };
        let device = serde_json::json!({ "name": self.member.name, "here": false });
        body[key]
            .as_array()
            .into_iter()
            .flatten()
            .map(|item| {
                let mut item = item.clone();
                if let Some(map) = item.as_object_mut() {
                    map.remove("path");
                    map.insert("device".to_owned(), device.clone());
                }
                item
            })
            .collect()
    }

    /// Its history sessions (`GET /api/history`) as [`Answer::items`] gives them, but for those
    /// that moved: a conversation is listed by its new owner alone.
    pub(crate) fn history(&self) -> Vec<Value> {
        let mut rows = self.items("history");
        rows.retain(|row| row["movedTo"].is_null());
        rows
    }
}

/// Asks every device of `fleet` for `path_and_query` (`/api/history`) at once, each within
/// `within`; the answers in the fleet's order.
pub(crate) fn ask_all<'a>(
    fleet: &'a Fleet,
    path_and_query: &str,
    within: Duration,
) -> Vec<Answer<'a>> {
    std::thread::scope(|scope| {
        let asked: Vec<_> = fleet
            .devices
            .iter()
            .map(|member| (member, scope.spawn(move || ask(member, path_and_query, within))))
            .collect();
        asked
            .into_iter()
            .map(|(member, asking)| Answer {
                member,
                body: asking.join().unwrap_or_else(|_| Err("the request panicked".to_owned())),
            })
            .collect()
    })
}

/// Asks one device for `path_and_query` within `within`: its JSON, or why not.
pub(crate) fn ask(
    member: &Member,
    path_and_query: &str,
    within: Duration,
) -> Result<Value, String> {
    let response = request(member, path_and_query, within, None)?;
    json_of(response)
}

/// Asks one device for the bytes at `path_and_query` (an archive) within `within`.
pub(crate) fn fetch(
    member: &Member,
    path_and_query: &str,
    within: Duration,
) -> Result<Vec<u8>, String> {
    let mut response = request(member, path_and_query, within, None)?;
    if response.status().as_u16() != 200 {
        return json_of(response).map(|_| Vec::new());
    }
    response
        .body_mut()
        .with_config()
        .limit(ANSWER_BYTES_MAX)
        .read_to_vec()
        .map_err(|error| error.to_string())
}

/// Posts `body` (JSON) to one device at `path` within `within`: its JSON answer, or why not.
pub(crate) fn post(
    member: &Member,
    path: &str,
    body: &Value,
    within: Duration,
) -> Result<Value, String> {
    let response = request(member, path, within, Some(body))?;
    json_of(response)
}

/// One request to a device, with its token, within `within` (a POST when `body` is given).
fn request(
    member: &Member,
    path_and_query: &str,
    within: Duration,
    body: Option<&Value>,
) -> Result<ureq::http::Response<ureq::Body>, String> {
    let token =
        crate::files::read_token(&member.token_file).map_err(|error| format!("{error:#}"))?;
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(within))
        .http_status_as_error(false)
        .build()
        .into();
    let url = format!("{}{path_and_query}", member.url);
    let bearer = format!("Bearer {token}");
    let sent = match body {
        None => agent.get(&url).header("Authorization", &bearer).call(),
        Some(body) => agent
            .post(&url)
            .header("Authorization", &bearer)
            .header("Content-Type", "application/json")
            .send(body.to_string()),
    };
    sent.map_err(|error| match error {
        ureq::Error::Timeout(_) => format!("no answer within {within:?}"),
        other => other.to_string(),
    })
}

/// A device's answer as JSON: its body when the status is 200, else why not.
fn json_of(mut response: ureq::http::Response<ureq::Body>) -> Result<Value, String> {
    let status = response.status().as_u16();
    let body: Value = response
        .body_mut()
        .with_config()
        .limit(ANSWER_BYTES_MAX)
        .read_json()
        .map_err(|error| format!("HTTP {status}, not JSON: {error}"))?;
    if status != 200 {
        // A device's own words reach a terminal: shown literally, never as escapes.
        let said = crate::render::literal(body["error"].as_str().unwrap_or("no reason given"));
        return Err(format!("HTTP {status}: {said}"));
    }
    Ok(body)
}

/// The harness session of `member` whose id is `reference` or starts with it, as its listing
/// (`GET /api/history`) has it; bad input when it has none or several, or does not answer.
pub(crate) fn resolve(member: &Member, reference: &str) -> anyhow::Result<Value> {
    let listing = ask(member, "/api/history", ANSWER_WITHIN)
        .map_err(|why| BadInput(format!("{} is unreachable: {why}", member.name)))?;
    let mut rows = listing["history"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|row| row["id"].as_str().is_some_and(|id| id.starts_with(reference)));
    match (rows.next(), rows.next()) {
        (Some(row), None) => Ok(row.clone()),
        (None, _) => {
            Err(BadInput(format!("{} has no harness session {reference:?}", member.name)).into())
        }
        (Some(_), Some(_)) => Err(BadInput(format!(
            "{}:{reference} names more than one session; give more of the id",
            member.name
        ))
        .into()),
    }
}

/// `/api/history/HARNESS/ID` and what follows, each part encoded.
pub(crate) fn history_path(harness: &str, id: &str, rest: &str) -> String {
    let encode = |text: &str| form_urlencoded::byte_serialize(text.as_bytes()).collect::<String>();
    format!("/api/history/{}/{}{rest}", encode(harness), encode(id))
}

/// Where a store records the conversations that moved to another device (one file each).
pub(crate) const MOVED_DIR: &str = "moved";

/// The record of `harness`'s session `id` having moved, under the store at `root`; `None` for
/// an id that cannot name a file (harness ids are UUIDs: letters, digits and `-`).
pub(crate) fn moved_path(root: &Path, harness: &str, id: &str) -> Option<PathBuf> {
    file_stem(harness, id).map(|stem| root.join(MOVED_DIR).join(format!("{stem}.json")))
}

/// `HARNESS-ID`, the start of the name of a file the store keeps about one harness session
/// (a move record, a migration's archive, an import's provenance); `None` for a name that
/// could not be a file's (harness ids are UUIDs: letters, digits and `-`).
pub(crate) fn file_stem(harness: &str, id: &str) -> Option<String> {
    let plain = |text: &str| {
        !text.is_empty()
            && text.len() <= 128
            && text.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
    };
    (plain(harness) && plain(id)).then(|| format!("{harness}-{id}"))
}

/// Every conversation of the store at `root` that moved, by (harness, id): where it went
/// (`{"device", "host"}`) and when. An unreadable record is skipped.
pub(crate) fn moved(root: &Path) -> std::collections::HashMap<(String, String), Value> {
    let mut moved = std::collections::HashMap::new();
    let Ok(entries) = std::fs::read_dir(root.join(MOVED_DIR)) else { return moved };
    for entry in entries.filter_map(Result::ok) {
        let Ok(text) = std::fs::read_to_string(entry.path()) else { continue };
        let Ok(record) = serde_json::from_str::<Value>(&text) else { continue };
        if let (Some(harness), Some(id)) =
            (record["harness"].as_str(), record["sessionId"].as_str())
        {
            moved.insert((harness.to_owned(), id.to_owned()), record.clone());
        }
    }
    moved
}

/// Records that `harness`'s session `id` moved to the device `to` (`{"device", "host"}`),
/// whole or not at all. Recording the same move again changes nothing; a move to another
/// device than the one recorded is refused (a conversation has one owner).
pub(crate) fn record_moved(
    root: &Path,
    harness: &str,
    id: &str,
    to: &Value,
) -> anyhow::Result<bool> {
    let path = moved_path(root, harness, id)
        .ok_or_else(|| BadInput(format!("{harness} session {id:?} cannot be recorded as moved")))?;
    if let Ok(text) = std::fs::read_to_string(&path) {
        let record: Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a move record", path.display()))?;
        if record["to"]["device"] == to["device"] {
            return Ok(false);
        }
        return Err(BadInput(format!(
            "{harness} {id} moved to device {} already",
            record["to"]["device"]
        ))
        .into());
    }
    let record = serde_json::json!({
        "harness": harness,
        "sessionId": id,
        "to": to,
        "movedAt": crate::when::stored_ts(jiff::Timestamp::now()),
    });
    crate::files::place(&path, &serde_json::to_vec_pretty(&record)?)?;
    Ok(true)
}

/// A reference to another device's conversation, `DEVICE:ID`, when `text` is one of `fleet`'s.
pub(crate) fn remote<'a>(fleet: &'a Fleet, text: &'a str) -> Option<(&'a Member, &'a str)> {
    let (name, id) = text.split_once(':')?;
    fleet.member(name).map(|member| (member, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_urls_are_checked() {
        assert!(check_name("laptop-2").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("a:b").is_err(), "a name is typed before a colon");
        assert_eq!(check_url("http://127.0.0.1:7478/").unwrap(), "http://127.0.0.1:7478");
        assert!(check_url("https://host:1").is_err());
        assert!(check_url("http://host:1/api").is_err());
        assert!(check_url("http://user@host:1").is_err());
    }
}
