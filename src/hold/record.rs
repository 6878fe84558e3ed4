//! A lease's holder record as this client last asked for it (docs/DESIGN.md, "Who holds a
//! lock"): its version (every publish takes the next one, also one that failed or was
//! cancelled, whose request may still land) and its fields, which a repair puts back with
//! the entry.

use std::sync::Mutex;

#[derive(Default)]
pub(crate) struct Record(Mutex<(u64, Vec<(String, String)>)>);

impl Record {
    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, Vec<(String, String)>)> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a record was ever asked for: renewals then move its expiry with the entry's.
    pub(crate) fn exists(&self) -> bool {
        self.lock().0 > 0
    }

    /// Takes `fields` as the record, with the next version, which it returns; with `first`,
    /// only when no record was asked for yet (`None` otherwise: a reentrant owner's first
    /// label stays).
    pub(crate) fn next(&self, fields: &[(&str, &str)], first: bool) -> Option<u64> {
        let mut record = self.lock();
        if first && record.0 > 0 {
            return None;
        }
        record.0 += 1;
        record.1 = fields
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        Some(record.0)
    }

    /// The version and fields last asked for.
    pub(crate) fn current(&self) -> (u64, Vec<(String, String)>) {
        self.lock().clone()
    }
}

/// Whether someone asked the holder to release (`QuorumLock::request_release`), and the
/// waits for it.
#[derive(Default)]
pub(crate) struct Asked {
    flag: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

impl Asked {
    /// Someone asked: the waits end. True the first time.
    pub(crate) fn ask(&self) -> bool {
        let first = !self.flag.swap(true, std::sync::atomic::Ordering::SeqCst);
        self.notify.notify_waiters();
        first
    }

    pub(crate) fn is_asked(&self) -> bool {
        self.flag.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Completes once someone asked (at once if that happened already).
    pub(crate) async fn wait(&self) {
        loop {
            let asked = self.notify.notified();
            tokio::pin!(asked);
            asked.as_mut().enable();
            if self.is_asked() {
                return;
            }
            asked.await;
        }
    }
}
