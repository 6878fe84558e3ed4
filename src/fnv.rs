//! FNV-1a (64 bits): a key's place in the node order, the same in every process (see
//! `take::arbiter`), and the hasher of the client's small in-process maps (held leases by key,
//! metric keys by node and operation), which SipHash made cost more than the rest of their
//! lookups. Their entries are the process's own (keys it holds, its nodes), not a peer's
//! choosing, so a keyed hash buys nothing there.

use std::hash::{BuildHasherDefault, Hasher};

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0100_0000_01b3;

/// FNV-1a of `bytes`.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(OFFSET, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

/// FNV-1a's step as a [`Hasher`], a word at a time where it can.
pub(crate) struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(OFFSET)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    /// A word at a time (not FNV-1a's byte at a time: an array of integers comes here as one
    /// slice of bytes), then the last bytes one at a time.
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            let mut w = [0u8; 8];
            w.copy_from_slice(word);
            self.write_u64(u64::from_le_bytes(w));
        }
        for &b in words.remainder() {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(PRIME);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(PRIME);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// For `HashMap<K, V, FnvBuild>`.
pub(crate) type FnvBuild = BuildHasherDefault<Fnv>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_maps_to_the_same_place_in_every_process() {
        // FNV-1a's published test vector: the order must not depend on a per-process seed.
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        // Short inputs hash as FNV-1a; longer ones a word at a time, all of it counted.
        let mut h = Fnv::default();
        h.write(b"a");
        assert_eq!(h.finish(), fnv1a(b"a"));
        let hash = |b: &[u8]| {
            let mut h = Fnv::default();
            h.write(b);
            h.finish()
        };
        assert_ne!(hash(b"0123456789"), hash(b"0123456789x"));
        assert_ne!(hash(b"01234567"), hash(b"01234568"));
    }
}
