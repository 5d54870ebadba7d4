//! The SQLite competitor: bundled SQLite, WAL, `synchronous=FULL`, each transition in one
//! transaction, the same line bytes as the engine.

use std::path::Path;

use rusqlite::{Connection, params};

/// Opens (creating) the database at `path` with the durability a user would choose.
pub fn open(path: &Path) -> rusqlite::Result<Connection> {
    let connection = Connection::open(path)?;
    connection.pragma_update(None, "journal_mode", "WAL")?;
    connection.pragma_update(None, "synchronous", "FULL")?;
    connection.busy_timeout(std::time::Duration::from_secs(30))?;
    connection.execute_batch(
        "CREATE TABLE IF NOT EXISTS timeline(
             seq INTEGER PRIMARY KEY, session TEXT NOT NULL, line TEXT NOT NULL);
         CREATE INDEX IF NOT EXISTS timeline_session ON timeline(session, seq);
         CREATE TABLE IF NOT EXISTS queue(
             seq INTEGER PRIMARY KEY, session TEXT NOT NULL, mid TEXT NOT NULL,
             entry TEXT NOT NULL);
         CREATE INDEX IF NOT EXISTS queue_session ON queue(session, seq);",
    )?;
    Ok(connection)
}

/// A send: the timeline row and the queue row, in one transaction.
pub fn send(
    connection: &mut Connection,
    session: &str,
    line: &[u8],
    mid: &str,
    entry: &str,
) -> rusqlite::Result<()> {
    let transaction =
        connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    transaction.execute(
        "INSERT INTO timeline(session, line) VALUES (?1, ?2)",
        params![session, std::str::from_utf8(line).unwrap_or_default()],
    )?;
    transaction.execute(
        "INSERT INTO queue(session, mid, entry) VALUES (?1, ?2, ?3)",
        params![session, mid, entry],
    )?;
    transaction.commit()
}

/// Drains the head of `session`'s queue: read it, hand it to `deliver`, insert a settlement,
/// delete the entry, in one transaction. Returns false when the queue is empty.
pub fn drain_one(
    connection: &mut Connection,
    session: &str,
    settlement: impl FnOnce(&str) -> Vec<u8>,
) -> rusqlite::Result<bool> {
    let transaction =
        connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let head: Option<(i64, String, String)> = transaction
        .query_row(
            "SELECT seq, mid, entry FROM queue WHERE session = ?1 ORDER BY seq LIMIT 1",
            params![session],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .map(Some)
        .or_else(|error| match error {
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            error => Err(error),
        })?;
    let Some((seq, mid, entry)) = head else { return Ok(false) };
    std::hint::black_box(&entry);
    let line = settlement(&mid);
    transaction.execute(
        "INSERT INTO timeline(session, line) VALUES (?1, ?2)",
        params![session, std::str::from_utf8(&line).unwrap_or_default()],
    )?;
    transaction.execute("DELETE FROM queue WHERE seq = ?1", params![seq])?;
    transaction.commit()?;
    Ok(true)
}

/// The last `limit` lines of `session`, oldest first.
pub fn tail(connection: &Connection, session: &str, limit: usize) -> rusqlite::Result<Vec<String>> {
    let mut statement = connection.prepare_cached(
        "SELECT line FROM timeline WHERE session = ?1 ORDER BY seq DESC LIMIT ?2",
    )?;
    let mut lines: Vec<String> = statement
        .query_map(params![session, limit as i64], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    lines.reverse();
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_competitor_sends_drains_and_tails() {
        let dir = tempfile::tempdir().unwrap();
        let mut connection = open(&dir.path().join("t.sqlite")).unwrap();
        let mode: String =
            connection.pragma_query_value(None, "journal_mode", |row| row.get(0)).unwrap();
        assert_eq!(mode, "wal");
        let sync: i64 =
            connection.pragma_query_value(None, "synchronous", |row| row.get(0)).unwrap();
        assert_eq!(sync, 2, "synchronous=FULL");
        for i in 0..3 {
            send(&mut connection, "s", format!("line {i}").as_bytes(), &format!("m{i}"), "e")
                .unwrap();
        }
        let mut drained = Vec::new();
        while drain_one(&mut connection, "s", |mid| {
            drained.push(mid.to_owned());
            b"settled".to_vec()
        })
        .unwrap()
        {}
        assert_eq!(drained, ["m0", "m1", "m2"]);
        let lines = tail(&connection, "s", 2).unwrap();
        assert_eq!(lines, ["settled", "settled"]);
    }
}
