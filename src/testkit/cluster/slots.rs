//! The slot map of a [`ClusterFleet`]'s clusters: which member serves what, and changing it
//! as operators do (a slot migrated to another primary, a replica taking over).

use std::io;
use std::time::{Duration, Instant};

use super::super::START_TIMEOUT;
use super::ClusterFleet;

impl ClusterFleet {
    /// The member of cluster `c` that serves `key`'s slot now (asked with `CLUSTER SLOTS` of
    /// a running member).
    ///
    /// # Errors
    /// No running member answered, or none serves the slot.
    pub fn primary_of(&self, c: usize, key: &[u8]) -> io::Result<usize> {
        self.primary_of_slot(c, crate::rules::key::slot(key))
    }

    /// Member `m` of cluster `c`, a replica, takes over from its primary (`CLUSTER FAILOVER`,
    /// or `CLUSTER FAILOVER TAKEOVER` when `force`: without the primary's agreement, as
    /// when it is down); returns once the member reports itself a primary and every running
    /// member's map names it.
    ///
    /// # Errors
    /// The member refused, or was not a primary within [`START_TIMEOUT`].
    pub fn failover(&self, c: usize, m: usize, force: bool) -> io::Result<()> {
        let mut conn = self.connect(c, m)?;
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("FAILOVER");
        if force {
            cmd.arg("TAKEOVER");
        }
        cmd.query::<()>(&mut conn).map_err(io::Error::other)?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let role: Vec<redis::Value> = redis::cmd("ROLE")
                .query(&mut conn)
                .map_err(io::Error::other)?;
            if matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master") {
                // Every member knows the new primary before the next step.
                let port = self.member(c, m).port();
                return self.wait_agreed(c, |ranges| ranges.iter().any(|r| r.3 == port));
            }
            if Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "member {m} of cluster {c} was not a primary in time"
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The replica of cluster `c` that follows member `primary` now (asked with `ROLE` of
    /// each running member), if it has one.
    ///
    /// # Errors
    /// No running member answered.
    pub fn replica_of(&self, c: usize, primary: usize) -> io::Result<Option<usize>> {
        let port = i64::from(self.member(c, primary).port());
        let mut answered = false;
        for m in (0..self.members()).filter(|&m| m != primary) {
            if self.clusters[c][m].pid().is_none() {
                continue;
            }
            let Ok(mut conn) = self.connect(c, m) else {
                continue;
            };
            let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
            let Ok(role) = redis::cmd("ROLE").query::<Vec<redis::Value>>(&mut conn) else {
                continue;
            };
            answered = true;
            let follows = matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"slave")
                && matches!(role.get(2), Some(redis::Value::Int(p)) if *p == port);
            if follows {
                return Ok(Some(m));
            }
        }
        if answered {
            Ok(None)
        } else {
            Err(io::Error::other(format!(
                "no member of cluster {c} answered ROLE"
            )))
        }
    }

    /// Moves `slot` of cluster `c` from the primary serving it to primary `to`, keys and all,
    /// as `redis-cli --cluster reshard` does: `SETSLOT IMPORTING` on `to`, `SETSLOT
    /// MIGRATING` on the source, `MIGRATE` of the slot's keys (their TTLs go with them),
    /// `midway` in that state (the source answers `ASK` for a key it does not have), the keys
    /// written meanwhile moved too, then `SETSLOT NODE` on every running primary (the source
    /// answers `MOVED` from then on); returns once every running member's map says so.
    /// Nothing happens when `to` already serves the slot.
    ///
    /// # Errors
    /// A member refused a step (`BUSYKEY`: the key exists on both primaries), or did not
    /// answer; the slot may be left migrating.
    pub fn migrate_slot(&self, c: usize, slot: u16, to: usize, midway: Duration) -> io::Result<()> {
        let from = self.primary_of_slot(c, slot)?;
        if from == to {
            return Ok(());
        }
        let id = |m: usize| -> io::Result<String> {
            redis::cmd("CLUSTER")
                .arg("MYID")
                .query(&mut self.connect(c, m)?)
                .map_err(io::Error::other)
        };
        let (from_id, to_id) = (id(from)?, id(to)?);
        let setslot = |m: usize, state: &str, node: &str| -> io::Result<()> {
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg(state)
                .arg(node)
                .query::<()>(&mut self.connect(c, m)?)
                .map_err(io::Error::other)
        };
        setslot(to, "IMPORTING", &from_id)?;
        setslot(from, "MIGRATING", &to_id)?;
        let mut source = self.connect(c, from)?;
        let _ = source.set_read_timeout(Some(Duration::from_secs(5)));
        let to_port = self.member(c, to).port();
        let mut move_keys = || -> io::Result<()> {
            loop {
                let keys: Vec<Vec<u8>> = redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(slot)
                    .arg(100)
                    .query(&mut source)
                    .map_err(io::Error::other)?;
                if keys.is_empty() {
                    return Ok(());
                }
                // REPLACE: a MIGRATE cut short by a timeout may have restored some keys on
                // the target already; the source's copy is the one in force (every write
                // goes to the source while it has the key).
                redis::cmd("MIGRATE")
                    .arg("127.0.0.1")
                    .arg(to_port)
                    .arg("")
                    .arg(0)
                    .arg(5000)
                    .arg("REPLACE")
                    .arg("KEYS")
                    .arg(&keys)
                    .query::<()>(&mut source)
                    .map_err(io::Error::other)?;
            }
        };
        move_keys()?;
        std::thread::sleep(midway);
        move_keys()?;
        // The new owner first, then the source, then the rest (as the reshard tool does).
        setslot(to, "NODE", &to_id)?;
        setslot(from, "NODE", &to_id)?;
        for m in self.primaries(c)? {
            if m != to && m != from && self.clusters[c][m].pid().is_some() {
                setslot(m, "NODE", &to_id)?;
            }
        }
        let port = self.member(c, to).port();
        self.wait_agreed(c, |ranges| {
            ranges
                .iter()
                .any(|(s, e, _, p)| (*s..=*e).contains(&i64::from(slot)) && *p == port)
        })
    }

    /// Waits until every running member of cluster `c` that answers `CLUSTER SLOTS` answers
    /// with a map that satisfies `agreed` (gossip spreads a change in moments; a next fault
    /// must not find members that disagree). A member that does not answer (paused,
    /// restarting) is not waited for.
    ///
    /// # Errors
    /// Not within [`START_TIMEOUT`].
    fn wait_agreed(
        &self,
        c: usize,
        agreed: impl Fn(&[(i64, i64, String, u16)]) -> bool,
    ) -> io::Result<()> {
        let running: Vec<usize> = (0..self.members())
            .filter(|&m| self.clusters[c][m].pid().is_some())
            .collect();
        let mut slots = redis::cmd("CLUSTER");
        slots.arg("SLOTS");
        self.wait_members(
            c,
            &running,
            &slots,
            "agreed on the slot map",
            |map: Option<&redis::Value>, _| map.is_none_or(|v| agreed(&slot_ranges(v))),
        )
    }

    /// The member of cluster `c` that serves `slot` now.
    ///
    /// # Errors
    /// As [`primary_of`](Self::primary_of).
    pub fn primary_of_slot(&self, c: usize, slot: u16) -> io::Result<usize> {
        let slot = i64::from(slot);
        self.slot_owners(c)?
            .into_iter()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .map(|r| r.2)
            .ok_or_else(|| io::Error::other(format!("no member of cluster {c} serves slot {slot}")))
    }

    /// The members of cluster `c` that serve slots now (its primaries), in member order.
    ///
    /// # Errors
    /// No running member answered `CLUSTER SLOTS`.
    pub fn primaries(&self, c: usize) -> io::Result<Vec<usize>> {
        let mut members: Vec<usize> = self.slot_owners(c)?.into_iter().map(|r| r.2).collect();
        members.sort_unstable();
        members.dedup();
        Ok(members)
    }

    /// `(first slot, last slot, member)` of each range of cluster `c`'s `CLUSTER SLOTS`, as a
    /// running member answers it.
    fn slot_owners(&self, c: usize) -> io::Result<Vec<(i64, i64, usize)>> {
        let ranges: Vec<(i64, i64, String, u16)> = self.ask_any(c, |conn| {
            let value: redis::Value = redis::cmd("CLUSTER").arg("SLOTS").query(conn)?;
            Ok(slot_ranges(&value))
        })?;
        ranges
            .into_iter()
            .map(|(start, end, _, port)| {
                let m = self.clusters[c]
                    .iter()
                    .position(|p| p.port() == port)
                    .ok_or_else(|| {
                        io::Error::other(format!("port {port} is not a member of cluster {c}"))
                    })?;
                Ok((start, end, m))
            })
            .collect()
    }
}

/// `(start, end, host, port)` of each range of a `CLUSTER SLOTS` answer.
fn slot_ranges(value: &redis::Value) -> Vec<(i64, i64, String, u16)> {
    let redis::Value::Array(ranges) = value else {
        return Vec::new();
    };
    ranges
        .iter()
        .filter_map(|r| {
            let redis::Value::Array(parts) = r else {
                return None;
            };
            let (Some(redis::Value::Int(s)), Some(redis::Value::Int(e))) =
                (parts.first(), parts.get(1))
            else {
                return None;
            };
            let redis::Value::Array(primary) = parts.get(2)? else {
                return None;
            };
            let host = match primary.first()? {
                redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                _ => String::new(),
            };
            let redis::Value::Int(port) = primary.get(1)? else {
                return None;
            };
            Some((*s, *e, host, u16::try_from(*port).ok()?))
        })
        .collect()
}
