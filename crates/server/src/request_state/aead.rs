//! Tokens that must be secret as well as authentic (the console's session cookie carries
//! bearer and refresh tokens): AES-256-GCM under a key derived from each state key.
//!
//! Each state key gives its own AEAD key (HKDF-SHA256, so the HMAC keys are never used
//! for encryption as they are), so rotation works as it does for signed tokens: the
//! first key seals, every key opens. The nonce is random (96 bits) and travels with the
//! token; the prefix is the associated data, so a token of one kind never opens as
//! another.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::hkdf;

use super::StateKeys;

const SALT: &[u8] = b"mcp-tasks state key";
const INFO: &[u8] = b"sealed token aes-256-gcm v1";
/// Nonce and tag: what sealing adds to the payload, before base64.
pub(crate) const OVERHEAD: usize = NONCE_LEN + 16;

fn aead_key(state_key: &[u8]) -> LessSafeKey {
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, SALT).extract(state_key);
    // Expanding to AES-256's key length cannot fail (it is far below 255 * 32 bytes).
    let okm = prk
        .expand(&[INFO], &AES_256_GCM)
        .unwrap_or_else(|_| unreachable!());
    LessSafeKey::new(UnboundKey::from(okm))
}

impl StateKeys {
    /// `{prefix}{base64(nonce ‖ ciphertext ‖ tag)}`: `payload` encrypted and
    /// authenticated under the first key, the prefix authenticated too.
    pub fn encrypt(&self, prefix: &str, payload: &[u8]) -> String {
        let nonce: [u8; NONCE_LEN] = rand::random();
        let mut sealed = Vec::with_capacity(NONCE_LEN + payload.len() + 16);
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(payload);
        let tag = aead_key(&self.keys[0])
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(prefix.as_bytes()),
                &mut sealed[NONCE_LEN..],
            )
            // Only payloads of many gigabytes are refused.
            .unwrap_or_else(|_| unreachable!());
        sealed.extend_from_slice(tag.as_ref());
        format!("{prefix}{}", B64.encode(sealed))
    }

    /// The payload of a token [`Self::encrypt`]ed with `prefix` under any of the keys, or
    /// `None` when it is malformed, of another kind, longer than `max_bytes`, altered in
    /// any byte, or sealed under a key this replica does not have.
    pub fn decrypt(&self, prefix: &str, token: &str, max_bytes: usize) -> Option<Vec<u8>> {
        if token.len() > max_bytes {
            return None;
        }
        let sealed = B64.decode(token.strip_prefix(prefix)?).ok()?;
        if sealed.len() < OVERHEAD {
            return None;
        }
        let (nonce, ciphertext) = sealed.split_at(NONCE_LEN);
        self.keys.iter().find_map(|key| {
            let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
            let mut buffer = ciphertext.to_vec();
            let plain = aead_key(key)
                .open_in_place(nonce, Aad::from(prefix.as_bytes()), &mut buffer)
                .ok()?;
            Some(plain.to_vec())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(spec: &str) -> StateKeys {
        StateKeys::parse(spec).expect("keys")
    }

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    #[test]
    fn a_sealed_token_hides_its_payload_and_opens_under_any_key_of_the_set() {
        let payload = b"a bearer token that must stay secret";
        let token = keys(A).encrypt("x1.", payload);
        assert!(!token.as_bytes().windows(10).any(|w| payload.starts_with(w)));
        assert!(!token.contains(&B64.encode(payload)[..20]));
        assert_eq!(
            keys(A).decrypt("x1.", &token, 4096).as_deref(),
            Some(&payload[..])
        );
        // Rotation: the new key first, the old one still opens what it sealed.
        assert_eq!(
            keys(&format!("{B},{A}"))
                .decrypt("x1.", &token, 4096)
                .as_deref(),
            Some(&payload[..])
        );
        // Once the old key is dropped, it does not.
        assert_eq!(keys(B).decrypt("x1.", &token, 4096), None);
        // Two seals of one payload differ (a fresh nonce each).
        assert_ne!(keys(A).encrypt("x1.", payload), token);
    }

    #[test]
    fn an_altered_truncated_foreign_or_other_kind_token_does_not_open() {
        let k = keys(A);
        let token = k.encrypt("x1.", b"payload");
        assert_eq!(k.decrypt("y1.", &token, 4096), None);
        assert_eq!(k.decrypt("x1.", &token, token.len() - 1), None);
        let body = B64.decode(&token[3..]).expect("base64");
        for i in 0..body.len() {
            let mut altered = body.clone();
            altered[i] ^= 1;
            let altered = format!("x1.{}", B64.encode(&altered));
            assert_eq!(k.decrypt("x1.", &altered, 4096), None, "byte {i}");
            let cut = format!("x1.{}", B64.encode(&body[..i]));
            assert_eq!(k.decrypt("x1.", &cut, 4096), None, "cut at {i}");
        }
        assert_eq!(k.decrypt("x1.", "x1.!!!", 4096), None);
        assert_eq!(k.decrypt("x1.", "", 4096), None);
    }
}
