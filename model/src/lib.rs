//! The reference model: a small, pure executable specification of the spex transitions and the
//! public state, written without importing the engine (DESIGN.md section 7).
//!
//! Not built yet: this crate holds the workspace's place for it. The verification issue
//! delivers it.
