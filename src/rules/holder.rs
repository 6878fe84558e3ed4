//! The holder value (docs/DESIGN.md, "By holder value"): the secret every entry of a hold
//! carries, which every extend and release compares. Minted, checked, shaped for the fair
//! forms and read back here alone; redacted wherever it is shown.
//!
//! The forms the library makes (every part printable ASCII, no spaces):
//! - plain: 128 random bits as 32 hex digits;
//! - a reentrant owner's: `<client id>:<owner id>:<128 random bits>`;
//! - a fair request's: its base `fair:<waiter id>:<128 random bits>`, followed by
//!   `:<64 random bits>` (one attempt), `:g` (a grant a node made) or `:h<round>` (a hand-off
//!   by the request's own client). The waiter id is public (grant notices name it); the
//!   random part is the secret.

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};

/// The longest holder value accepted (256 bytes). The library's own holder values are 32
/// characters, or about 100 for a reentrant [`Owner`](crate::Owner)'s or a fair lock's.
pub const MAX_HOLDER_LEN: usize = 256;

/// How a fair holder value starts.
const FAIR_PREFIX: &str = "fair:";

/// A holder value. Its text is the proof of a hold, so its `Debug` shows only its form and
/// length (and a fair value's public waiter id), never the secret.
///
/// The library hands holder values out as strings
/// ([`LockGuard::into_holder`](crate::LockGuard::into_holder)) and takes them as strings
/// ([`QuorumLock::extend_by_holder`](crate::QuorumLock::extend_by_holder)); this type reads one:
///
/// ```
/// use quorum_lock::{Holder, HolderForm};
/// let h = Holder::parse("0123456789abcdef0123456789abcdef").unwrap();
/// assert_eq!(h.form(), HolderForm::Plain);
/// assert!(!format!("{h:?}").contains("0123"));
/// assert!(Holder::parse("has a space").is_err());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Holder(Arc<str>);

/// The form of a holder value (see [`Holder::form`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HolderForm {
    /// A fair lock's (`fair:<waiter id>:...`).
    Fair,
    /// A reentrant owner's (`<client id>:<owner id>:<secret>`).
    Owner,
    /// Anything else: the library's plain form (32 hex digits), or a value of the
    /// application's own.
    Plain,
}

impl Holder {
    /// Checks a holder value given to a call: 1 to [`MAX_HOLDER_LEN`] bytes of printable ASCII
    /// without spaces, the characters of every holder value. A line read with its newline, or
    /// an empty one, is refused here rather than by every node.
    ///
    /// # Errors
    /// [`Error::InvalidHolder`], whose reason never quotes the value.
    pub fn parse(value: &str) -> Result<Holder> {
        let invalid = |reason: String| Err(Error::InvalidHolder { reason });
        if value.is_empty() {
            return invalid("must not be empty".into());
        }
        if value.len() > MAX_HOLDER_LEN {
            return invalid(format!(
                "{} bytes, longer than {MAX_HOLDER_LEN}",
                value.len()
            ));
        }
        if let Some(at) = value.bytes().position(|b| !b.is_ascii_graphic()) {
            return invalid(format!(
                "byte {} is not printable ASCII (a holder value has no spaces, line ends or \
                 control characters)",
                at + 1
            ));
        }
        Ok(Holder(value.into()))
    }

    /// The value itself: the secret, for the calls that send it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Which form of holder value this is.
    pub fn form(&self) -> HolderForm {
        if self.fair_parts().is_some() {
            HolderForm::Fair
        } else if self.0.split(':').count() == 3 && !self.0.starts_with(FAIR_PREFIX) {
            HolderForm::Owner
        } else {
            HolderForm::Plain
        }
    }

    /// A fair value's waiter id (public: the grant notices name it).
    pub fn fair_waiter(&self) -> Option<&str> {
        self.fair_parts().map(|(waiter, _)| waiter)
    }

    /// A fresh holder value for an attempt: 128 random bits, prefixed for a reentrant owner
    /// with the client's and the owner's ids.
    pub(crate) fn mint(owner: Option<(&str, &str)>) -> Holder {
        let secret = secret();
        Holder(
            match owner {
                Some((client, owner)) => format!("{client}:{owner}:{secret}"),
                None => secret,
            }
            .into(),
        )
    }

    /// A new fair request's identity: its waiter id, tagged with its client (so that a short
    /// grant's notice names the next waiter of another client, see
    /// `family/lua/fair_line.lua`), and its base, `fair:<waiter id>:<128 random bits>` (the
    /// random part makes the base a secret, so that a call by holder value can leave the line
    /// and hand the key on only with a real guard's holder).
    pub(crate) fn fair_base(client_tag: &str) -> (Arc<str>, Holder) {
        let waiter = format!("{client_tag}.{}", uuid::Uuid::new_v4().simple());
        let base = format!("{FAIR_PREFIX}{waiter}:{}", secret());
        (waiter.into(), Holder(base.into()))
    }

    /// A fair base's value for one attempt: the base and 64 random bits.
    pub(crate) fn fair_attempt(&self) -> Holder {
        Holder(format!("{}:{:016x}", self.0, rand::random::<u64>()).into())
    }

    /// A fair base's hand-off value for round `round` (see `family::Fair::handed_holder`).
    pub(crate) fn fair_handed(&self, round: u64) -> Holder {
        Holder(format!("{}:h{round}", self.0).into())
    }

    /// The waiter id and the base of a fair value (an attempt's, a grant's or a hand-off's).
    pub(crate) fn fair_parts(&self) -> Option<(&str, &str)> {
        let value = &*self.0;
        let rest = value.strip_prefix(FAIR_PREFIX)?;
        let (waiter, rest) = rest.split_once(':')?;
        let (secret, suffix) = rest.split_once(':')?;
        let base = &value[..value.len() - suffix.len() - 1];
        let parts = [waiter, secret, suffix];
        (parts.iter().all(|p| !p.is_empty()) && !suffix.contains(':')).then_some((waiter, base))
    }

    /// A fair value's base, as a holder value of its own.
    pub(crate) fn fair_base_of(&self) -> Option<(Arc<str>, Holder)> {
        let (waiter, base) = self.fair_parts()?;
        Some((waiter.into(), Holder(base.into())))
    }
}

/// 128 bits from the thread's cryptographically secure generator, as 32 hex digits: the
/// secret part of every holder value.
fn secret() -> String {
    format!("{:032x}", rand::random::<u128>())
}

impl fmt::Debug for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.fair_waiter() {
            Some(waiter) => write!(f, "Holder(fair, waiter {waiter}, <redacted>)"),
            None => write!(
                f,
                "Holder({:?}, {} bytes, <redacted>)",
                self.form(),
                self.0.len()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_forms_read_back_and_never_show_their_secret() {
        let plain = Holder::mint(None);
        assert_eq!(plain.as_str().len(), 32);
        assert_eq!(plain.form(), HolderForm::Plain);
        let owned = Holder::mint(Some(("client", "owner")));
        assert_eq!(owned.form(), HolderForm::Owner);

        let (waiter, base) = Holder::fair_base("abcd1234");
        assert!(waiter.starts_with("abcd1234."));
        for value in [base.fair_attempt(), base.fair_handed(3)] {
            assert_eq!(value.form(), HolderForm::Fair);
            assert_eq!(value.fair_waiter(), Some(&*waiter));
            assert_eq!(value.fair_base_of().unwrap().1, base);
        }
        // A grant a node made: the base and `:g`.
        let granted = Holder::parse(&format!("{}:g", base.as_str())).unwrap();
        assert_eq!(granted.fair_parts().unwrap().1, base.as_str());
        // The base alone is not a fair holder value (no suffix).
        assert_eq!(base.fair_parts(), None);

        for value in [&plain, &owned, &base.fair_attempt()] {
            let secret = value.as_str().rsplit(':').find(|p| p.len() >= 16).unwrap();
            assert!(!format!("{value:?}").contains(secret), "{value:?}");
        }
    }

    #[test]
    fn a_secret_is_128_random_bits_in_lowercase_hex() {
        let (a, b) = (secret(), secret());
        for s in [&a, &b] {
            assert_eq!(s.len(), 32);
            assert!(s
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
            assert_eq!(
                u128::from_str_radix(s, 16)
                    .map(|n| format!("{n:032x}"))
                    .as_ref(),
                Ok(s)
            );
        }
        assert_ne!(a, b);
    }

    #[test]
    fn a_bad_value_is_refused_without_being_quoted() {
        for (value, why) in [
            ("", "empty"),
            ("a b", "byte 2"),
            ("line\n", "byte 5"),
            ("s3cret-tökén", "byte 9"),
            ("c1:o2:0123 456789abcdef", "byte 11"),
            (&"x".repeat(MAX_HOLDER_LEN + 1), "longer than"),
        ] {
            let e = Holder::parse(value).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
            if value.len() > 3 {
                assert!(!e.contains(value), "{e}");
            }
        }
        assert!(Holder::parse(&"x".repeat(MAX_HOLDER_LEN)).is_ok());
        assert!(Holder::parse("c1:o2:0123456789abcdef").is_ok());
        assert_eq!(
            Holder::parse("fair:w:secret").unwrap().form(),
            HolderForm::Plain
        );
    }
}
