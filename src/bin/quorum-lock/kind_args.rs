//! Which lock of the key `run` and `hold` take: the mutex, a read or write lock, the fair
//! lock, or a semaphore's permit.

use clap::Args;

/// Which lock of the key to take: shared by `run` and `hold`. The mutex unless one is given.
#[derive(Debug, Args)]
#[group(multiple = false)]
pub struct KindArgs {
    /// Take a read lock of the read-write lock KEY: held alongside other readers, never with
    /// a writer.
    #[arg(long)]
    pub read: bool,

    /// Take the write lock of the read-write lock KEY: alone, once its readers have left; a
    /// waiting writer stops new readers.
    #[arg(long)]
    pub write: bool,

    /// Take the fair lock KEY: waiting runs get it in the order they started waiting.
    #[arg(long)]
    pub fair: bool,

    /// Take one permit of the semaphore KEY of P permits: at most P runs hold one at once.
    /// More than one permit: P slots (KEY#0 .. KEY#P-1), each a lock under the quorum, so a
    /// node down stops nothing; every client of KEY must give the same P.
    #[arg(long, value_name = "P", value_parser = clap::value_parser!(u32).range(1..=i64::from(quorum_lock::MAX_SLOTS)))]
    pub permits: Option<u32>,
}

impl KindArgs {
    /// The request for `key` of this kind.
    pub fn request<'a>(
        &self,
        client: &'a quorum_lock::QuorumLock,
        key: &str,
    ) -> quorum_lock::LockRequest<'a> {
        if self.read {
            client.read_lock(key)
        } else if self.write {
            client.write_lock(key)
        } else if self.fair {
            client.fair_lock(key)
        } else if let Some(permits) = self.permits {
            client.semaphore(key, permits)
        } else {
            client.lock(key)
        }
    }
}
