//! What a person or a program asks of a store, written once for every surface: each operation
//! takes a typed input and gives a typed output with its JSON. The CLI's commands and the HTTP
//! server's handlers parse their own arguments into these inputs and show these outputs (as a
//! terminal view, or as the JSON itself); neither builds an engine request, filters the index or
//! redacts a transcript on its own.
//!
//! Crash story: only [`send::send`] writes, and its acknowledgement is the engine's (durable when
//! it returns); everything else is one of the engine's or the index's lock-free reads.
//!
//! Errors are `anyhow` errors holding what failed, as it failed: the engine's or the index's
//! error, or [`BadInput`](crate::exit::BadInput) for an input no operation can carry out. The CLI
//! maps them to its exit codes, the server to its statuses (one table each).

pub(crate) mod agent;
pub(crate) mod export;
pub(crate) mod fleet;
pub(crate) mod list;
pub(crate) mod search;
pub(crate) mod send;
pub(crate) mod show;
pub(crate) mod timeline;
pub(crate) mod usage;
