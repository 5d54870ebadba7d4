//! The digests of a keyed send.
//!
//! # Encoding
//!
//! Each digest is lowercase-hex SHA-256 over a domain tag followed by fields, each field framed
//! as its length in bytes (u64, big-endian) and then its bytes, so no two different inputs share
//! an encoding. An optional field is a one-byte presence flag (0 or 1) and, when present, the
//! framed value. Attributes are framed as their compact JSON with keys in stored order.
//!
//! - `requestDigest = SHA-256("spex.request-digest.v1", operation, key)`: names the request
//!   without storing the raw key.
//! - `payloadHash = SHA-256("spex.payload-hash.v1", operation, requestDigest, text, from?,
//!   replyVia?, attributes?)`: the request as the caller made it (raw text, sender, explicit
//!   reply channel, attributes).
//!
//! The payload hash covers the *request*, not the composed transport text: composition depends
//! on the log (the previous human send's channel), which the original send itself changes, so a
//! faithful retry would otherwise compose differently and be refused as a conflict. The exact
//! composed bytes are frozen in the receipt's `delivery` instead.

use sha2::{Digest, Sha256};

fn frame(hasher: &mut Sha256, field: &[u8]) {
    hasher.update((field.len() as u64).to_be_bytes());

    hasher.update(field);
}

fn frame_optional(hasher: &mut Sha256, field: Option<&[u8]>) {
    match field {
        None => hasher.update([0u8]),
        Some(bytes) => {
            hasher.update([1u8]);
            frame(hasher, bytes);
        }
    }
}

/// `requestDigest` of (operation, key).
pub fn request_digest(operation: &str, key: &str) -> String {
    let mut hasher = Sha256::new();
    frame(&mut hasher, b"spex.request-digest.v1");
    frame(&mut hasher, operation.as_bytes());
    frame(&mut hasher, key.as_bytes());
    let digest = hex::encode(hasher.finalize());
    debug_assert!(is_hex_digest(&digest), "a request digest is 64 lowercase hex digits");
    digest
}

/// Whether `text` is a digest as receipts store it: 64 lowercase hex digits.
pub(crate) fn is_hex_digest(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
}

/// The request a payload hash covers.
#[derive(Clone, Copy, Debug)]
pub struct Payload<'a> {
    /// The raw text.
    pub text: &'a str,
    /// The sender.
    pub from: Option<&'a str>,
    /// The explicit reply channel, if the caller gave one.
    pub reply_via: Option<&'a str>,
    /// Delivery attributes.
    pub attributes: Option<&'a serde_json::Map<String, serde_json::Value>>,
}

/// `payloadHash` of (operation, request digest, payload).
pub fn payload_hash(operation: &str, request_digest: &str, payload: &Payload<'_>) -> String {
    let mut hasher = Sha256::new();
    frame(&mut hasher, b"spex.payload-hash.v1");
    frame(&mut hasher, operation.as_bytes());
    frame(&mut hasher, request_digest.as_bytes());
    frame(&mut hasher, payload.text.as_bytes());
    frame_optional(&mut hasher, payload.from.map(str::as_bytes));
    frame_optional(&mut hasher, payload.reply_via.map(str::as_bytes));
    let attributes = payload
        .attributes
        .map(|map| serde_json::to_vec(map).expect("a JSON map always serializes"));
    frame_optional(&mut hasher, attributes.as_deref());
    let hash = hex::encode(hasher.finalize());
    debug_assert!(is_hex_digest(&hash), "a payload hash is 64 lowercase hex digits");
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_is_unambiguous() {
        assert_ne!(request_digest("ab", "c"), request_digest("a", "bc"));
        assert_eq!(request_digest("op", "k").len(), 64);
        let payload = |text, from| Payload { text, from, reply_via: None, attributes: None };
        let digest = request_digest("op", "k");
        assert_ne!(
            payload_hash("op", &digest, &payload("x", None)),
            payload_hash("op", &digest, &payload("x", Some("")))
        );
        assert_eq!(
            payload_hash("op", &digest, &payload("x", None)),
            payload_hash("op", &digest, &payload("x", None))
        );
    }
}
