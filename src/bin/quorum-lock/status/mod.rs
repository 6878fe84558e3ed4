//! `status KEY`: each node's view of the key and the verdict. The key's kind is read from
//! the nodes: a mutex (or a fair lock: the same entry, plus its line), a read-write lock
//! (readers, a writer, a waiting writer's mark) or a semaphore (its permits). Holder values
//! are never shown: entries are told apart by a number per distinct holder.

use std::collections::HashMap;

use futures::future::join_all;
use serde::Serialize;

use crate::args::StatusArgs;
use quorum_lock::{Holder, HolderForm, NodeClient};

use crate::direct::{self, int, text, NodeError};
use crate::exit::{self, Failure};
use crate::settings::Settings;

mod text;
use text::plain;

/// One node's view.
#[derive(Debug, Serialize)]
struct NodeView {
    node: String,
    reachable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// The key's entry (a mutex's, a fair lock's or a writer's) is there.
    held: bool,
    /// A break's tombstone is there (`break`): the key is kept from new holders until it
    /// expires.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    broken: bool,
    /// Which holder (1, 2, ... by order of appearance), when held.
    holder: Option<usize>,
    ttl_ms: Option<i64>,
    fence: Option<i64>,
    /// Live readers of a read-write lock.
    #[serde(skip_serializing_if = "Option::is_none")]
    readers: Option<u64>,
    /// A waiting writer's pending mark (new readers are refused).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    writer_waiting: bool,
    /// Live permits of a semaphore.
    #[serde(skip_serializing_if = "Option::is_none")]
    permits: Option<u64>,
    /// Live waiters in a fair lock's line.
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u64>,
    /// What the holder published beside its entry (a label, since when; an election's
    /// leader value and term), where the record names this node's holder.
    #[serde(skip_serializing_if = "Option::is_none")]
    record: Option<Published>,
}

/// A holder record (see `quorum_lock::names::holder_record`).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
struct Published {
    #[serde(skip_serializing_if = "Option::is_none")]
    label: Option<String>,
    /// Unix time in ms, by the holder's clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    since_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    leader_value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    term: Option<u64>,
}

/// What a node answered, before holder values are replaced by numbers.
#[derive(Default)]
struct Raw {
    /// A string entry: the holder value (never shown).
    holder: Option<String>,
    pttl: Option<i64>,
    fence: Option<i64>,
    readers: u64,
    writer_waiting: bool,
    /// `Some` when the key is a sorted set (a semaphore).
    permits: Option<u64>,
    line: u64,
    record: Option<Published>,
    /// The labels of the live permits or readers that published one: (digest, label, since).
    members: Vec<(String, String, Option<u64>)>,
}

#[derive(Debug, Serialize)]
struct Report {
    key: String,
    /// mutex, fair, read-write or semaphore (as found on the nodes).
    kind: &'static str,
    nodes: usize,
    quorum: usize,
    reachable: usize,
    verdict: &'static str,
    /// Nodes holding the most common holder's entry.
    held_by: usize,
    /// Reachable nodes where the key is free (for its kind).
    free: usize,
    /// The permit count given with `--permits` (semaphores).
    #[serde(skip_serializing_if = "Option::is_none")]
    permits: Option<u32>,
    /// The quorum is every node because the key is a semaphore of more than one permit.
    #[serde(skip)]
    every_node: bool,
    /// The holder record of the holder a quorum shows, if it published one.
    #[serde(skip_serializing_if = "Option::is_none")]
    holder: Option<Published>,
    /// The labels of the permits or readers that a quorum shows with one, oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    labels: Vec<Published>,
    node_status: Vec<NodeView>,
}

/// A semaphore of slots (`--permits P`, P > 1, where the key itself keeps no counted
/// permits): each slot's report, and how many a quorum shows held.
#[derive(Debug, Serialize)]
struct SlotsReport {
    key: String,
    kind: &'static str,
    permits: u32,
    /// Slots a quorum shows held.
    held: usize,
    /// full (every slot held), taken, free, or unknown (a slot's nodes could tip it).
    verdict: &'static str,
    slots: Vec<Report>,
}

pub async fn status(settings: &Settings, args: &StatusArgs) -> Result<u8, Failure> {
    let report = read_report(settings, &args.key, args.permits).await?;
    let permits = args
        .permits
        .filter(|&p| p > 1 && report.kind != "semaphore");
    let Some(permits) = permits else {
        let unknown = report.verdict == "unknown";
        print(args.json, &report, || plain(&report))?;
        return Ok(if unknown { exit::UNAVAILABLE } else { exit::OK });
    };
    // Sixteen slots read at once (each slot's nodes at once too): a frozen node costs each
    // slot its connect timeout, not each slot in turn.
    let reads = futures::StreamExt::map(futures::stream::iter(0..permits), |i| {
        let slot = text_name(quorum_lock::names::semaphore_slot(args.key.as_bytes(), i));
        async move { read_report(settings, &slot, None).await }
    });
    let reads = futures::StreamExt::buffered(reads, 16);
    let slots: Vec<Report> = futures::StreamExt::collect::<Vec<_>>(reads)
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    let held = slots.iter().filter(|r| r.verdict == "held").count();
    let unknown = slots.iter().any(|r| r.verdict == "unknown");
    let verdict = match held {
        h if h == permits as usize => "full",
        _ if unknown => "unknown",
        0 => "free",
        _ => "taken",
    };
    let all = SlotsReport {
        key: args.key.clone(),
        kind: "semaphore-slots",
        permits,
        held,
        verdict,
        slots,
    };
    print(args.json, &all, || {
        let mut out = format!(
            "key {:?} (semaphore of {permits} slots): {held} of {permits} held, {verdict}\n",
            all.key
        );
        for slot in &all.slots {
            out.push('\n');
            out.push_str(&plain(slot));
        }
        out
    })?;
    Ok(if verdict == "unknown" {
        exit::UNAVAILABLE
    } else {
        exit::OK
    })
}

/// Prints `report` as JSON, or as `text` makes it.
fn print<T: Serialize>(
    json: bool,
    report: &T,
    text: impl FnOnce() -> String,
) -> Result<(), Failure> {
    if json {
        let json = serde_json::to_string(report)
            .map_err(|e| Failure::new(exit::SOFTWARE, format!("encoding JSON: {e}")))?;
        exit::print(&format!("{json}\n"))
    } else {
        exit::print(&text())
    }
}

/// What the nodes show of `key` (with `permits`, the count of a counted semaphore).
async fn read_report(
    settings: &Settings,
    key: &str,
    permits: Option<u32>,
) -> Result<Report, Failure> {
    let required = settings.required()?;
    let nodes = settings.node_clients()?;
    let answers = join_all(nodes.iter().map(|node| read_node(settings, node, key))).await;
    direct::misconfigured(answers.iter().filter_map(|a| a.as_ref().err()))?;
    // A key cluster nodes refuse: the answer `run` gives (64), not "unreachable".
    if let Some(NodeError::Refused(e)) = answers.iter().find_map(|a| match a {
        Err(e @ NodeError::Refused(_)) => Some(e),
        _ => None,
    }) {
        return Err(Failure::from_lock(e, &exit::Context::NONE));
    }

    let kind = kind(answers.iter().filter_map(|a| a.as_ref().ok()));
    // Holder values become numbers here and are dropped: nothing below can print them.
    let mut holders: HashMap<String, usize> = HashMap::new();
    let mut counts: Vec<usize> = Vec::new();
    let mut views = Vec::with_capacity(nodes.len());
    let mut members: HashMap<String, Vec<(String, Option<u64>)>> = HashMap::new();
    for (node, answer) in nodes.iter().zip(answers) {
        let view = match answer {
            Ok(mut raw) => {
                for (digest, label, since) in std::mem::take(&mut raw.members) {
                    members.entry(digest).or_default().push((label, since));
                }
                // A tombstone has a space, which no holder value has.
                let broken = raw.holder.as_deref().is_some_and(|h| h.contains(' '));
                if broken {
                    raw.holder = None;
                }
                let holder = raw.holder.map(|h| {
                    let next = holders.len() + 1;
                    let n = *holders.entry(h).or_insert(next);
                    if counts.len() < n {
                        counts.push(0);
                    }
                    counts[n - 1] += 1;
                    n
                });
                NodeView {
                    node: node.name().to_string(),
                    reachable: true,
                    error: None,
                    held: holder.is_some(),
                    broken,
                    holder,
                    ttl_ms: raw.pttl.filter(|_| holder.is_some() || broken),
                    fence: raw.fence,
                    readers: (kind == "read-write").then_some(raw.readers),
                    writer_waiting: raw.writer_waiting,
                    permits: raw.permits,
                    line: (kind == "fair").then_some(raw.line),
                    record: raw.record,
                }
            }
            Err(e) => NodeView {
                node: node.name().to_string(),
                reachable: false,
                error: Some(e.reason()),
                held: false,
                broken: false,
                holder: None,
                ttl_ms: None,
                fence: None,
                readers: None,
                writer_waiting: false,
                permits: None,
                line: None,
                record: None,
            },
        };
        views.push(view);
    }
    // A semaphore of more than one permit is taken on every node (`Quorum::All`), whatever
    // the configured quorum.
    let all_nodes = kind == "semaphore"
        && (permits.is_some_and(|p| p > 1) || views.iter().any(|v| v.permits > Some(1)));
    let required = if all_nodes { nodes.len() } else { required };
    let reachable = views.iter().filter(|v| v.reachable).count();
    let unreachable = nodes.len() - reachable;
    let held_by = counts.iter().copied().max().unwrap_or(0);
    // The record of the most common holder (the one a quorum may show).
    let most = (1..=counts.len()).max_by_key(|&n| counts[n - 1]);
    let holder = views
        .iter()
        .filter(|v| v.holder.is_some() && v.holder == most)
        .find_map(|v| v.record.clone());
    // Where the key is free for a new holder of its kind: no entry (mutex, fair, writer);
    // for a read-write lock, no writer and no reader either; for a semaphore, a permit left
    // (when the count is known) or none taken.
    let free = views
        .iter()
        .filter(|v| v.reachable)
        .filter(|v| match kind {
            "semaphore" => match permits {
                Some(p) => v.permits.unwrap_or(0) < u64::from(p),
                None => v.permits.unwrap_or(0) == 0,
            },
            "read-write" => !v.held && v.readers.unwrap_or(0) == 0,
            _ => !v.held && !v.broken,
        })
        .count();
    let taken = match kind {
        "semaphore" => reachable - free,
        "read-write" => views
            .iter()
            .filter(|v| v.reachable && v.readers.unwrap_or(0) > 0)
            .count()
            .max(held_by),
        _ => held_by,
    };
    let broken = views.iter().filter(|v| v.broken).count();
    let mut labels: Vec<Published> = members
        .into_values()
        .filter(|shown| shown.len() >= required)
        .map(|shown| Published {
            label: Some(shown[0].0.clone()),
            since_ms: shown[0].1,
            ..Published::default()
        })
        .collect();
    labels.sort_by_key(|p| p.since_ms);
    let verdict = if held_by >= required {
        "held"
    } else if broken >= required {
        "broken"
    } else if kind == "read-write" && taken >= required {
        "read"
    } else if kind == "semaphore" && taken >= required {
        if permits.is_some() {
            "full"
        } else {
            "taken"
        }
    } else if free >= required {
        "free"
    } else if taken + unreachable >= required || free + unreachable >= required {
        // The nodes that did not answer could tip it either way.
        "unknown"
    } else {
        "split"
    };
    Ok(Report {
        key: key.to_string(),
        kind,
        nodes: nodes.len(),
        quorum: required,
        reachable,
        verdict,
        held_by,
        free,
        permits,
        every_node: all_nodes,
        holder: holder.filter(|_| verdict == "held"),
        labels,
        node_status: views,
    })
}

/// Whether a holder value a node keeps is a fair lock's (read by the library's [`Holder`]).
fn is_fair(value: &str) -> bool {
    Holder::parse(value).is_ok_and(|h| h.form() == HolderForm::Fair)
}

/// The kind of lock the nodes keep at the key: a semaphore's sorted set, a read-write lock's
/// readers or writer mark, a fair lock's line or holder value (`fair:...`, whose prefix and
/// waiter id are not secret), else a mutex.
fn kind<'a>(answers: impl Iterator<Item = &'a Raw> + Clone) -> &'static str {
    if answers.clone().any(|r| r.permits.is_some()) {
        "semaphore"
    } else if answers.clone().any(|r| r.readers > 0 || r.writer_waiting) {
        "read-write"
    } else if answers
        .clone()
        .any(|r| r.line > 0 || r.holder.as_deref().is_some_and(is_fair))
    {
        "fair"
    } else {
        "mutex"
    }
}

/// The key's kind and state on one node, within the connect timeout (a diagnostic may wait
/// longer than a lock call would). Expired members (readers, permits, waiters) are not
/// counted: they are compared with the node's own clock.
async fn read_node(settings: &Settings, node: &NodeClient, key: &str) -> Result<Raw, NodeError> {
    let limit = settings.connect_timeout;
    let mut conn = direct::connect(node, limit, limit).await?;
    if let Err(refused) = quorum_lock::names::check_cluster_key(key.as_bytes()) {
        let mut info = redis::cmd("INFO");
        info.arg("cluster");
        let info = direct::query(node, &mut conn, &info, limit).await?;
        if text(&info).is_some_and(|t| t.contains("cluster_enabled:1")) {
            return Err(NodeError::Refused(refused));
        }
    }
    // A cluster node: read from the member serving the key's slot (every name of the lock is
    // in that slot).
    let given = node.name().to_string();
    let (node, conn) = serving(node, conn, key, limit).await?;
    let node = &node;
    let ask = |cmd: redis::Cmd| {
        let node = node.clone();
        let mut conn = conn.clone();
        let given = given.clone();
        async move {
            // A member's failure is the member's, named so.
            direct::query(&node, &mut conn, &cmd, limit)
                .await
                .map_err(|e| match node.name() == given {
                    true => e,
                    false => NodeError::Member(node.name().to_string(), Box::new(e)),
                })
        }
    };
    let cmd = |name: &str, args: &[&str]| {
        let mut c = redis::cmd(name);
        for a in args {
            c.arg(*a);
        }
        c
    };
    let time = ask(cmd("TIME", &[])).await?;
    let now_ms = match &time {
        redis::Value::Array(t) => match (t.first().and_then(int), t.get(1).and_then(int)) {
            (Some(s), Some(us)) => s * 1000 + us / 1000,
            _ => 0,
        },
        _ => 0,
    };
    let live = format!("({now_ms}");
    let mut raw = Raw::default();
    let record = text_name(quorum_lock::names::holder_record(key.as_bytes()));
    match text(&ask(cmd("TYPE", &[key])).await?).as_deref() {
        Some("zset") => {
            raw.permits =
                int(&ask(cmd("ZCOUNT", &[key, &live, "+inf"])).await?).map(|n| n.max(0) as u64);
            let found = ask(cmd("ZRANGEBYSCORE", &[key, &live, "+inf"])).await?;
            raw.members = member_labels(&found, ask(cmd("HGETALL", &[&record])).await.ok());
        }
        Some("string") => {
            raw.holder = text(&ask(cmd("GET", &[key])).await?);
            if let Some(holder) = &raw.holder {
                let fields = ["h", "label", "since", "value", "term"];
                let mut args = vec![record.as_str()];
                args.extend(fields);
                // Optional: a node whose ACL rule predates holder records refuses the read,
                // and the entry is shown without its record.
                let answer = ask(cmd("HMGET", &args)).await;
                raw.record = answer.ok().and_then(|a| published(&a, holder));
            }
            // -2: no key (it expired between the two commands), -1: no TTL.
            raw.pttl = int(&ask(cmd("PTTL", &[key])).await?).filter(|&t| t != -2);
        }
        _ => {}
    }
    let readers = text_name(quorum_lock::names::readers(key.as_bytes()));
    raw.readers = int(&ask(cmd("ZCOUNT", &[&readers, &live, "+inf"])).await?).unwrap_or(0) as u64;
    if raw.readers > 0 {
        let found = ask(cmd("ZRANGEBYSCORE", &[&readers, &live, "+inf"])).await?;
        raw.members = member_labels(&found, ask(cmd("HGETALL", &[&record])).await.ok());
    }
    let mark = text_name(quorum_lock::names::writer_mark(key.as_bytes()));
    raw.writer_waiting = int(&ask(cmd("EXISTS", &[&mark])).await?) == Some(1);
    let leases = text_name(quorum_lock::names::line_leases(key.as_bytes()));
    raw.line = int(&ask(cmd("ZCOUNT", &[&leases, &live, "+inf"])).await?).unwrap_or(0) as u64;
    let fence = text_name(quorum_lock::names::fencing_counter(key.as_bytes()));
    raw.fence = int(&ask(cmd("GET", &[&fence])).await?);
    Ok(raw)
}

/// The labels of the live members `found` (permits, readers) in their key's holder record
/// (`record`, HGETALL; fields "<digest> label" and "<digest> since"): (digest, label, since).
/// Optional, as the record read is.
fn member_labels(
    found: &redis::Value,
    record: Option<redis::Value>,
) -> Vec<(String, String, Option<u64>)> {
    let (redis::Value::Array(found), Some(redis::Value::Array(record))) = (found, record) else {
        return Vec::new();
    };
    let fields: HashMap<String, String> = record
        .chunks(2)
        .filter_map(|pair| Some((text(pair.first()?)?, text(pair.get(1)?)?)))
        .collect();
    found
        .iter()
        .filter_map(text)
        .filter(|m| !m.contains(' '))
        .filter_map(|m| {
            let digest = sha1_smol::Sha1::from(&m).digest().to_string();
            let label = fields.get(&format!("{digest} label"))?.clone();
            let since = fields
                .get(&format!("{digest} since"))
                .and_then(|s| s.parse().ok());
            Some((digest, label, since))
        })
        .collect()
}

/// A holder record's fields (HMGET h label since value term), where it names `holder`.
fn published(answer: &redis::Value, holder: &str) -> Option<Published> {
    let redis::Value::Array(fields) = answer else {
        return None;
    };
    let field = |i: usize| fields.get(i).and_then(text);
    let digest = sha1_smol::Sha1::from(holder).digest().to_string();
    (field(0)? == digest).then(|| Published {
        label: field(1),
        since_ms: field(2).and_then(|s| s.parse().ok()),
        leader_value: field(3),
        term: field(4).and_then(|t| t.parse().ok()),
    })
}

/// The member that serves `key`: `node` itself, or, when it answers `MOVED` (a cluster
/// member that does not serve the key's slot), the member it names.
async fn serving(
    node: &NodeClient,
    mut conn: redis::aio::MultiplexedConnection,
    key: &str,
    limit: std::time::Duration,
) -> Result<(NodeClient, redis::aio::MultiplexedConnection), NodeError> {
    let mut probe = redis::cmd("TYPE");
    probe.arg(key);
    let moved = match tokio::time::timeout(limit, conn.send_packed_command(&probe)).await {
        Ok(Ok(redis::Value::ServerError(e))) => redis::RedisError::from(e)
            .redirect_node()
            .and_then(|(to, _)| to.rsplit_once(':'))
            .and_then(|(host, port)| Some((host.to_string(), port.parse::<u16>().ok()?))),
        _ => None,
    };
    let Some((host, port)) = moved else {
        return Ok((node.clone(), conn));
    };
    let member = node
        .at(host.trim_start_matches('[').trim_end_matches(']'), port)
        .map_err(|e| {
            NodeError::Failed(node.failure(&redis::RedisError::from((
                redis::ErrorKind::Client,
                "MOVED to an address that is not one",
                e.to_string(),
            ))))
        })?;
    // Its failures are the member's, named so: not the member given, which answered.
    let named = |e: NodeError| NodeError::Member(member.name().to_string(), Box::new(e));
    let conn = direct::connect(&member, limit, limit)
        .await
        .map_err(named)?;
    Ok((member, conn))
}

/// A key name as text (the CLI's keys are text, and so are the names made from them).
fn text_name(name: Vec<u8>) -> String {
    String::from_utf8_lossy(&name).into_owned()
}
